package hooks

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSettingsCheckedAtLoad: a hook that checks its settings (a reactor
// exporting paddock_validate_settings, a command module answering the
// settings request) stops NewChain with its name and message when it
// refuses them, and loads when it accepts them; a module that does not
// check them loads as before.
func TestSettingsCheckedAtLoad(t *testing.T) {
	t.Parallel()
	for _, mod := range []string{"settings-reactor", "settings-command"} {
		t.Run(mod, func(t *testing.T) {
			t.Parallel()
			path := wasmPath(t, "wat/"+mod)
			_, err := NewChain(context.Background(), ChainOptions{Hooks: []Config{
				{Name: "first", Path: wasmPath(t, "minimal")},
				{Name: "picky", Path: path, Settings: map[string]any{"home": "~/x"}},
			}})
			require.ErrorIs(t, err, ErrSettings)
			require.EqualError(t, err, `hooks: settings refused: hook "picky": no tildes in settings`)

			c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "picky", Path: path, Settings: map[string]any{"home": "/x"}}}})
			require.True(t, c.Hooks()[0].ValidatesSettings)
			res, _ := decide(t, c, testJob(""))
			require.Equal(t, VerdictAllow, res.Verdict, res.Reason)
		})
	}

	// A reactor whose check fails (traps) is refused too: fail closed.
	_, err := NewChain(context.Background(), ChainOptions{Hooks: []Config{
		{Name: "crashy", Path: wasmPath(t, "wat/settings-reactor"), Settings: map[string]any{"x": "!"}},
	}})
	require.ErrorIs(t, err, ErrSettings)
	require.Contains(t, err.Error(), `hook "crashy": paddock_validate_settings failed: hooks: trap: `)

	// Modules that do not check: a command module answering with a
	// decision, a reactor without the export.
	c := newTestChain(t, ChainOptions{Hooks: []Config{
		{Name: "cmd", Path: wasmPath(t, "minimal"), Settings: map[string]any{"home": "~"}},
		{Name: "reactor", Path: wasmPath(t, "minimal-reactor"), Settings: map[string]any{"home": "~"}},
	}})
	for _, h := range c.Hooks() {
		require.False(t, h.ValidatesSettings, h.Config.Name)
	}
}

func TestParseSettingsAnswer(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", MaxSettingsMessageBytes)
	for _, tc := range []struct {
		in       string
		isAnswer bool
		valid    bool
		msg      string
		err      string
	}{
		{in: `{"valid":true}`, isAnswer: true, valid: true},
		{in: ` {"valid":false,"message":"deny: expected a list"} `, isAnswer: true, msg: "deny: expected a list"},
		{in: `{"decision":"allow"}`},
		{in: `not json`},
		{in: `null`},
		{in: `{"valid":"yes"}`, isAnswer: true, err: `"valid" is not a boolean`},
		{in: `{"valid":true,"color":"red"}`, isAnswer: true, err: `unknown field "color"`},
		{in: `{"valid":true}{"valid":true}`, isAnswer: true, err: "trailing data"},
		{in: `{"valid":false,"message":7}`, isAnswer: true, err: `"message" is not a string`},
		{in: `{"valid":false,"message":"` + long + `"}`, isAnswer: true, msg: long[:MaxSettingsMessageBytes] + "..."},
	} {
		a, isAnswer, err := parseSettingsAnswer([]byte(tc.in))
		require.Equal(t, tc.isAnswer, isAnswer, tc.in)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		require.Equal(t, tc.valid, a.Valid, tc.in)
		require.Equal(t, tc.msg, a.Message, tc.in)
	}
}

// TestExampleHooksCheckSettings: the example hooks that take settings
// refuse bad ones at load, naming the key.
func TestExampleHooksCheckSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mod      string
		good     map[string]any
		bad      map[string]any
		contains string
	}{
		{"denylist", map[string]any{"deny": []string{"curl"}}, map[string]any{"deny": []string{"/usr/bin/curl"}}, `deny: "/usr/bin/curl" is not a program name`},
		{"denylist", nil, map[string]any{"denny": []string{"curl"}}, `settings: unknown key "denny" (this hook takes deny and strict)`},
		{"tighten", map[string]any{"dry_run": []string{"rsync"}}, map[string]any{"dry_rn": []string{"rsync"}}, `tighten: settings: unknown key "dry_rn"`},
	} {
		c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: tc.mod, Path: wasmPath(t, tc.mod), Settings: tc.good}}})
		require.True(t, c.Hooks()[0].ValidatesSettings, tc.mod)
		_, err := NewChain(context.Background(), ChainOptions{Hooks: []Config{{Name: tc.mod, Path: wasmPath(t, tc.mod), Settings: tc.bad}}})
		require.ErrorIs(t, err, ErrSettings, tc.mod)
		require.ErrorContains(t, err, `hook "`+tc.mod+`": `)
		require.ErrorContains(t, err, tc.contains)
	}
}

package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		argv   []string
		strict bool
		deny   bool
	}{
		{argv: []string{"echo", "curl"}},
		{argv: []string{"grep", "-r", "wget", "."}},
		{argv: []string{"curl", "https://x"}, deny: true},
		{argv: []string{"/usr/bin/curl", "https://x"}, deny: true},
		{argv: []string{"env", "-i", "FOO=1", "BAR=2", "curl"}, deny: true},
		{argv: []string{"env", "-u", "HOME", "--chdir=/tmp", "--", "wget", "x"}, deny: true},
		{argv: []string{"env", "-S", "curl -s x"}, deny: true},
		{argv: []string{"env", "FOO=1", "echo", "curl"}},
		{argv: []string{"sudo", "-u", "root", "-E", "curl"}, deny: true},
		{argv: []string{"sudo", "--user", "root", "HOME=/", "/bin/curl"}, deny: true},
		{argv: []string{"nice", "-n", "10", "curl"}, deny: true},
		{argv: []string{"nice", "-5", "curl"}, deny: true},
		{argv: []string{"timeout", "-s", "KILL", "10s", "curl"}, deny: true},
		{argv: []string{"timeout", "10s", "echo", "curl"}},
		{argv: []string{"nohup", "curl"}, deny: true},
		{argv: []string{"sudo", "nice", "timeout", "5", "env", "A=1", "curl"}, deny: true},
		{argv: []string{"sh", "-c", "echo hi; curl x"}, deny: true},
		{argv: []string{"bash", "-lc", "cd /tmp && FOO=1 wget x | tee y"}, deny: true},
		{argv: []string{"bash", "-e", "-o", "pipefail", "-c", "if true; then sudo curl x; fi"}, deny: true},
		{argv: []string{"sh", "-c", "echo curl; grep wget log"}},
		{argv: []string{"sh", "-c", "sh -c 'curl x'"}, deny: true},
		{argv: []string{"sh", "-c", `echo "$(c\url x)"`}, deny: true},
		{argv: []string{"sh", "-c", `echo "no curl here"`}, deny: true}, // fail closed
		{argv: []string{"sh", "-c", `echo "fine"`}},
		{argv: []string{"sh", "-c", `echo "fine"`}, strict: true, deny: true},
		{argv: []string{"sh", "script.sh"}},
		{argv: []string{"busybox", "wget", "x"}, deny: true},
		{argv: []string{"xargs", "-n", "1", "curl"}, deny: true},
	} {
		req := map[string]any{
			"hook": map[string]any{"settings": map[string]any{"deny": []string{"curl", "wget"}, "strict": tc.strict}},
			"job":  map[string]any{"argv": tc.argv},
		}
		data, err := json.Marshal(req)
		require.NoError(t, err)
		d, err := decide(data)
		require.NoError(t, err)
		want := "allow"
		if tc.deny {
			want = "deny"
			require.NotEmpty(t, d.Reason)
		}
		require.Equal(t, want, d.Decision, "%q: %s", tc.argv, d.Reason)
	}
}

func TestSettingsErrors(t *testing.T) {
	t.Parallel()
	_, err := decide([]byte(`{"hook":{"settings":{"denny":["curl"]}},"job":{"argv":["curl"]}}`))
	require.ErrorContains(t, err, "denny")
}

// TestValidateSettings: the settings check paddock makes at load.
func TestValidateSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		settings string
		msg      string // "" when valid
	}{
		{settings: `{"deny":["curl","wget"],"strict":true}`},
		{settings: `{}`},
		{settings: `{"denny":["curl"]}`, msg: `settings: unknown key "denny" (this hook takes deny and strict)`},
		{settings: `{"deny":"curl"}`, msg: "settings: deny: expected a list of program names, got a string"},
		{settings: `{"deny":[1]}`, msg: "settings: deny: expected a list of program names, got a number"},
		{settings: `{"strict":"yes"}`, msg: "settings: strict: expected true or false, got a string"},
		{settings: `["curl"]`, msg: "settings: expected a table (deny, strict), got a list"},
		{settings: `{"deny":["/usr/bin/curl"]}`, msg: `"/usr/bin/curl" is not a program name`},
		{settings: `{"deny":[""]}`, msg: `"" is not a program name`},
	} {
		out, err := handle([]byte(`{"version":1,"validate_settings":true,"hook":{"name":"d","settings":` + tc.settings + `}}`))
		require.NoError(t, err)
		a := out.(settingsAnswer)
		require.Equal(t, tc.msg == "", a.Valid, tc.settings)
		require.Contains(t, a.Message, tc.msg, tc.settings)
	}
}

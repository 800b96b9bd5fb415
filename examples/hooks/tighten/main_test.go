package main

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		argv     []string
		mode     string
		settings map[string]any
		want     string
		wantArgv []string
		wantMode string
	}{
		{argv: []string{"git", "commit", "-m", "x"}, mode: "workspace_write", want: "allow"},
		{argv: []string{"git", "-C", "/repo", "log"}, mode: "workspace_write", want: "adjust", wantMode: "read_only"},
		{argv: []string{"/usr/bin/git", "push"}, mode: "danger_full_access", want: "adjust", wantMode: "read_only"},
		{argv: []string{"git", "push"}, mode: "read_only", want: "allow"},
		{argv: []string{"git", "add", "."}, mode: "workspace_write", settings: map[string]any{"git_write": []string{"commit"}}, want: "adjust", wantMode: "read_only"},
		{argv: []string{"rsync", "-a", "src/", "dst/"}, settings: map[string]any{"dry_run": []string{"rsync"}}, want: "adjust", wantArgv: []string{"rsync", "--dry-run", "-a", "src/", "dst/"}},
		{argv: []string{"rsync", "--dry-run", "a", "b"}, settings: map[string]any{"dry_run": []string{"rsync"}}, want: "allow"},
		{argv: []string{"echo"}, settings: map[string]any{"colour": "red"}, want: "deny"},
	} {
		req := map[string]any{"hook": map[string]any{"settings": tc.settings}, "job": map[string]any{"argv": tc.argv, "mode": tc.mode}}
		data, err := json.Marshal(req)
		require.NoError(t, err)
		var d struct {
			Decision string
			Reason   string
			Job      *struct {
				Argv []string
				Mode string
			}
		}
		require.NoError(t, json.Unmarshal(decide(data), &d))
		require.Equal(t, tc.want, d.Decision, "%q: %s", tc.argv, d.Reason)
		if tc.want == "adjust" {
			require.Equal(t, tc.wantMode, d.Job.Mode)
			require.Equal(t, tc.wantArgv, d.Job.Argv)
		}
	}
}

// TestValidateSettings: the settings check paddock makes at load.
func TestValidateSettings(t *testing.T) {
	for _, tc := range []struct {
		settings string
		msg      string // "" when valid
	}{
		{settings: `{"dry_run":["rsync"],"git_write":["commit"]}`},
		{settings: `{}`},
		{settings: `null`},
		{settings: `{"colour":"red"}`, msg: `unknown key "colour"`},
		{settings: `{"dry_run":"rsync"}`, msg: "dry_run: not a list of strings"},
		{settings: `{"dry_run":["/usr/bin/rsync"]}`, msg: `dry_run: "/usr/bin/rsync" is not a name`},
		{settings: `{"git_write":[""]}`, msg: `git_write: "" is not a name`},
	} {
		var a struct {
			Valid   bool
			Message string
		}
		out := validateSettings([]byte(`{"version":1,"validate_settings":true,"hook":{"name":"t","settings":` + tc.settings + `}}`))
		require.NoError(t, json.Unmarshal(out, &a), string(out))
		require.Equal(t, tc.msg == "", a.Valid, tc.settings)
		require.Contains(t, a.Message, tc.msg, tc.settings)
	}
}

func TestParseJSON(t *testing.T) {
	for _, in := range []string{`{}`, `[]`, `"a\u00e9\ud83d\ude00\n"`, `{"a":[1,-2.5e3,true,false,null,{"b":"c"}]}`, ` 1 `} {
		v, err := parseJSON([]byte(in))
		require.NoError(t, err, in)
		var want any
		require.NoError(t, json.Unmarshal([]byte(in), &want))
		require.Equal(t, want, toAny(v), in)
	}
	for _, in := range []string{``, `{`, `{"a"}`, `[1,]`, `"\x"`, `{} {}`, `tru`, `"a` + "\n" + `b`} {
		_, err := parseJSON([]byte(in))
		require.Error(t, err, in)
	}
	b := appendString(nil, "q\"\\\n\x01é")
	var s string
	require.NoError(t, json.Unmarshal(b, &s))
	require.Equal(t, "q\"\\\n\x01é", s)
}

func toAny(v value) any {
	switch v.kind {
	case 'o':
		m := map[string]any{}
		for i, k := range v.keys {
			m[k] = toAny(v.arr[i])
		}
		return m
	case 'a':
		out := []any{}
		for _, e := range v.arr {
			out = append(out, toAny(e))
		}
		return out
	case 's':
		return v.str
	case 'n':
		f, _ := strconv.ParseFloat(v.str, 64)
		return f
	case 'b':
		return v.str == "true"
	}
	return nil
}

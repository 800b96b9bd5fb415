package main

import (
	"encoding/json"
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
		lastRaw = nil
		var d decision
		require.NoError(t, json.Unmarshal(decide(data), &d))
		require.Equal(t, tc.want, d.Decision, "%q: %s", tc.argv, d.Reason)
		if tc.want == "adjust" {
			require.Equal(t, tc.wantMode, d.Job.Mode)
			require.Equal(t, tc.wantArgv, d.Job.Argv)
		}
	}
}

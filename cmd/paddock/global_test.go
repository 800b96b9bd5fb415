package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDefaultPathsBwrapOnPath: every $PATH place where a bwrap would be
// found before the one exec.LookPath finds is protected; a directory or a
// non-executable file named bwrap does not end the list (LookPath skips
// them), the executable one does.
func TestDefaultPathsBwrapOnPath(t *testing.T) {
	root := t.TempDir()
	dirA, fileB, realC, afterD := filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c"), filepath.Join(root, "d")
	for _, d := range []string{dirA, fileB, realC, afterD} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dirA, "bwrap"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(fileB, "bwrap"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(realC, "bwrap"), nil, 0o755))
	t.Setenv("PATH", "relative:"+dirA+":"+fileB+":"+realC+":"+afterD)
	ps := defaultPaths()
	for _, d := range []string{dirA, fileB, realC} {
		require.Contains(t, ps, filepath.Join(d, "bwrap"))
	}
	require.NotContains(t, ps, filepath.Join(afterD, "bwrap"), "never reached")
	require.NotContains(t, ps, filepath.Join("relative", "bwrap"))
}

// TestCobraErrorsAreUsageErrors: an unknown flag, a flag that does not
// parse, a wrong number of arguments and an unknown command exit 2, like
// paddock's own bad input; `paddock run` keeps 1 for "the job exited 1".
func TestCobraErrorsAreUsageErrors(t *testing.T) {
	t.Setenv("PADDOCK_STATE_DIR", t.TempDir())
	for _, args := range [][]string{
		{"run", "--bogus", "x.toml"},
		{"run"},
		{"submit"},
		{"bogus-cmd"},
		{"ls", "--limit", "x"},
		{"worker", "--concurrency", "x"},
		{"schedules", "bogus"},
		{"hook", "bogus"},
	} {
		require.Equal(t, exitUsage, run(t.Context(), args), "paddock %v", args)
	}
	require.Equal(t, exitOK, run(t.Context(), []string{"--help"}))
}

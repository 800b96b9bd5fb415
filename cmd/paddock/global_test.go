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

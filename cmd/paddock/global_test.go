package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/cmd/internal/compose"
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
	ps := compose.DefaultPaths()
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

// TestNegativeNumberIsNotAFlag: a negative number given as an argument
// (`groups set NAME -1`) is reported as that, not as an unknown flag -1;
// a real unknown shorthand flag keeps cobra's words.
func TestNegativeNumberIsNotAFlag(t *testing.T) {
	t.Setenv("PADDOCK_STATE_DIR", t.TempDir())
	for args, want := range map[string]string{
		"groups set build -1": "paddock groups set: -1 is not a flag, and no argument of it may be negative",
		"groups set build -z": "unknown shorthand flag: 'z' in -z",
	} {
		root := newRootCommand(&GlobalOptions{})
		root.SetArgs(strings.Fields(args))
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.ExecuteContext(t.Context())
		var ue *usageError
		require.ErrorAs(t, err, &ue, args)
		require.ErrorContains(t, err, want, args)
	}
}

// TestWorkerProcs: the worker leaves the CPUs its job slots fill to the
// jobs (one processor per four slots), uses the ones they leave free
// plus one, never more than the runtime's default, and leaves GOMAXPROCS
// alone when the user set it.
func TestWorkerProcs(t *testing.T) {
	for _, c := range []struct{ concurrency, cpus, want int }{
		{1, 2, 2}, {2, 2, 1}, {3, 2, 1}, {8, 2, 2}, {100, 2, 2},
		{1, 1, 1}, {4, 1, 1},
		{1, 16, 16}, {8, 16, 9}, {16, 16, 4}, {64, 16, 16}, {17, 16, 5},
		{1, 0, 1},
	} {
		got, set := workerProcs(c.concurrency, c.cpus, "")
		require.True(t, set)
		require.Equal(t, c.want, got, "concurrency %d on %d CPUs", c.concurrency, c.cpus)
	}
	_, set := workerProcs(2, 2, "2")
	require.False(t, set, "GOMAXPROCS set by the user is left alone")
	for _, env := range []string{"0", "bogus", "-1"} {
		got, set := workerProcs(2, 2, env)
		require.True(t, set, "GOMAXPROCS=%s, which the runtime ignores", env)
		require.Equal(t, 1, got)
	}
}

// A wrong number of arguments is said in the words of the usage line,
// not cobra's ("requires at least 1 arg(s), only received 0").
func TestArgsErrorWords(t *testing.T) {
	t.Setenv("PADDOCK_STATE_DIR", t.TempDir())
	for want, args := range map[string][]string{
		"paddock cancel takes ID|NAME..., got none (see paddock cancel --help)": {"cancel"},
		"paddock ls takes no arguments, got 1: foo (see paddock ls --help)":     {"ls", "foo"},
		"paddock show takes ID|NAME, got 2: a 'b c' (see paddock show --help)":  {"show", "a", "b c"},
	} {
		root := newRootCommand(&GlobalOptions{})
		root.SetArgs(args)
		err := root.Execute()
		var ue *usageError
		require.ErrorAs(t, err, &ue)
		require.Equal(t, want, err.Error())
	}
}

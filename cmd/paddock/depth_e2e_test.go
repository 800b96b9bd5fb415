package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
)

// deepJob is a job file of 5 MB whose line 3 opens five million arrays:
// the TOML decoder recurses once per array, and the stack overflow
// that made was fatal (no recover catches it).
func deepJob(name string) string {
	return fmt.Sprintf("name = %q\ncommand = \"true\"\nx = %s\n", name, strings.Repeat("[", 5_000_000))
}

// deepMsg is what paddock says of deepJob's file.
func deepMsg(file string) string {
	return file + ":3: x: nesting deeper than 256 levels"
}

// A job file nested too deep is refused by submit, check and run with a
// usage error (2) naming its line, from a path or from standard input,
// and nothing is enqueued.
func TestE2EDeepNestingRefused(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	deep := b.WriteJob("deep.toml", deepJob("deep"))
	for _, cmd := range []string{"submit", "check", "run"} {
		_, errOut, code := b.Run(cmd, deep)
		require.Equal(t, 2, code, "%s: %s", cmd, errOut)
		require.Contains(t, errOut, deepMsg("deep.toml"), cmd)
		require.NotContains(t, errOut, "stack overflow", cmd)
	}
	_, errOut, code := b.RunIn("", deepJob("deep"), "submit", "-")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, deepMsg("<stdin>"))
	requireNothingQueued(t, b)

	// The queue's policy is TOML too.
	pol := b.WriteJob("policy.toml", "max_mode = "+strings.Repeat("{a = ", 1_000_000)+"\n")
	_, errOut, code = b.Run("policy", "set", pol)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "policy.toml:1: max_mode: nesting deeper than 256 levels")
}

// A worker keeps running when a file nested too deep lands in its inbox,
// and when one waits in the inbox's processing/ as it starts (a crash
// there once made every later start crash too): both go to rejected/
// with their .error, the job running meanwhile finishes, and a good
// file dropped after is still taken.
func TestE2EWorkerRejectsDeepInboxFile(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	inbox := filepath.Join(b.State, "inbox")
	require.NoError(t, os.MkdirAll(filepath.Join(inbox, ".processing"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(inbox, ".processing", "left.toml"), []byte(deepJob("left")), 0o644))
	ws := t.TempDir()
	b.Submit(b.WriteJob("slow.toml", fmt.Sprintf("name = \"slow\"\nmode = \"workspace_write\"\nworkspace = %q\ncommand = \"touch started; sleep 2\"\n", ws)))

	w := b.StartWorker("--concurrency", "1")
	b.WaitState("slow", 30*time.Second, "running", "succeeded")
	require.NoError(t, os.WriteFile(filepath.Join(inbox, "deep.toml"), []byte(deepJob("deep")), 0o644))

	for _, name := range []string{"left.toml", "deep.toml"} {
		errFile := filepath.Join(inbox, "rejected", name+".error")
		deadline := time.Now().Add(30 * time.Second)
		for {
			if _, err := os.Stat(errFile); err == nil {
				break
			}
			require.NoError(t, w.Process.Signal(syscall.Signal(0)), "the worker is gone")
			require.False(t, time.Now().After(deadline), "%s was never rejected", name)
			time.Sleep(50 * time.Millisecond)
		}
		msg, err := os.ReadFile(errFile)
		require.NoError(t, err)
		require.Contains(t, string(msg), deepMsg(name))
		require.FileExists(t, filepath.Join(inbox, "rejected", name))
	}
	require.NoFileExists(t, filepath.Join(inbox, ".processing", "left.toml"))

	require.Equal(t, "succeeded", b.WaitState("slow", 30*time.Second, "succeeded", "failed", "interrupted").State)
	require.NoError(t, os.WriteFile(filepath.Join(inbox, "good.toml"), []byte("name = \"good\"\nmode = \"read_only\"\ncommand = [\"/bin/true\"]\n"), 0o644))
	require.Equal(t, "succeeded", b.WaitState("good", 30*time.Second, "succeeded", "failed").State)
	require.NoError(t, w.Process.Signal(syscall.Signal(0)), "the worker is still running")
	requireNoJob(t, b, "deep")
	requireNoJob(t, b, "left")
}

// requireNoJob fails t when b's queue knows a job called name.
func requireNoJob(t *testing.T, b *e2etest.Bundle, name string) {
	t.Helper()
	for _, j := range b.List() {
		require.NotEqual(t, name, j.Name)
	}
}

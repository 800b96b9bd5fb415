package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/hooks"
	"paddock/internal/e2etest"
)

// hostileWat is a hand-written hostile module of hooks/testdata/wat,
// assembled: hostile for jobs with a "~" in their argv.
func hostileWat(t *testing.T, name string) string {
	return e2etest.Wat(t, filepath.Join("..", "..", "hooks", "testdata", "wat", name+".wat"))
}

// hostileHooksConfig is a config whose chain is a recursive command module
// (optional: only for jobs that ask for it) and a recursive reactor, each
// with timeout.
func hostileHooksConfig(t *testing.T, timeout string) string {
	return e2etest.DefaultConfig + fmt.Sprintf(`
[[hook]]
name = "recurse-command"
path = %q
timeout = %q
optional = true

[[hook]]
name = "recurse-reactor"
path = %q
timeout = %q
`, hostileWat(t, "fib-command"), timeout, hostileWat(t, "fib-reactor"), timeout)
}

// A worker whose hooks recurse forever on some jobs (no loop instruction:
// wazero's own checks never run) denies each of them, "timed out", within
// twice the hooks' timeout, runs the next job, and stops on SIGTERM.
func TestE2EWorkerHostileHooksTimeOut(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, hostileHooksConfig(t, "1s"))
	ids := b.Submit(b.WriteJob("jobs.toml", `
[defaults]
mode = "read_only"

[[job]]
name = "spin-command"
command = ["echo", "~spin"]
hooks = ["recurse-command"]
priority = 3

[[job]]
name = "spin-reactor"
command = ["echo", "~spin"]
priority = 2

[[job]]
name = "next"
command = ["echo", "ran"]
priority = 1
`))
	w := b.StartWorker("--concurrency", "1")
	b.WaitState(ids[2], 60*time.Second, "succeeded")
	for i, hook := range []string{"recurse-command", "recurse-reactor"} {
		j := b.Show(ids[i])
		require.Equal(t, "denied", j.State, j.Reason)
		require.Contains(t, j.Reason, "hook "+hook+": hooks: timed out: did not finish within 1s")
		var trail []hooks.TrailEntry
		require.NoError(t, json.Unmarshal(j.Attempts[0].Trail, &trail))
		e := trail[len(trail)-1]
		require.Equal(t, hook, e.Hook)
		took := time.Duration(e.DurationUS) * time.Microsecond
		t.Logf("%s: denied after %v", hook, took)
		require.Less(t, took, 2*time.Second, "denied later than twice the timeout")
	}
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	state, err := w.Process.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, state.ExitCode(), "a graceful stop exits 0")
}

// SIGTERM while a decision is stuck in a recursing hook (a long timeout):
// the worker stops at once, not at the hook's timeout, and the job stays
// queued for the next worker.
func TestE2EWorkerStopsDuringHostileDecision(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, hostileHooksConfig(t, "10m"))
	ids := b.Submit(b.WriteJob("spin.toml", "name = \"spin\"\nmode = \"read_only\"\ncommand = [\"echo\", \"~spin\"]\n"))
	w := b.StartWorker("--concurrency", "1")
	b.WaitState(ids[0], 60*time.Second, "running")
	time.Sleep(500 * time.Millisecond) // inside the hook
	began := time.Now()
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { _, err := w.Process.Wait(); done <- err }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop within 30s of SIGTERM")
	}
	t.Logf("stopped %v after SIGTERM", time.Since(began).Round(time.Millisecond))
	require.NotEqual(t, "denied", b.Show(ids[0]).State, "an interrupted decision is no deny")
}

// paddock check, paddock run and paddock hook test each end a recursing
// hook's decision at its timeout: check and run deny (exit 1 and 126), hook
// test reports the deny (exit 1).
func TestE2ECheckRunHookTestHostileHooks(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, hostileHooksConfig(t, "1s"))
	job := b.WriteJob("spin.toml", "name = \"spin\"\nmode = \"read_only\"\ncommand = [\"echo\", \"~spin\"]\nhooks = [\"recurse-command\"]\n")
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"check", job}, 1},
		{[]string{"run", job}, 126},
		{[]string{"hook", "test", "--timeout", "1s", hostileWat(t, "fib-command"), "--", "echo", "~spin"}, 1},
		{[]string{"hook", "test", "--timeout", "1s", hostileWat(t, "fib-reactor"), "--", "echo", "~spin"}, 1},
	} {
		began := time.Now()
		out, errOut, code := b.Run(tc.args...)
		took := time.Since(began)
		t.Logf("%s: exit %d after %v", strings.Join(tc.args[:2], " "), code, took.Round(time.Millisecond))
		require.Equal(t, tc.code, code, "%s\n%s", out, errOut)
		require.Contains(t, out+errOut, "timed out")
		require.Less(t, took, 20*time.Second)
	}
}

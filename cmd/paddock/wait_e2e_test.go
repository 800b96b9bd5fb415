package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/runner"
)

// TestE2ESubmitWait: `submit --wait` with a worker already running waits
// for every job of the batch, in whatever order they end, prints each
// final, and exits 1 when one failed; `wait` on finished jobs returns at
// once; a wait with nothing running times out with exit 1.
func TestE2ESubmitWait(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	ws := t.TempDir()
	b.StartWorker("--concurrency", "2")
	// The worker creates its event log at start.
	require.Eventually(t, func() bool {
		_, err := os.Stat(runner.StateDir{Root: b.State}.EventLog())
		return err == nil
	}, 30*time.Second, 10*time.Millisecond)

	var src strings.Builder
	fmt.Fprintf(&src, "[defaults]\nmode = \"workspace_write\"\nworkspace = %q\n\n", ws)
	// Later jobs end first: the wait must not stop at the first pending one.
	for i := range 6 {
		fmt.Fprintf(&src, "[[job]]\nname = \"w-%d\"\ncommand = \"sleep 0.%d\"\n", i, 6-i)
	}
	src.WriteString("[[job]]\nname = \"w-fails\"\ncommand = \"exit 3\"\n")
	start := time.Now()
	out, errOut, code := b.Run("submit", "--wait", b.WriteJob("batch.toml", src.String()))
	took := time.Since(start)
	require.Equal(t, 1, code, "one job failed: %s", errOut)
	require.Contains(t, errOut, "1 of 7 job(s) did not succeed")
	for i := range 6 {
		require.Regexp(t, fmt.Sprintf(`(?m)^\S+\s+w-%d\s+succeeded`, i), out)
	}
	require.Regexp(t, `(?m)^\S+\s+w-fails\s+failed`, out)
	t.Logf("submit --wait of 7 jobs took %s", took)

	out, errOut, code = b.Run("wait", "w-0", "w-5")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "w-5")
	// The same job twice, by name and by id: one job to wait for, one
	// line (it once hung, counting final jobs against the refs).
	var id string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "w-5" {
			id = f[0]
		}
	}
	require.NotEmpty(t, id, out)
	out, errOut, code = b.Run("wait", "--timeout", "20s", "w-5", id, "w-5")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 1, strings.Count(out, "w-5"), out)
	require.Equal(t, 1, strings.Count(out, "\n"), out)

	// Nothing picks this one up: a second state directory, no worker.
	other := setupE2E(t, "")
	ids := other.Submit(other.WriteJob("one.toml", "name = \"lonely\"\ncommand = [\"/bin/true\"]\n"))
	_, errOut, code = other.Run("wait", "--timeout", "1s", ids[0])
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "timed out waiting; 0 of 1 jobs final")
	// Before it times out, it says a worker may be missing.
	require.Contains(t, errOut, "none of the 1 job(s) has started; is a worker running on this state directory")

	// Ctrl-C (or SIGTERM) ends a wait with 130, not 1: a script can tell
	// an interrupted wait from jobs that failed. The job goes on.
	// So does `logs -f` of a job not final (it once exited 0, as if the
	// job's output were complete).
	for i, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGINT} {
		args := []string{"wait", ids[0]}
		if i == 2 {
			args = []string{"logs", "-f", ids[0]}
		}
		var stderr strings.Builder
		wc := other.Cmd(context.Background(), args...)
		wc.Stderr = &stderr
		require.NoError(t, wc.Start())
		// Its signal handler is set before it opens the queue.
		waitOpen(t, wc.Process.Pid, databaseFile)
		require.NoError(t, wc.Process.Signal(sig))
		err := wc.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s: %s", sig, stderr.String())
		require.Equal(t, 130, ee.ExitCode(), "%s: %s", sig, stderr.String())
		require.Contains(t, stderr.String(), "interrupted")
		require.NotContains(t, stderr.String(), "context canceled")
	}
	require.Equal(t, "queued", other.Show(ids[0]).State)

	// Bad --timeout: a usage error, before anything is enqueued.
	_, errOut, code = other.Run("wait", "--timeout", "-1s", ids[0])
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "must not be negative")
	one := other.WriteJob("two.toml", "name = \"not-enqueued\"\ncommand = [\"/bin/true\"]\n")
	_, errOut, code = other.Run("submit", "--timeout", "5s", one)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "only with --wait")
	_, errOut, code = other.Run("submit", "--wait", "--timeout", "-5s", one)
	require.Equal(t, 2, code, errOut)
	_, _, code = other.Run("show", "not-enqueued")
	require.Equal(t, 2, code, "nothing was enqueued")
}

// waitOpen waits (up to 30 s) until process pid has a file named name open.
func waitOpen(t *testing.T, pid int, name string) {
	t.Helper()
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ents, _ := os.ReadDir(fds)
		for _, e := range ents {
			if l, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && filepath.Base(l) == name {
				return
			}
		}
	}
	t.Fatalf("process %d never opened %s", pid, name)
}

// TestE2ELogsFollowHintsAtMissingWorker: logs -f of a job that nothing
// starts says, after a while, that a worker may be missing, as wait
// does, and goes on waiting.
func TestE2ELogsFollowHintsAtMissingWorker(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	id := b.Submit(b.WriteJob("one.toml", "name = \"lonely\"\ncommand = [\"/bin/true\"]\n"))[0]
	ctx, cancel := context.WithTimeout(context.Background(), waitNoWorkerHint+10*time.Second)
	defer cancel()
	var stderr syncBuffer
	lc := b.Cmd(ctx, "logs", "-f", id)
	lc.Stderr = &stderr
	require.NoError(t, lc.Start())
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "is a worker running on this state directory") },
		waitNoWorkerHint+8*time.Second, 100*time.Millisecond, "logs -f said nothing: %s", stderr.String())
	require.Contains(t, stderr.String(), "job "+id+" has not started")
	require.Nil(t, lc.ProcessState, "it goes on waiting")
	require.NoError(t, lc.Process.Signal(syscall.SIGINT))
	_ = lc.Wait()
}

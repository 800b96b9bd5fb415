package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"paddock/internal/e2etest"
	"paddock/runner"
)

// paddock run next to a worker on the same state directory: whoever claims
// the retry, run reports the job's final status.
func TestE2ERunBesideAWorker(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	ws := t.TempDir()
	job := b.WriteJob("flaky.toml", fmt.Sprintf(`
name = "second-time-lucky"
mode = "workspace_write"
workspace = %q
retries = 1
backoff = "2s"
command = "if [ -e ran-once ]; then echo second; else touch ran-once; exit 4; fi"
`, ws))
	b.StartWorker("--concurrency", "1")
	_, errOut, code := b.Run("run", job)
	require.Equal(t, 0, code, errOut)
	s := b.Show("second-time-lucky")
	require.Equal(t, "succeeded", s.State)
	require.Len(t, s.Attempts, 2)
	require.Equal(t, 4, *s.Attempts[0].ExitCode)
}

// SIGTERM: the worker stops claiming, lets the running job finish within
// shutdown_grace, records it, and exits 0; the queued job stays queued.
func TestE2EWorkerGracefulStop(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "shutdown_grace = \"30s\"\nlease = \"3s\"\n")
	ws := t.TempDir()
	ids := b.Submit(b.WriteJob("two.toml", fmt.Sprintf(`
[defaults]
mode = "workspace_write"
workspace = %q
priority = 1

[[job]]
name = "finishing"
priority = 2
command = "touch started; sleep 1.5; echo done > finished"

[[job]]
name = "never-started"
command = "touch second-ran"
`, ws)))
	w := b.StartWorker("--concurrency", "1")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		require.False(t, time.Now().After(deadline), "the job never started")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	state, err := w.Process.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, state.ExitCode(), "a graceful stop exits 0")
	require.Equal(t, "succeeded", b.Show(ids[0]).State, "the running job finished within the grace and was recorded")
	require.FileExists(t, filepath.Join(ws, "finished"))
	require.Equal(t, "queued", b.Show(ids[1]).State, "no claim after the signal")
	require.NoFileExists(t, filepath.Join(ws, "second-ran"))
}

// A second signal stops at once: the running job is killed, not recorded as
// finished but given back to the queue at once with its attempt
// interrupted (no wait for its lease), and a later worker runs it again.
// The stop does not count against retries: the job has none (retries = 0,
// the default) and is queued again all the same.
func TestE2EWorkerSecondSignalStopsAtOnce(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "shutdown_grace = \"5m\"\nlease = \"2s\"\n")
	marker := fmt.Sprintf("paddock-second-signal-%d", time.Now().UnixNano())
	ws := t.TempDir()
	ids := b.Submit(b.WriteJob("long.toml", fmt.Sprintf(`
name = "long"
mode = "workspace_write"
workspace = %q
command = "if [ -e once ]; then exit 0; fi; touch once; sleep 300; : %s"
`, ws, marker)))
	w := b.StartWorker("--concurrency", "1")
	deadline := time.Now().Add(30 * time.Second)
	for len(e2etest.ProcessesWith(marker)) == 0 {
		require.False(t, time.Now().After(deadline), "the job never started")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	done := make(chan struct{})
	go func() { _, _ = w.Process.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop at the second signal")
	}
	e2etest.RequireNoProcess(t, marker)
	// The stopping worker gave the job back at once: no wait for its lease.
	s := b.Show(ids[0])
	require.Equal(t, "queued", s.State, s.Reason)
	require.Len(t, s.Attempts, 1)
	require.Equal(t, "interrupted", s.Attempts[0].Outcome)
	require.Equal(t, "worker stopped while the job ran", s.Attempts[0].Reason)
	require.Contains(t, s.Reason, "does not count against retries")

	_, errOut, code := b.Run("worker", "--drain")
	require.Equal(t, 0, code, errOut)
	s = b.Show(ids[0])
	require.Equal(t, "succeeded", s.State)
	require.Equal(t, "interrupted", s.Attempts[0].Outcome)
}

// retention: a worker prunes finished jobs older than it, with their logs
// and default workspaces.
func TestE2EWorkerPrunesPastRetention(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "retention = \"1ms\"\n")
	job := b.WriteJob("old.toml", "name = \"old\"\nmode = \"workspace_write\"\ncommand = \"echo kept-until-pruned | tee f\"\n")
	_, errOut, code := b.Run("run", job)
	require.Equal(t, 0, code, errOut)
	s := b.Show("old")
	require.FileExists(t, s.Attempts[0].StdoutPath)
	ws := filepath.Join(b.State, "workspaces", s.ID)
	require.FileExists(t, filepath.Join(ws, "f"))
	time.Sleep(10 * time.Millisecond)

	_, errOut, code = b.Run("worker", "--drain")
	require.Equal(t, 0, code, errOut)
	_, _, code = b.Run("show", "old")
	require.Equal(t, 2, code, "the job is gone")
	require.NoFileExists(t, s.Attempts[0].StdoutPath)
	require.NoDirExists(t, ws)
}

// paddock cancel stops a job that paddock run runs in the foreground:
// run sees the request at its next heartbeat, stops the job and exits 130.
func TestE2ECancelStopsPaddockRun(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "lease = \"3s\"\nkill_grace = \"1s\"\n")
	job := b.WriteJob("long.toml", "name = \"fg-long\"\nmode = \"read_only\"\ncommand = \"sleep 120\"\n")
	run := b.Cmd(context.Background(), "run", job)
	require.NoError(t, run.Start())
	t.Cleanup(func() { _ = run.Process.Kill() })
	b.WaitState("fg-long", 30*time.Second, "running")
	_, errOut, code := b.Run("cancel", "fg-long")
	require.Equal(t, 0, code, errOut)
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 130, ee.ExitCode())
	case <-time.After(30 * time.Second):
		t.Fatal("paddock run did not stop after paddock cancel")
	}
	s := b.Show("fg-long")
	require.Equal(t, "canceled", s.State)
}

// A draining worker stopped by signals before the queue is empty exits 1
// (its job was given back, not finished): `worker --drain && next` must
// not go on.
func TestE2EWorkerDrainStoppedExits1(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "shutdown_grace = \"1s\"\n")
	marker := fmt.Sprintf("paddock-drain-stopped-%d", time.Now().UnixNano())
	ids := b.Submit(b.WriteJob("long.toml", fmt.Sprintf("name = \"long\"\nretries = 2\ncommand = \"sleep 300; : %s\"\n", marker)))
	w := b.Cmd(context.Background(), "worker", "--drain")
	var errb strings.Builder
	w.Stderr = &errb
	require.NoError(t, w.Start())
	deadline := time.Now().Add(30 * time.Second)
	for len(e2etest.ProcessesWith(marker)) == 0 {
		require.False(t, time.Now().After(deadline), "the job never started")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	err := w.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, errb.String())
	require.Equal(t, 1, ee.ExitCode(), errb.String())
	require.Contains(t, errb.String(), "stopped before the queue was drained: 1 job(s) queued or running")
	require.Equal(t, "queued", b.Show(ids[0]).State)
	e2etest.RequireNoProcess(t, marker)
}

// A signal while the worker starts (its hooks compiling, no compilation
// cache) stops it as a signal after the start does: no "context
// canceled" failure, exit 1 from --drain with jobs left, nothing run; a
// second signal ends the start at once. A signal before the store is
// open says the same.
func TestE2EWorkerSignalWhileStarting(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "[[hook]]\nname = \"deny\"\npath = \""+denylistWasm(t)+"\"\n")
	ids := b.Submit(b.WriteJob("one.toml", "name = \"one\"\ncommand = \"true\"\n"))
	start := func() (*exec.Cmd, *strings.Builder) {
		t.Helper()
		require.NoError(t, os.RemoveAll(filepath.Join(b.State, "cache", "wazero"))) // a start of seconds
		w := b.Cmd(context.Background(), "worker", "--drain")
		var errb strings.Builder
		w.Stderr = &errb
		require.NoError(t, w.Start())
		// Signals go once the worker has its store open (it holds the
		// -shm file open while it is: the file's existence would not do,
		// another process may hold it) and has begun loading the hook
		// (it reads the queue's policy first; the chain makes its
		// compilation cache's directory first), while the hook still
		// compiles.
		for deadline := time.Now().Add(30 * time.Second); !e2etest.HasOpen(w.Process.Pid, databaseFile+"-shm"); time.Sleep(5 * time.Millisecond) {
			require.False(t, time.Now().After(deadline), "the worker never opened its store")
		}
		for deadline := time.Now().Add(30 * time.Second); !dirExists(filepath.Join(b.State, "cache", "wazero")); time.Sleep(5 * time.Millisecond) {
			require.False(t, time.Now().After(deadline), "the worker never began loading its hook")
		}
		time.Sleep(100 * time.Millisecond)
		return w, &errb
	}
	exitCode := func(w *exec.Cmd, errb *strings.Builder) int {
		t.Helper()
		var ee *exec.ExitError
		require.ErrorAs(t, w.Wait(), &ee, errb.String())
		return ee.ExitCode()
	}

	w, errb := start()
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 1, exitCode(w, errb), errb.String())
	require.Contains(t, errb.String(), "stopped before the queue was drained: 1 job(s) queued or running")
	require.NotContains(t, errb.String(), "context canceled")
	require.Equal(t, "queued", b.Show(ids[0]).State)

	// A signal while the store is still opening (another process holds
	// the database's write lock): the worker opens it all the same, once
	// the lock is gone, to say what is left.
	db, err := sql.Open("sqlite", filepath.Join(b.State, databaseFile))
	require.NoError(t, err)
	defer db.Close()
	conn, err := db.Conn(context.Background())
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), "BEGIN EXCLUSIVE")
	require.NoError(t, err)
	w = b.Cmd(context.Background(), "worker", "--drain")
	var early strings.Builder
	w.Stderr = &early
	require.NoError(t, w.Start())
	for deadline := time.Now().Add(30 * time.Second); !e2etest.HasOpen(w.Process.Pid, databaseFile); time.Sleep(5 * time.Millisecond) {
		require.False(t, time.Now().After(deadline), "the worker never opened its database")
	}
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	time.Sleep(300 * time.Millisecond)
	_, err = conn.ExecContext(context.Background(), "ROLLBACK")
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	require.NoError(t, db.Close())
	require.Equal(t, 1, exitCode(w, &early), early.String())
	require.Contains(t, early.String(), "stopped before the queue was drained: 1 job(s) queued or running")

	w, errb = start()
	began := time.Now()
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 1, exitCode(w, errb), errb.String())
	require.Contains(t, errb.String(), "second signal while starting")
	t.Logf("exited %s after the first signal", time.Since(began))
	require.Equal(t, "queued", b.Show(ids[0]).State)
}

// `paddock logs -f` prints a job's output while it runs, not only once it
// ended (its attempt names its logs only then).
func TestE2ELogsFollowStreams(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	ids := b.Submit(b.WriteJob("slow.toml", "name = \"slow\"\nmode = \"read_only\"\ncommand = \"echo first; sleep 8; echo last\"\n"))
	b.StartWorker()
	ctx, cancel := context.WithTimeout(context.Background(), e2etest.CommandTimeout)
	defer cancel()
	c := b.Cmd(ctx, "logs", "-f", ids[0])
	out, err := c.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "first\n", line)
	require.Equal(t, "running", b.Show(ids[0]).State, "the first line came while the job ran")
	rest, err := io.ReadAll(out)
	require.NoError(t, err)
	require.Equal(t, "last\n", string(rest))
	require.NoError(t, c.Wait())
}

// The worker sets GOMAXPROCS from its concurrency (workerProcs), and
// leaves it alone when the environment sets it.
func TestE2EWorkerSetsProcs(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	b.Env = []string{"GOMAXPROCS="}
	_, errOut, code := b.Run("worker", "--drain", "-c", "2", "--log-level", "debug")
	require.Equal(t, 0, code, errOut)
	want, _ := workerProcs(2, runtime.NumCPU(), "")
	require.Contains(t, errOut, fmt.Sprintf("gomaxprocs=%d concurrency=2", want))
	b.Env = []string{"GOMAXPROCS=3"}
	_, errOut, code = b.Run("worker", "--drain", "-c", "2", "--log-level", "debug")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, errOut, "gomaxprocs=")
	require.Contains(t, errOut, `as the environment says" env="GOMAXPROCS=3" processors=3`)
}

// The event log only wakes waits: a worker that cannot open it (here a
// directory stands in its place) warns and runs the jobs all the same.
func TestE2EWorkerWithoutEventLog(t *testing.T) {
	t.Parallel()
	// Each stands where events.jsonl should be: a directory, a device
	// that never ends (a wait reading it never reached its end and spun
	// at 100% CPU), a FIFO nothing reads (opening it to append blocked the
	// worker).
	for name, create := range map[string]func(path string) error{
		"directory": func(p string) error { return os.Mkdir(p, 0o700) },
		"dev-zero":  func(p string) error { return os.Symlink("/dev/zero", p) },
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := e2etest.Setup(t, "")
			require.NoError(t, os.MkdirAll(b.State, 0o700))
			require.NoError(t, create(runner.StateDir{Root: b.State}.EventLog()))
			w := b.StartWorker()
			// submit --wait reads the log too; it must still see the job end.
			out, errOut, code := b.Run("submit", "--wait", b.WriteJob("one.toml", "name = \"one\"\ncommand = \"true\"\n"))
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, "succeeded")
			require.NoError(t, w.Process.Signal(syscall.SIGTERM))
			_ = w.Wait()
			require.Equal(t, "succeeded", b.Show("one").State)
			_, errOut, code = b.Run("worker", "--drain")
			require.Equal(t, 0, code, errOut)
			require.Contains(t, errOut, "event log unusable: waits will poll the store instead")
		})
	}
}

// TestE2EDrainTakesInbox: `worker --drain` runs the jobs of a file that
// lands in the inbox before it starts, not only those already queued: it
// waits for the file to settle (a second) before it stops.
func TestE2EDrainTakesInbox(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	inbox := dropGoodJob(t, b)
	_, errOut, code := b.Run("worker", "--drain")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "succeeded", b.Show("good").State, errOut)
	_, err := os.Stat(filepath.Join(inbox, "accepted", "good.toml"))
	require.NoError(t, err)
}

// dropGoodJob writes a job file, "good.toml" (a read_only /bin/true named
// good), into b's inbox, made for it, and returns the inbox.
func dropGoodJob(t *testing.T, b *e2etest.Bundle) string {
	t.Helper()
	inbox := filepath.Join(b.State, "inbox")
	require.NoError(t, os.MkdirAll(inbox, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(inbox, "good.toml"), []byte("name = \"good\"\nmode = \"read_only\"\ncommand = [\"/bin/true\"]\n"), 0o644))
	return inbox
}

// TestE2EDrainSaysRefusedInboxFiles: a drain that refused a file of the
// inbox exits 1 and names where the file went, as it does for a job that
// did not succeed; the good file's job still ran.
func TestE2EDrainSaysRefusedInboxFiles(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	inbox := dropGoodJob(t, b)
	require.NoError(t, os.WriteFile(filepath.Join(inbox, "typo.toml"), []byte("name = \"typo\"\ncomand = [\"/bin/true\"]\n"), 0o644))
	_, errOut, code := b.Run("worker", "--drain")
	require.Equal(t, 1, code, errOut)
	rejected := filepath.Join(inbox, "rejected", "typo.toml")
	require.Contains(t, errOut, "paddock: 1 inbox file(s) were refused (the reason is in the .error file beside each): "+rejected+"\n")
	require.FileExists(t, rejected+".error")
	require.Equal(t, "succeeded", b.Show("good").State, errOut)
}

// The worker's last lines speak paddock, not Go: its counts by state and
// the ids of the jobs that did not succeed, without map[...] or [...].
func TestE2EWorkerSummaryWords(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	allowUnconfined(t, b)
	ids := b.Submit(b.WriteJob("jobs.toml", "[defaults]\nmode = \"danger_full_access\"\n[[job]]\nname = \"ok\"\ncommand = \"true\"\n[[job]]\nname = \"bad\"\ncommand = \"false\"\n"))
	_, errOut, code := b.Run("worker", "--drain")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, `finished="succeeded=1 failed=1"`)
	require.Contains(t, errOut, "paddock: 1 job(s) did not succeed: "+ids[1]+"\n")
	require.NotContains(t, errOut, "map[")
	require.NotContains(t, errOut, "["+ids[1])
}

// dirExists reports whether path is a directory now.
func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

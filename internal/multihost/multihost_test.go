// Package multihost_test runs paddock as several hosts sharing one queue
// on PostgreSQL: each worker is a real paddock process in a network
// namespace of its own (unshare -n) with a state directory of its own,
// reaching the throw-away server (internal/pgtest) only through its Unix
// socket, so no test traffic leaves this machine.
package multihost_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
	"paddock/internal/pgtest"
	"paddock/queue"
	"paddock/queue/postgres"
	"paddock/sandbox/launch"
)

func TestMain(m *testing.M) {
	launch.Dispatch() // the probe runs this binary as the Landlock launcher
	code := pgtest.Main(m)
	e2etest.Cleanup()
	os.Exit(code)
}

// host is one paddock installation standing for a machine.
type host struct {
	*e2etest.Bundle
	store  string
	viaEnv bool // name the store in $PADDOCK_STORE rather than --store
}

// requireNetns ends the test unless `unshare -n` works here (root, or
// unprivileged user namespaces).
func requireNetns(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("unshare", "-n", "--", "true").CombinedOutput(); err != nil {
		e2etest.Unavailable(t, "unshare -n does not work here: %v: %s", err, out)
	}
}

func newHost(t *testing.T, store string) *host {
	t.Helper()
	b := e2etest.Setup(t, "lease = \"3s\"\nkill_grace = \"1s\"\nshutdown_grace = \"2s\"\nconcurrency = 2\n")
	e2etest.KillStrayBwraps(t, b.Dir)
	return &host{Bundle: b, store: store}
}

// cmd is paddock with args in a network namespace of its own, reaching
// the queue only through the store's URL (--store, or $PADDOCK_STORE).
func (h *host) cmd(ctx context.Context, args ...string) *exec.Cmd {
	if !h.viaEnv {
		args = append([]string{"--store", h.store}, args...)
	}
	c := h.Cmd(ctx, args...)
	if h.viaEnv {
		c.Env = append(c.Env, "PADDOCK_STORE="+h.store)
	}
	unshare, err := exec.LookPath("unshare")
	require.NoError(h.T, err)
	c.Args = append([]string{"unshare", "-n", "--"}, c.Args...)
	c.Path = unshare
	return c
}

// run runs paddock in the host's namespace and returns stdout, stderr
// and the exit code.
func (h *host) run(args ...string) (string, string, int) {
	h.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := h.cmd(ctx, args...)
	var out, errb strings.Builder
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(h.T, err)
	}
	return out.String(), errb.String(), code
}

// startWorker starts `paddock worker --drain` (unshare execs paddock: the
// pid is the worker's), logging to worker.log in the host's directory.
func (h *host) startWorker() *exec.Cmd {
	h.T.Helper()
	c := h.cmd(context.Background(), "worker", "--drain")
	logf, err := os.Create(filepath.Join(h.Dir, "worker.log"))
	require.NoError(h.T, err)
	c.Stdout, c.Stderr = logf, logf
	require.NoError(h.T, c.Start())
	h.T.Cleanup(func() {
		_ = c.Process.Kill()
		_, _ = c.Process.Wait()
		logf.Close()
		if h.T.Failed() {
			log, _ := os.ReadFile(filepath.Join(h.Dir, "worker.log"))
			h.T.Logf("worker log of %s:\n%s", h.Dir, log)
		}
	})
	return c
}

// batch writes n jobs, each printing its name after a short sleep, with
// two retries (an attempt cut by a killed worker counts as one).
func batch(t *testing.T, h *host, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "[[job]]\nname = \"j%03d\"\nretries = 2\ncommand = [\"sh\", \"-c\", \"sleep 0.05; echo out-j%03d\"]\n\n", i, i)
	}
	return h.WriteJob("batch.toml", b.String())
}

// waitCount polls st until at least n jobs are in state, or fails after
// timeout.
func waitCount(t *testing.T, st queue.Store, state queue.JobState, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c, err := st.JobCounts(context.Background())
		if err == nil && c[state] >= n {
			return
		}
		require.True(t, time.Now().Before(deadline), "fewer than %d jobs %s after %s: %v (%v)", n, state, timeout, c, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// waitExit waits for a drained worker to exit 0.
func waitExit(t *testing.T, c *exec.Cmd, timeout time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "worker %d", c.Process.Pid)
	case <-time.After(timeout):
		t.Fatalf("worker %d did not drain within %s", c.Process.Pid, timeout)
	}
}

// checkExactlyOnce checks that every job of st (want of them) succeeded
// with exactly one succeeded attempt, and that no two attempts of a job
// overlapped in time. It returns the attempts by worker and the
// interrupted attempts.
func checkExactlyOnce(t *testing.T, st queue.Store, want int) (map[string]int, []queue.Attempt) {
	t.Helper()
	jobs, err := st.JobList(context.Background(), &queue.JobListParams{WithAttempts: true})
	require.NoError(t, err)
	require.Len(t, jobs, want)
	byWorker := map[string]int{}
	var interrupted []queue.Attempt
	for _, j := range jobs {
		require.Equal(t, queue.StateSucceeded, j.State, "%s: %s", j.Name, j.Reason)
		ok := 0
		for i, a := range j.Attempts {
			byWorker[a.WorkerID]++
			switch a.Outcome {
			case queue.OutcomeSucceeded:
				ok++
			case queue.OutcomeInterrupted:
				interrupted = append(interrupted, a)
			default:
				t.Errorf("%s attempt %d: outcome %s: %s", j.Name, a.Number, a.Outcome, a.Reason)
			}
			if i > 0 {
				prev := j.Attempts[i-1]
				require.False(t, a.StartedAt.Before(prev.EndedAt), "%s: attempt %d started at %s, before attempt %d ended at %s", j.Name, a.Number, a.StartedAt, prev.Number, prev.EndedAt)
			}
		}
		require.Equal(t, 1, ok, "%s succeeded exactly once: %+v", j.Name, j.Attempts)
	}
	return byWorker, interrupted
}

// Four workers, each in its own network namespace with its own state
// directory, drain one 400-job batch; one is killed with SIGKILL while it
// runs jobs. Every job succeeds exactly once, the killed worker's
// attempts are recorded as interrupted, and no job's attempts overlap. A
// fifth process, in a namespace of its own with no worker and no logs,
// given the store by $PADDOCK_STORE, waits for the jobs and reads their
// output from the store.
func TestFourHostsOneKilled(t *testing.T) {
	requireNetns(t)
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t, "four-hosts")
	ctx := context.Background()
	hosts := make([]*host, 5)
	for i := range hosts {
		hosts[i] = newHost(t, url)
	}
	out, errOut, code := hosts[0].run("store", "migrate")
	require.Equal(t, 0, code, "store migrate: %s", errOut)
	require.Contains(t, out, fmt.Sprintf(": schema version %d (was 0)", postgres.SchemaVersion))
	st, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer st.Close()
	const n = 400
	out, errOut, code = hosts[0].run("submit", batch(t, hosts[0], n))
	require.Equal(t, 0, code, "submit: %s", errOut)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), n)

	workers := make([]*exec.Cmd, 4)
	for i := range workers {
		workers[i] = hosts[i].startWorker()
	}
	// Kill worker 0 mid-batch, while it runs jobs, after 40 have
	// succeeded.
	waitCount(t, st, queue.StateSucceeded, 40, 2*time.Minute)
	victim := workers[0].Process.Pid
	var victimID string
	deadline := time.Now().Add(2 * time.Minute)
	for victimID == "" {
		running, err := st.JobList(ctx, &queue.JobListParams{States: []queue.JobState{queue.StateRunning}})
		require.NoError(t, err)
		for _, j := range running {
			if strings.Contains(j.LeaseOwner, ":"+strconv.Itoa(victim)+":") {
				victimID = j.LeaseOwner
			}
		}
		require.True(t, time.Now().Before(deadline), "worker 0 never ran a job")
		time.Sleep(10 * time.Millisecond)
	}
	c, err := st.JobCounts(ctx)
	require.NoError(t, err)
	require.Less(t, c[queue.StateSucceeded], n, "the batch was not over at the kill")
	require.NoError(t, syscall.Kill(victim, syscall.SIGKILL))
	_ = workers[0].Wait()
	for _, w := range workers[1:] {
		waitExit(t, w, 3*time.Minute)
	}

	byWorker, interrupted := checkExactlyOnce(t, st, n)
	require.NotEmpty(t, interrupted, "the killed worker's attempts are visible")
	for _, a := range interrupted {
		require.Equal(t, victimID, a.WorkerID)
		require.Contains(t, a.Reason, "lease of worker")
	}
	require.Len(t, byWorker, 4, "four distinct worker identities ran jobs: %v", byWorker)
	t.Logf("attempts by worker: %v; interrupted: %d", byWorker, len(interrupted))

	// The fifth host: no worker, no logs of its own; the workers' log
	// files are gone too, so the output can only come from the store.
	for _, h := range hosts[:4] {
		require.NoError(t, os.RemoveAll(filepath.Join(h.State, "logs")))
	}
	fifth := hosts[4]
	fifth.viaEnv = true
	out, errOut, code = fifth.run("wait", "j000", "j123", "j399")
	require.Equal(t, 0, code, "wait: %s%s", out, errOut)
	for _, name := range []string{"j000", "j123", "j399"} {
		out, errOut, code = fifth.run("logs", name)
		require.Equal(t, 0, code, "logs %s: %s", name, errOut)
		require.Equal(t, "out-"+name+"\n", out)
	}
	out, _, code = fifth.run("--json", "show", "j123")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"state":"succeeded"`)
}

// The database restarts mid-batch: workers keep their running jobs, retry
// their store calls, and the batch completes with every job succeeded
// exactly once.
func TestDatabaseRestartMidBatch(t *testing.T) {
	requireNetns(t)
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t, "restart")
	ctx := context.Background()
	st, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer st.Close()
	hosts := []*host{newHost(t, url), newHost(t, url)}
	const n = 150
	_, errOut, code := hosts[0].run("submit", batch(t, hosts[0], n))
	require.Equal(t, 0, code, "submit: %s", errOut)
	workers := []*exec.Cmd{hosts[0].startWorker(), hosts[1].startWorker()}
	waitCount(t, st, queue.StateSucceeded, 30, 2*time.Minute)
	srv.Stop()
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, srv.Start())
	for _, w := range workers {
		waitExit(t, w, 3*time.Minute)
	}
	_, interrupted := checkExactlyOnce(t, st, n)
	t.Logf("interrupted attempts across the restart: %d", len(interrupted))
}

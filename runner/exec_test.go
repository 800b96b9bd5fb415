package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
	"paddock/jobspec"
	"paddock/queue"
)

// bwrapExecutor is an Executor with the real bwrap (the test fails when it
// is unusable and PADDOCK_REQUIRE_BWRAP=1), no hooks, the default config
// and a state directory of its own, and a workspace for its jobs.
func bwrapExecutor(t *testing.T) (*Executor, string) {
	t.Helper()
	rep := e2etest.RequireBwrap(t)
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	require.NoError(t, os.Mkdir(ws, 0o755))
	return &Executor{Config: Config{}.WithDefaults(), StateDir: filepath.Join(dir, "state"), Chain: emptyChain(t), Probe: rep}, ws
}

// TestExecuteEndedMeansJobGone: for a confined job whose command exits
// while a setsid daemon and a background process of it still sleep,
// Execute calls Exiting (bwrap's exit-code record), then Ended once, and
// when Ended is called no process of the job is alive any more: the
// worker starts the next job's process only then. The attempt ends at
// Ended. A job the hooks deny starts nothing and calls neither.
func TestExecuteEndedMeansJobGone(t *testing.T) {
	e, ws := bwrapExecutor(t)
	ctx := context.Background()

	for run := range 3 {
		tok := "1000." + strconv.Itoa(int(time.Now().UnixNano()%1000000)) + strconv.Itoa(run)
		src := fmt.Sprintf("mode = \"workspace_write\"\nworkspace = %q\ncommand = [\"/bin/sh\", \"-c\", %q, \"sh\", %q]\n", ws,
			`setsid sleep "$1" </dev/null >/dev/null 2>&1 & sleep "$1" </dev/null >/dev/null 2>&1 & sleep 0.1; exit 0`, tok)
		specs, err := jobspec.Parse("job.toml", []byte(src), ws)
		require.NoError(t, err)
		job := queue.Job{ID: "job" + strconv.Itoa(run), Spec: specs[0]}

		var mu sync.Mutex
		var events []string
		var left []int
		var endedAt time.Time
		att := e.Execute(ctx, ExecParams{Job: job, Attempt: 1,
			Exiting: func() { mu.Lock(); events = append(events, "exiting"); mu.Unlock() },
			Ended: func() {
				l := e2etest.LiveSleepsWith(tok)
				mu.Lock()
				events = append(events, "ended")
				left, endedAt = l, time.Now()
				mu.Unlock()
			},
		})
		require.Equal(t, queue.OutcomeSucceeded, att.Outcome, att.Reason)
		require.Equal(t, []string{"exiting", "ended"}, events)
		require.Empty(t, left, "processes of the job were alive when Ended was called")
		require.False(t, att.EndedAt.After(endedAt), "the attempt ends when its processes have")
	}

	// Denied before anything starts: neither callback.
	src := fmt.Sprintf("mode = \"workspace_write\"\nworkspace = %q\ncommand = [\"/bin/true\"]\ncwd = \"/nonexistent-dir\"\n", ws)
	specs, err := jobspec.Parse("job.toml", []byte(src), ws)
	require.NoError(t, err)
	called := false
	att := e.Execute(ctx, ExecParams{Job: queue.Job{ID: "never", Spec: specs[0]}, Attempt: 1,
		Exiting: func() { called = true }, Ended: func() { called = true }})
	require.Equal(t, queue.OutcomeRunnerFailed, att.Outcome)
	require.False(t, called)
}

// TestExecuteSpawnGate: a job waiting at the gate starts once the gate
// lets it; a cancel or a hard stop while it waits ends the attempt with
// nothing started (canceled, interrupted), and Ended is not called.
func TestExecuteSpawnGate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	e := &Executor{Config: Config{}.WithDefaults(), StateDir: dir, Chain: emptyChain(t), Policy: allowUnconfined}
	marker := filepath.Join(dir, "ran")
	specs, err := jobspec.Parse("job.toml", []byte(fmt.Sprintf("mode = \"danger_full_access\"\ncommand = [\"/bin/sh\", \"-c\", \"echo x >> %s\"]\n", marker)), dir)
	require.NoError(t, err)
	job := queue.Job{ID: "gated", Spec: specs[0]}
	// The worker's gate, with no slot ever free.
	blocked := func(ctx context.Context, canceled <-chan struct{}) error {
		select {
		case <-canceled:
			return errCanceledAtGate
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	cancel := make(chan struct{})
	time.AfterFunc(50*time.Millisecond, func() { close(cancel) })
	ended := false
	att := e.Execute(ctx, ExecParams{Job: job, Attempt: 1, Cancel: cancel, SpawnGate: blocked, Ended: func() { ended = true }})
	require.Equal(t, queue.OutcomeCanceled, att.Outcome, att.Reason)
	require.False(t, ended)

	hard, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	att = e.Execute(hard, ExecParams{Job: job, Attempt: 1, SpawnGate: blocked, Ended: func() { ended = true }})
	require.Equal(t, queue.OutcomeInterrupted, att.Outcome, att.Reason)
	require.False(t, ended)
	require.NoFileExists(t, marker, "a job stopped at the gate must not run")

	open := make(chan struct{})
	time.AfterFunc(50*time.Millisecond, func() { close(open) })
	att = e.Execute(ctx, ExecParams{Job: job, Attempt: 1, SpawnGate: func(context.Context, <-chan struct{}) error { <-open; return nil }, Ended: func() { ended = true }})
	require.Equal(t, queue.OutcomeSucceeded, att.Outcome, att.Reason)
	require.True(t, ended)
	require.FileExists(t, marker)
}

// TestExecuteDenialBeforeLongStderr: a confined job that hits the fence,
// then prints far more stderr than the classifier's tail (a compiler's
// warnings after a failed write) and exits 1 is recorded as the fence's
// denial, not as a plain exit status.
func TestExecuteDenialBeforeLongStderr(t *testing.T) {
	e, ws := bwrapExecutor(t)
	ctx := context.Background()
	target := fmt.Sprintf("/etc/paddock-fence-%d", time.Now().UnixNano())
	script := `echo x > "$1"; i=0; while [ $i -lt 1000 ]; do echo "warning: unused variable 'v$i' [-Wunused-variable]" >&2; i=$((i+1)); done; exit 1`
	src := fmt.Sprintf("mode = \"workspace_write\"\nworkspace = %q\ncommand = [\"/bin/sh\", \"-c\", %q, \"sh\", %q]\n", ws, script, target)
	specs, err := jobspec.Parse("job.toml", []byte(src), ws)
	require.NoError(t, err)
	att := e.Execute(ctx, ExecParams{Job: queue.Job{ID: "fenced", Spec: specs[0]}, Attempt: 1})
	require.NoFileExists(t, target)
	require.Equal(t, queue.OutcomeFailed, att.Outcome, att.Reason)
	require.NotNil(t, att.ExitCode)
	require.Equal(t, 1, *att.ExitCode)
	st, err := os.Stat(att.StderrPath)
	require.NoError(t, err)
	require.Greater(t, st.Size(), int64(4*stderrTailBytes), "the job printed more than the tail keeps")
	require.True(t, strings.HasPrefix(att.Reason, "write refused by the fence: "), att.Reason)
	require.Contains(t, att.Reason, target+": Read-only file system")
}

// TestExecuteProtectWatchFailsClosed: a missing protected path (the
// default list's .bashrc) that appears after the job's paths were
// resolved and before its watch is in place, made here by the spawn
// gate, fails the attempt closed: nothing of the job runs, and the file,
// which is not the job's, is left where it is.
func TestExecuteProtectWatchFailsClosed(t *testing.T) {
	e, ws := bwrapExecutor(t)
	f := FenceFor(e.StateDir, e.Config).WithProtect(DefaultProtect...)
	e.Fence = &f
	src := fmt.Sprintf("mode = \"workspace_write\"\nworkspace = %q\ncommand = [\"/bin/sh\", \"-c\", \"echo ran > marker\"]\n", ws)
	specs, err := jobspec.Parse("job.toml", []byte(src), ws)
	require.NoError(t, err)
	rc := filepath.Join(ws, ".bashrc")
	att := e.Execute(context.Background(), ExecParams{Job: queue.Job{ID: "late", Spec: specs[0]}, Attempt: 1,
		SpawnGate: func(context.Context, <-chan struct{}) error { return os.WriteFile(rc, []byte("mine\n"), 0o644) },
	})
	require.Equal(t, queue.OutcomeRunnerFailed, att.Outcome, att.Reason)
	require.Contains(t, att.Reason, "not run: sandbox: the protected path "+rc+" exists now")
	require.NoFileExists(t, filepath.Join(ws, "marker"))
	data, err := os.ReadFile(rc)
	require.NoError(t, err)
	require.Equal(t, "mine\n", string(data))

	// Without it the same job runs: the check above can fail.
	require.NoError(t, os.Remove(rc))
	att = e.Execute(context.Background(), ExecParams{Job: queue.Job{ID: "plain", Spec: specs[0]}, Attempt: 1})
	require.Equal(t, queue.OutcomeSucceeded, att.Outcome, att.Reason)
	require.FileExists(t, filepath.Join(ws, "marker"))
}

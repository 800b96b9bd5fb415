package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"paddock/hooks"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/sqlite"
	"paddock/sandbox"
)

// TestWorkerSlotsAndRecords: a draining worker at concurrency 1 frees a
// job's slot when its process ends and records the attempt while the next
// one starts. Every job still ends recorded exactly once, dependents
// (released by their dependency's record) run, attempts never overlap,
// and the drain returns with nothing running.
func TestWorkerSlotsAndRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	// A chain of dependents, a failing job and independent ones;
	// danger_full_access runs without bwrap, the slot and record logic
	// are the same for every mode.
	var src strings.Builder
	src.WriteString("[defaults]\nmode = \"danger_full_access\"\n\n")
	for i := range 6 {
		fmt.Fprintf(&src, "[[job]]\nname = \"chain-%d\"\ncommand = [\"/bin/true\"]\n", i)
		if i > 0 {
			fmt.Fprintf(&src, "after = [\"chain-%d\"]\n", i-1)
		}
	}
	for i := range 6 {
		fmt.Fprintf(&src, "[[job]]\nname = \"free-%d\"\ncommand = [\"/bin/true\"]\n", i)
	}
	src.WriteString("[[job]]\nname = \"fails\"\ncommand = [\"/bin/false\"]\n")
	st := enqueuedStore(t, dir, src.String())
	chain := emptyChain(t)
	events, err := OpenEventLog(filepath.Join(dir, "events.jsonl"), 0)
	require.NoError(t, err)
	t.Cleanup(func() { events.Close() })
	cfg := Config{}.WithDefaults()
	w := NewWorker(WorkerOptions{
		Store: st, Executor: &Executor{Config: cfg, StateDir: dir, Chain: chain, Policy: allowUnconfined},
		Concurrency: 1, Drain: true, Events: events, ID: "w1",
	})
	sum, err := w.Run(ctx)
	require.NoError(t, err)
	require.Equal(t, 12, sum.Finished[queue.StateSucceeded])
	require.Equal(t, 1, sum.Finished[queue.StateFailed])
	require.Len(t, sum.Failed, 1)
	require.Zero(t, w.inflightCount())
	require.Zero(t, w.runningCount())

	counts, err := st.JobCounts(ctx)
	require.NoError(t, err)
	require.Zero(t, counts[queue.StateRunning])
	require.Zero(t, counts[queue.StateQueued])

	jobs, err := st.JobList(ctx, &queue.JobListParams{WithAttempts: true})
	require.NoError(t, err)
	require.Len(t, jobs, 13)
	type span struct{ start, end int64 }
	var spans []span
	byName := map[string]queue.Job{}
	for _, j := range jobs {
		require.Len(t, j.Attempts, 1, "job %s", j.Name)
		a := j.Attempts[0]
		require.False(t, a.EndedAt.IsZero(), "job %s recorded", j.Name)
		spans = append(spans, span{a.StartedAt.UnixNano(), a.EndedAt.UnixNano()})
		byName[j.Name] = j
	}
	// Concurrency 1: no attempt starts before the previous one ended.
	for i, a := range spans {
		for _, b := range spans[i+1:] {
			require.True(t, a.end <= b.start || b.end <= a.start, "attempts overlap: %v %v", a, b)
		}
	}
	// The chain ran in order: each dependent after its dependency ended.
	for i := 1; i < 6; i++ {
		prev, cur := byName[fmt.Sprintf("chain-%d", i-1)], byName[fmt.Sprintf("chain-%d", i)]
		require.False(t, cur.Attempts[0].StartedAt.Before(prev.Attempts[0].EndedAt), "chain-%d started before chain-%d ended", i, i-1)
	}
}

// TestWorkerStopGivesJobsBack: a worker stopped past its shutdown grace
// stops its running jobs and gives them back to the queue at once (no
// wait for their leases), queued again whether or not they had a retry
// left: a stop does not count against retries. Both attempts are
// interrupted, and the summary counts no failure.
func TestWorkerStopGivesJobsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	src := fmt.Sprintf(`[defaults]
mode = "danger_full_access"
command = "echo x >> %s; exec sleep 300"

[[job]]
name = "retry-left"
retries = 1

[[job]]
name = "last-attempt"
`, marker)
	st := enqueuedStore(t, dir, src)
	chain := emptyChain(t)
	cfg := Config{}.WithDefaults()
	cfg.ShutdownGrace.Duration = 100 * time.Millisecond
	cfg.Lease.Duration = time.Hour // recovery would take an hour
	w := NewWorker(WorkerOptions{Store: st, Executor: &Executor{Config: cfg, StateDir: dir, Chain: chain, Policy: allowUnconfined}, Concurrency: 2, ID: "w1"})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan Summary, 1)
	go func() {
		sum, err := w.Run(runCtx)
		assert.NoError(t, err)
		done <- sum
	}()
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(marker)
		return strings.Count(string(b), "x") == 2
	}, 30*time.Second, 10*time.Millisecond, "both jobs started")
	stop()
	var sum Summary
	select {
	case sum = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop")
	}
	retry, err := st.JobGet(ctx, "retry-left")
	require.NoError(t, err)
	require.Equal(t, queue.StateQueued, retry.State, retry.Reason)
	last, err := st.JobGet(ctx, "last-attempt")
	require.NoError(t, err)
	require.Equal(t, queue.StateQueued, last.State, last.Reason)
	require.Equal(t, 2, last.MaxAttempts, "one more attempt: the stop did not count")
	for _, j := range []queue.Job{retry, last} {
		require.Len(t, j.Attempts, 1, j.Name)
		require.Equal(t, queue.OutcomeInterrupted, j.Attempts[0].Outcome, j.Name)
		require.Equal(t, "worker stopped while the job ran", j.Attempts[0].Reason, j.Name)
	}
	require.Zero(t, sum.Finished[queue.StateFailed])
	require.Empty(t, sum.Failed)
}

// enqueuedStore opens a store in dir and enqueues the job file text src
// (paths relative to dir); both are closed at the end of the test.
func enqueuedStore(t *testing.T, dir, src string) *sqlite.Store {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "q.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	specs, err := jobspec.Parse("jobs.toml", []byte(src), dir)
	require.NoError(t, err)
	_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: src})
	require.NoError(t, err)
	return st
}

// emptyChain is a chain of no hooks (it allows every job), closed at the
// end of the test.
func emptyChain(t *testing.T) *hooks.Chain {
	t.Helper()
	chain, err := hooks.NewChain(context.Background(), hooks.ChainOptions{Sandbox: SandboxInfo})
	require.NoError(t, err)
	t.Cleanup(func() { chain.Close(context.Background()) })
	return chain
}

// TestWorkerCancelAfterRetry: a job canceled, retried and canceled again
// on the same worker is stopped the second time too. The worker once
// remembered canceled job ids for its whole life, and a retry keeps the
// id: the second cancel was ignored and the job ran to its end.
func TestWorkerCancelAfterRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st := enqueuedStore(t, dir, "name = \"long\"\nmode = \"danger_full_access\"\ncommand = [\"sleep\", \"30\"]\n")
	cfg := Config{}.WithDefaults()
	cfg.Lease.Duration = 300 * time.Millisecond // a heartbeat every 100 ms
	cfg.KillGrace.Duration = 100 * time.Millisecond
	w := NewWorker(WorkerOptions{Store: st, Executor: &Executor{Config: cfg, StateDir: dir, Chain: emptyChain(t), Policy: allowUnconfined}, Concurrency: 1, ID: "w1"})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := w.Run(runCtx); done <- err }()
	t.Cleanup(func() {
		stop()
		w.Abort()
		<-done
	})
	waitState := func(want queue.JobState, attempts int) queue.Job {
		t.Helper()
		var j queue.Job
		require.Eventually(t, func() bool {
			var err error
			j, err = st.JobGet(ctx, "long")
			require.NoError(t, err)
			return j.State == want && j.AttemptCount == attempts
		}, 10*time.Second, 10*time.Millisecond, "job never %s at attempt %d", want, attempts)
		return j
	}
	for attempt := 1; attempt <= 2; attempt++ {
		waitState(queue.StateRunning, attempt)
		_, err := st.JobCancel(ctx, "long")
		require.NoError(t, err)
		j := waitState(queue.StateCanceled, attempt)
		require.Equal(t, queue.OutcomeCanceled, j.Attempts[attempt-1].Outcome, "attempt %d", attempt)
		if attempt == 1 {
			_, err = st.JobRetry(ctx, "long")
			require.NoError(t, err)
		}
	}
}

// allowUnconfined is the policy of tests that run jobs unconfined (no
// bwrap needed): the operator allows danger_full_access.
var allowUnconfined = Policy{MaxMode: string(sandbox.ModeDangerFullAccess)}

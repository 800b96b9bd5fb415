package storetest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/queue"
)

// exerciseClaim runs the subtests of claims, finishing attempts, retries and cancels.
func exerciseClaim(t *testing.T, setup func(t *testing.T) *testBundle) {
	t.Run("ClaimByID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, jobspec.Spec{Name: "high", Command: []string{"true"}, Priority: 9})
		mine := b.enqueue(t, jobspec.Spec{Name: "mine", Command: []string{"true"}},
			jobspec.Spec{Name: "later", Command: []string{"true"}, After: []string{"mine"}})
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 5, JobIDs: []string{mine[1].ID, mine[0].ID}})
		require.NoError(t, err)
		require.Equal(t, []string{"mine"}, names(got), "only the named jobs, and only those that are ready")
		got, err = b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", JobIDs: []string{mine[0].ID, "0000000000000000"}})
		require.NoError(t, err)
		require.Empty(t, got, "a running job is not claimed twice; an unknown id is no error")
		got, err = b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 5})
		require.NoError(t, err)
		require.Equal(t, []string{"high"}, names(got))
	})

	t.Run("ClaimOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, jobspec.Spec{Name: "low", Command: []string{"true"}, Priority: -1})
		b.clock.Advance(time.Millisecond)
		b.enqueue(t, jobspec.Spec{Name: "old", Command: []string{"true"}})
		b.clock.Advance(time.Millisecond)
		b.enqueue(t, jobspec.Spec{Name: "new", Command: []string{"true"}}, jobspec.Spec{Name: "high", Command: []string{"true"}, Priority: 5})
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 3, Lease: time.Minute})
		require.NoError(t, err)
		require.Equal(t, []string{"high", "old", "new"}, names(got))
		for _, j := range got {
			require.Equal(t, queue.StateRunning, j.State)
			require.Equal(t, "w", j.LeaseOwner)
			require.Equal(t, T0.Add(2*time.Millisecond+time.Minute), j.LeaseExpiresAt)
			require.Equal(t, 1, j.AttemptCount)
		}
		got, err = b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 5})
		require.NoError(t, err)
		require.Equal(t, []string{"low"}, names(got))
		got, err = b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w"})
		require.NoError(t, err)
		require.Empty(t, got)
		j, err := b.st.JobGet(b.ctx, "high")
		require.NoError(t, err)
		require.Len(t, j.Attempts, 1)
		require.Equal(t, "w", j.Attempts[0].WorkerID)
		require.Equal(t, T0.Add(2*time.Millisecond), j.Attempts[0].StartedAt)
		require.True(t, j.Attempts[0].EndedAt.IsZero())
	})

	t.Run("RetryBackoff", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, jobspec.Spec{Name: "flaky", Command: []string{"false"}, Retries: 2, Backoff: 10 * time.Second})
		code := 1
		fail := queue.Attempt{Outcome: queue.OutcomeFailed, ExitCode: &code, Reason: "exit status 1",
			ConfinedArgv: []string{"bwrap", "--", "false"}, Trail: json.RawMessage(`[{"hook":"h"}]`), StdoutPath: "/l/o", StderrPath: "/l/e"}
		j := b.claimFinish(t, "flaky", fail)
		require.Equal(t, queue.StateQueued, j.State)
		// Equal jitter with r=0.5: base*2^(n-1) * 0.75.
		require.Equal(t, T0.Add(7500*time.Millisecond), j.NotBefore)
		require.Contains(t, j.Reason, "exit status 1")
		b.clock.Advance(7499 * time.Millisecond)
		b.requireNoClaim(t)
		b.clock.Advance(time.Millisecond)
		j = b.claimFinish(t, "flaky", fail)
		require.Equal(t, queue.StateQueued, j.State)
		require.Equal(t, b.clock.Now().Add(15*time.Second), j.NotBefore)
		b.clock.Advance(15 * time.Second)
		j = b.claimFinish(t, "flaky", fail)
		require.Equal(t, queue.StateFailed, j.State, "retries spent")
		require.Len(t, j.Attempts, 3)
		for i, a := range j.Attempts {
			require.Equal(t, i+1, a.Number)
			require.Equal(t, queue.OutcomeFailed, a.Outcome)
			require.Equal(t, 1, *a.ExitCode)
			require.Equal(t, fail.ConfinedArgv, a.ConfinedArgv)
			require.JSONEq(t, string(fail.Trail), string(a.Trail))
			require.Equal(t, "/l/o", a.StdoutPath)
		}
		require.False(t, j.FinishedAt.IsZero())
		b.requireNoClaim(t)

		require.Equal(t, 500*time.Millisecond, queue.Backoff(0, 1, 0))
		require.Equal(t, 30*time.Minute, queue.Backoff(time.Second, 40, 0), "capped at BackoffMax")
	})

	t.Run("DeniedAndCanceledNotRetried", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, jobspec.Spec{Name: "d", Command: []string{"x"}, Retries: 5}, jobspec.Spec{Name: "c", Command: []string{"x"}, Retries: 5})
		j := b.claimFinish(t, "d", queue.Attempt{Outcome: queue.OutcomeDenied, Reason: "hook no-curl denied"})
		require.Equal(t, queue.StateDenied, j.State)
		require.Equal(t, "hook no-curl denied", j.Reason)
		j = b.claimFinish(t, "c", queue.Attempt{Outcome: queue.OutcomeCanceled})
		require.Equal(t, queue.StateCanceled, j.State)
		b.requireNoClaim(t)
		_, err := b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: j.ID, WorkerID: "w", Attempt: queue.Attempt{Outcome: "meh"}})
		require.Error(t, err)
	})

	t.Run("CancelEachState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t,
			jobspec.Spec{Name: "q", Command: []string{"x"}, Priority: -9},
			jobspec.Spec{Name: "qdep", Command: []string{"x"}, After: []string{"q"}},
			jobspec.Spec{Name: "r", Command: []string{"x"}, Priority: 9, Retries: 3},
			jobspec.Spec{Name: "s", Command: []string{"x"}, Priority: 8},
			jobspec.Spec{Name: "f", Command: []string{"x"}, Priority: 7},
			jobspec.Spec{Name: "d", Command: []string{"x"}, Priority: 6},
		)
		// queued: never starts, dependents fail.
		j, err := b.st.JobCancel(b.ctx, "q")
		require.NoError(t, err)
		require.Equal(t, queue.StateCanceled, j.State)
		dep, err := b.st.JobGet(b.ctx, "qdep")
		require.NoError(t, err)
		require.Equal(t, queue.StateFailed, dep.State)
		// canceled: no-op.
		j, err = b.st.JobCancel(b.ctx, "q")
		require.NoError(t, err)
		require.Equal(t, queue.StateCanceled, j.State)
		// running: flagged; the heartbeat says stop; any failure ends canceled, not retried.
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 1})
		require.NoError(t, err)
		require.Equal(t, []string{"r"}, names(got))
		j, err = b.st.JobCancel(b.ctx, "r")
		require.NoError(t, err)
		require.Equal(t, queue.StateRunning, j.State)
		require.True(t, j.CancelRequested)
		stop, err := b.st.LeaseExtend(b.ctx, &queue.LeaseExtendParams{WorkerID: "w", JobIDs: []string{got[0].ID}})
		require.NoError(t, err)
		require.Equal(t, []string{got[0].ID}, stop)
		j, err = b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: got[0].ID, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeFailed, Reason: "signal: killed"}})
		require.NoError(t, err)
		require.Equal(t, queue.StateCanceled, j.State)
		// finished states: refused.
		b.claimFinish(t, "s", queue.Attempt{Outcome: queue.OutcomeSucceeded})
		b.claimFinish(t, "f", queue.Attempt{Outcome: queue.OutcomeFailed})
		b.claimFinish(t, "d", queue.Attempt{Outcome: queue.OutcomeDenied})
		for _, n := range []string{"s", "f", "d"} {
			_, err := b.st.JobCancel(b.ctx, n)
			require.ErrorIs(t, err, queue.ErrWrongState, n)
		}
		_, err = b.st.JobCancel(b.ctx, "ghost")
		require.ErrorIs(t, err, queue.ErrNotFound)
		b.requireNoClaim(t)
	})

	t.Run("ExactlyOnceProcesses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const nJobs, nProcs = 400, 4
		specs := make([]jobspec.Spec, nJobs)
		for i := range specs {
			specs[i] = jobspec.Spec{Name: "j" + strconv.Itoa(i), Command: []string{"true"}, Priority: i % 3}
		}
		b.enqueue(t, specs...)
		exe, err := os.Executable()
		require.NoError(t, err)
		type result struct {
			out []byte
			err error
		}
		results := make([]result, nProcs)
		var wg sync.WaitGroup
		for i := range nProcs {
			cmd := childCommand(exe)
			cmd.Env = append(os.Environ(), envChild+"=claim", envLoc+"="+b.loc, envWorker+"=proc"+strconv.Itoa(i))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			wg.Go(func() {
				out, err := cmd.Output()
				if err != nil {
					err = fmt.Errorf("%w: %s", err, stderr.String())
				}
				results[i] = result{out, err}
			})
		}
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, os.WriteFile(filepath.Join(b.loc, "go"), nil, 0o644))
		wg.Wait()
		seen := map[string]string{}
		for i, r := range results {
			require.NoError(t, r.err, "child %d", i)
			for _, id := range strings.Fields(string(r.out)) {
				prev, dup := seen[id]
				require.False(t, dup, "job %s claimed by proc%d and %s", id, i, prev)
				seen[id] = "proc" + strconv.Itoa(i)
			}
		}
		require.Len(t, seen, nJobs, "every job claimed exactly once (is storetest.RunChild called from TestMain?)")
		c, err := b.st.JobCounts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, nJobs, c[queue.StateSucceeded])
		l, err := b.st.JobList(b.ctx, &queue.JobListParams{})
		require.NoError(t, err)
		for _, j := range l {
			require.Equal(t, 1, j.AttemptCount, j.Name)
		}
	})
}

package storetest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/queue"
)

// exerciseDeps runs the subtests of dependencies (after).
func exerciseDeps(t *testing.T, setup func(t *testing.T) *testBundle) {
	t.Run("AfterChain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		src := `
[[job]]
name = "c"
command = "true"
after = ["b"]
priority = 9
[[job]]
name = "b"
command = "true"
after = ["a"]
priority = 9
[[job]]
name = "a"
command = "true"
`
		specs, err := jobspec.Parse("chain.toml", []byte(src), "")
		require.NoError(t, err)
		jobs, err := b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: specs, Source: src})
		require.NoError(t, err)
		require.Equal(t, 1, jobs[0].DepsPending)
		require.Equal(t, []string{jobs[1].ID}, jobs[0].DependsOn)
		for _, want := range []string{"a", "b", "c"} {
			got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 10})
			require.NoError(t, err)
			require.Equal(t, []string{want}, names(got))
			_, err = b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: got[0].ID, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
			require.NoError(t, err)
		}
		// A later batch may wait on a stored job by id or name; one that
		// already succeeded counts as met.
		d := b.enqueue(t, jobspec.Spec{Name: "d", Command: []string{"true"}, After: []string{"a", jobs[1].ID}})[0]
		require.Equal(t, 0, d.DepsPending)
		// The same dependency named twice (by name and id) is one dependency.
		e := b.enqueue(t, jobspec.Spec{Name: "e", Command: []string{"true"}, After: []string{"d", d.ID, "d"}})[0]
		require.Equal(t, 1, e.DepsPending)
		b.claimFinish(t, "d", queue.Attempt{Outcome: queue.OutcomeSucceeded})
		b.claimFinish(t, "e", queue.Attempt{Outcome: queue.OutcomeSucceeded})
	})

	t.Run("FailedDependencyFailsDependents", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t,
			jobspec.Spec{Name: "x", Command: []string{"false"}},
			jobspec.Spec{Name: "y", Command: []string{"true"}, After: []string{"x"}},
			jobspec.Spec{Name: "z", Command: []string{"true"}, After: []string{"y"}},
			jobspec.Spec{Name: "free", Command: []string{"true"}, Priority: -1},
		)
		j := b.claimFinish(t, "x", queue.Attempt{Outcome: queue.OutcomeFailed, Reason: "exit status 1"})
		require.Equal(t, queue.StateFailed, j.State)
		y, err := b.st.JobGet(b.ctx, "y")
		require.NoError(t, err)
		require.Equal(t, queue.StateFailed, y.State)
		require.Contains(t, y.Reason, `"x"`)
		require.Empty(t, y.Attempts)
		z, err := b.st.JobGet(b.ctx, "z")
		require.NoError(t, err)
		require.Equal(t, queue.StateFailed, z.State)
		require.Contains(t, z.Reason, `"y"`)
		require.Contains(t, z.Reason, `"x"`)
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 10})
		require.NoError(t, err)
		require.Equal(t, []string{"free"}, names(got))
		// Waiting on a job that already failed fails at once.
		late := b.enqueue(t, jobspec.Spec{Name: "late", Command: []string{"true"}, After: []string{"x"}}, jobspec.Spec{Name: "later", Command: []string{"true"}, After: []string{"late"}})
		require.Equal(t, queue.StateFailed, late[0].State)
		require.Equal(t, queue.StateFailed, late[1].State)
		// Retrying y is refused while x has failed; retrying x then y works.
		_, err = b.st.JobRetry(b.ctx, "y")
		require.ErrorIs(t, err, queue.ErrWrongState)
		x, err := b.st.JobRetry(b.ctx, "x")
		require.NoError(t, err)
		require.Equal(t, queue.StateQueued, x.State)
		require.Equal(t, 2, x.MaxAttempts)
		y, err = b.st.JobRetry(b.ctx, "y")
		require.NoError(t, err)
		require.Equal(t, 1, y.DepsPending)
		got, err = b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 10})
		require.NoError(t, err)
		require.Equal(t, []string{"x"}, names(got))
		require.Equal(t, 2, got[0].AttemptCount)
	})
}

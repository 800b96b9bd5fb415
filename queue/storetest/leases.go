package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/queue"
)

// exerciseLeases runs the subtests of leases: expiry and release.
func exerciseLeases(t *testing.T, setup func(t *testing.T) *testBundle) {
	t.Run("LeaseExpiry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, jobspec.Spec{Name: "once", Command: []string{"x"}}, jobspec.Spec{Name: "twice", Command: []string{"x"}, Retries: 1})
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "dead", Limit: 2, Lease: 30 * time.Second})
		require.NoError(t, err)
		require.Len(t, got, 2)
		ids := []string{got[0].ID, got[1].ID}
		// The heartbeat keeps the lease alive.
		b.clock.Advance(20 * time.Second)
		stop, err := b.st.LeaseExtend(b.ctx, &queue.LeaseExtendParams{WorkerID: "dead", JobIDs: ids, Lease: 30 * time.Second})
		require.NoError(t, err)
		require.Empty(t, stop)
		b.clock.Advance(20 * time.Second)
		rec, err := b.st.LeaseRecoverExpired(b.ctx)
		require.NoError(t, err)
		require.Empty(t, rec)
		// The worker crashes: no more heartbeats.
		b.clock.Advance(11 * time.Second)
		rec, err = b.st.LeaseRecoverExpired(b.ctx)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"once", "twice"}, names(rec))
		for _, j := range rec {
			require.Len(t, j.Attempts, 1)
			require.Equal(t, queue.OutcomeInterrupted, j.Attempts[0].Outcome)
			require.Equal(t, b.clock.Now(), j.Attempts[0].EndedAt)
			require.Empty(t, j.LeaseOwner)
			if j.Name == "once" {
				require.Equal(t, queue.StateFailed, j.State)
			} else {
				require.Equal(t, queue.StateQueued, j.State)
			}
		}
		// The dead worker's late report is refused, its heartbeat says stop.
		_, err = b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: ids[1], WorkerID: "dead", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
		require.ErrorIs(t, err, queue.ErrLeaseLost)
		stop, err = b.st.LeaseExtend(b.ctx, &queue.LeaseExtendParams{WorkerID: "dead", JobIDs: ids})
		require.NoError(t, err)
		require.ElementsMatch(t, ids, stop)
		j := b.claimFinish(t, "twice", queue.Attempt{Outcome: queue.OutcomeSucceeded})
		require.Equal(t, queue.StateSucceeded, j.State)
		require.Len(t, j.Attempts, 2)
	})

	t.Run("LeaseRelease", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, jobspec.Spec{Name: "once", Command: []string{"x"}},
			jobspec.Spec{Name: "twice", Command: []string{"x"}, Retries: 1},
			jobspec.Spec{Name: "cancel-me", Command: []string{"x"}, Retries: 1},
			jobspec.Spec{Name: "others", Command: []string{"x"}, Retries: 1})
		mine, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 3, Lease: time.Hour})
		require.NoError(t, err)
		require.Len(t, mine, 3)
		theirs, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "other", Limit: 1, Lease: time.Hour})
		require.NoError(t, err)
		require.Len(t, theirs, 1)
		_, err = b.st.JobCancel(b.ctx, "cancel-me")
		require.NoError(t, err)
		_, err = b.st.LeaseRelease(b.ctx, &queue.LeaseReleaseParams{})
		require.Error(t, err, "WorkerID is required")

		// Not its lease, or no such job: left alone.
		rel, err := b.st.LeaseRelease(b.ctx, &queue.LeaseReleaseParams{WorkerID: "w", JobIDs: []string{theirs[0].ID, "ghost"}})
		require.NoError(t, err)
		require.Empty(t, rel)
		b.clock.Advance(time.Second)
		ids := []string{mine[0].ID, mine[1].ID, mine[2].ID}
		rel, err = b.st.LeaseRelease(b.ctx, &queue.LeaseReleaseParams{WorkerID: "w", JobIDs: ids, Reason: "worker stopped while the job ran"})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"once", "twice", "cancel-me"}, names(rel))
		for _, j := range rel {
			require.Len(t, j.Attempts, 1, j.Name)
			require.Equal(t, queue.OutcomeInterrupted, j.Attempts[0].Outcome, j.Name)
			require.Equal(t, "worker stopped while the job ran", j.Attempts[0].Reason, j.Name)
			require.Equal(t, b.clock.Now(), j.Attempts[0].EndedAt, j.Name)
			require.Empty(t, j.LeaseOwner, j.Name)
			got, err := b.st.JobGet(b.ctx, j.ID)
			require.NoError(t, err)
			require.Equal(t, j.State, got.State, j.Name)
			switch j.Name {
			case "once", "twice":
				// A stop does not count against retries: even the job
				// on its last attempt is queued again, ready at once,
				// with one more attempt allowed.
				require.Equal(t, queue.StateQueued, j.State, j.Name)
				require.False(t, j.NotBefore.After(b.clock.Now()), "ready at once")
				require.Equal(t, map[string]int{"once": 2, "twice": 3}[j.Name], j.MaxAttempts, j.Name)
				require.Contains(t, j.Reason, "does not count against retries", j.Name)
			case "cancel-me":
				require.Equal(t, queue.StateCanceled, j.State)
			}
		}
		// Released again: nothing left to release; the late report is refused.
		rel, err = b.st.LeaseRelease(b.ctx, &queue.LeaseReleaseParams{WorkerID: "w", JobIDs: ids})
		require.NoError(t, err)
		require.Empty(t, rel)
		_, err = b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: ids[1], WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
		require.ErrorIs(t, err, queue.ErrLeaseLost)
		// The other worker's job still runs; the released one is claimed again.
		got, err := b.st.JobGet(b.ctx, theirs[0].ID)
		require.NoError(t, err)
		require.Equal(t, queue.StateRunning, got.State)
		again, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w2", Limit: 5})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"once", "twice"}, names(again))
		for _, j := range again {
			require.Equal(t, 2, j.AttemptCount, j.Name)
		}
	})
}

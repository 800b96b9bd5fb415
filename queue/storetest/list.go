package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/queue"
)

// exerciseList runs the subtests of lists, counts and pruning.
func exerciseList(t *testing.T, setup func(t *testing.T) *testBundle) {
	t.Run("ListCountsPrune", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t,
			jobspec.Spec{Name: "web-1", Command: []string{"x"}, Labels: map[string]string{"team": "web", "env": "prod"}},
			jobspec.Spec{Name: "web-2", Command: []string{"x"}, Labels: map[string]string{"team": "web"}},
			jobspec.Spec{Name: "db-1", Command: []string{"x"}, Labels: map[string]string{"team": "db"}, Priority: 1},
		)
		b.claimFinish(t, "db-1", queue.Attempt{Outcome: queue.OutcomeSucceeded})
		l, err := b.st.JobList(b.ctx, &queue.JobListParams{NameGlob: "web-*"})
		require.NoError(t, err)
		require.Equal(t, []string{"web-2", "web-1"}, names(l), "newest first")
		l, err = b.st.JobList(b.ctx, &queue.JobListParams{Labels: map[string]string{"team": "web", "env": "prod"}})
		require.NoError(t, err)
		require.Equal(t, []string{"web-1"}, names(l))
		l, err = b.st.JobList(b.ctx, &queue.JobListParams{States: []queue.JobState{queue.StateSucceeded}, WithAttempts: true})
		require.NoError(t, err)
		require.Equal(t, []string{"db-1"}, names(l))
		require.Len(t, l[0].Attempts, 1)
		l, err = b.st.JobList(b.ctx, &queue.JobListParams{Limit: 1})
		require.NoError(t, err)
		require.Len(t, l, 1)
		// By id: ids, not names; unknown ids match nothing; with states, both must hold.
		all, err := b.st.JobList(b.ctx, &queue.JobListParams{})
		require.NoError(t, err)
		byName := map[string]string{}
		for _, j := range all {
			byName[j.Name] = j.ID
		}
		l, err = b.st.JobList(b.ctx, &queue.JobListParams{IDs: []string{byName["web-1"], byName["db-1"], "web-2", "06nosuchjob00000"}})
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"web-1", "db-1"}, names(l))
		l, err = b.st.JobList(b.ctx, &queue.JobListParams{IDs: []string{byName["web-1"], byName["db-1"]}, States: []queue.JobState{queue.StateSucceeded, queue.StateFailed}, WithAttempts: true})
		require.NoError(t, err)
		require.Equal(t, []string{"db-1"}, names(l))
		require.Len(t, l[0].Attempts, 1)
		l, err = b.st.JobList(b.ctx, &queue.JobListParams{IDs: []string{byName["web-2"]}, States: []queue.JobState{queue.StateQueued}})
		require.NoError(t, err)
		require.Equal(t, []string{"web-2"}, names(l))
		c, err := b.st.JobCounts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 2, c[queue.StateQueued])
		require.Equal(t, 1, c[queue.StateSucceeded])
		require.Equal(t, 0, c[queue.StateDenied])

		b.clock.Advance(time.Hour)
		n, err := b.st.JobPrune(b.ctx, &queue.JobPruneParams{OlderThan: 2 * time.Hour})
		require.NoError(t, err)
		require.Zero(t, n)
		n, err = b.st.JobPrune(b.ctx, &queue.JobPruneParams{OlderThan: 30 * time.Minute})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = b.st.JobGet(b.ctx, "db-1")
		require.ErrorIs(t, err, queue.ErrNotFound)
		_, err = b.st.JobPrune(b.ctx, &queue.JobPruneParams{OlderThan: -1})
		require.Error(t, err)
		_, err = b.st.JobGet(b.ctx, "web-1")
		require.NoError(t, err)
	})
}

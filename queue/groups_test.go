package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/queue"
)

// The group rule of a claim, without a store: which groups are excluded,
// and how slots are counted within one claim.
func TestClaimGate(t *testing.T) {
	t.Parallel()
	g := queue.NewClaimGate(queue.QueueState{}, []queue.Group{
		{Name: "full", Limit: 2, Running: 2},
		{Name: "over", Limit: 1, Running: 3}, // limit lowered under running jobs
		{Name: "paused", Paused: true, Limit: 5},
		{Name: "two", Limit: 3, Running: 1},
		{Name: "open"}, // neither limited nor paused
	})
	require.False(t, g.Paused())
	require.True(t, g.Limited())
	require.Equal(t, []string{"full", "over", "paused"}, g.Blocked())
	require.True(t, g.Take(""), "no group: always")
	require.True(t, g.Take("open"))
	require.True(t, g.Take("unknown"), "a group without a row is unlimited")
	require.False(t, g.Take("full"))
	require.True(t, g.Take("two"))
	require.Equal(t, []string{"full", "over", "paused"}, g.Blocked(), "one slot left")
	require.True(t, g.Take("two"))
	require.False(t, g.Take("two"), "3 of 3")
	require.Equal(t, []string{"full", "over", "paused", "two"}, g.Blocked())

	g = queue.NewClaimGate(queue.QueueState{Paused: true}, nil)
	require.True(t, g.Paused())
	require.False(t, g.Limited())
	require.NotNil(t, g.Blocked(), "encodes as [] for a driver's JSON argument")
}

func TestDueAt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 24, 12, 0, 0, 0, time.UTC)
	at := now.Add(time.Hour)
	require.True(t, queue.DueAt(jobspec.Spec{}, now).IsZero())
	require.Equal(t, now.Add(time.Minute), queue.DueAt(jobspec.Spec{Delay: time.Minute}, now))
	require.Equal(t, at, queue.DueAt(jobspec.Spec{RunAt: at}, now))
	require.Equal(t, at, queue.DueAt(jobspec.Spec{RunAt: at, Delay: time.Minute}, now), "the later one")
	require.Equal(t, now.Add(2*time.Hour), queue.DueAt(jobspec.Spec{RunAt: at, Delay: 2 * time.Hour}, now))
}

// Every worker must compute the same delay for a (schedule, tick), and the
// delays must spread over the window.
func TestTickJitter(t *testing.T) {
	t.Parallel()
	tick := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Zero(t, queue.TickJitter("s", tick, 0))
	const w = 5 * time.Minute
	seen := map[time.Duration]bool{}
	var lo, hi int
	for i := range 200 {
		tk := tick.Add(time.Duration(i) * time.Hour)
		d := queue.TickJitter("hourly", tk, w)
		require.Equal(t, d, queue.TickJitter("hourly", tk, w), "deterministic")
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.Less(t, d, w)
		require.Zero(t, d%time.Millisecond)
		seen[d] = true
		if d < w/2 {
			lo++
		} else {
			hi++
		}
	}
	require.Greater(t, len(seen), 190, "spread, not constant")
	require.Greater(t, lo, 60)
	require.Greater(t, hi, 60)
	require.NotEqual(t, queue.TickJitter("a", tick, time.Hour), queue.TickJitter("b", tick, time.Hour), "per schedule")
}

func TestWaiting(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := func(group string) queue.Job {
		return queue.Job{State: queue.StateQueued, Spec: jobspec.Spec{Group: group}}
	}
	groups := map[string]queue.Group{
		"repo-x": {Name: "repo-x", Limit: 1, Running: 1},
		"gpu":    {Name: "gpu", Limit: 2, Running: 1},
		"held":   {Name: "held", Paused: true},
	}
	require.Equal(t, "group repo-x full (1/1)", queue.Waiting(q("repo-x"), queue.QueueState{}, groups, now))
	require.Equal(t, "", queue.Waiting(q("gpu"), queue.QueueState{}, groups, now))
	require.Equal(t, "group held paused", queue.Waiting(q("held"), queue.QueueState{}, groups, now))
	require.Equal(t, "queue paused", queue.Waiting(q("repo-x"), queue.QueueState{Paused: true}, groups, now))
	j := q("")
	j.NotBefore = now.Add(time.Minute)
	require.Equal(t, "due 2026-01-01T00:01:00Z", queue.Waiting(j, queue.QueueState{Paused: true}, nil, now), "the due time first")
	j.DepsPending = 2
	require.Equal(t, "2 dependencies pending", queue.Waiting(j, queue.QueueState{}, nil, now))
	j = q("repo-x")
	j.State = queue.StateRunning
	require.Equal(t, "", queue.Waiting(j, queue.QueueState{}, groups, now), "only queued jobs wait")
}

func TestPlanManualRun(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 300, time.UTC)
	tick := now.Truncate(time.Second)
	for _, tc := range []struct {
		overlap, busy, want string
	}{
		{"", "", queue.DecisionManual},
		{"", "J1", queue.DecisionSkippedOverlap},
		{jobspec.OverlapQueue, "J1", queue.DecisionSkippedOverlap},
		{jobspec.OverlapAllow, "J1", queue.DecisionManual},
	} {
		d := queue.PlanManualRun(jobspec.Spec{Overlap: tc.overlap}, tc.busy, now)
		require.Equal(t, tc.want, d.Decision, "%+v", tc)
		require.Equal(t, tc.want == queue.DecisionManual, d.Instance)
		if d.Instance {
			require.Equal(t, tick, d.Tick, "the instance's tick: to the second")
		} else {
			require.Equal(t, now, d.Tick, "a refusal: the exact time")
		}
	}
}

package storetest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/queue"
)

// exerciseGroups runs the subtests of groups, pauses and due times.
func exerciseGroups(t *testing.T, setup func(t *testing.T) *testBundle) {
	grouped := func(name, group string, prio int) jobspec.Spec {
		return jobspec.Spec{Name: name, Command: []string{"true"}, Group: group, Priority: prio}
	}
	claim := func(t *testing.T, b *testBundle, limit int) []queue.Job {
		t.Helper()
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: limit})
		require.NoError(t, err)
		return got
	}
	finish := func(t *testing.T, b *testBundle, id string) {
		t.Helper()
		_, err := b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: id, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
		require.NoError(t, err)
	}
	groupsByName := func(t *testing.T, b *testBundle) map[string]queue.Group {
		t.Helper()
		gs, err := b.st.GroupList(b.ctx, &queue.GroupListParams{})
		require.NoError(t, err)
		m := map[string]queue.Group{}
		for _, g := range gs {
			m[g.Name] = g
		}
		return m
	}

	t.Run("GroupLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobs := b.enqueue(t, grouped("g1", "repo-x", 0), grouped("g2", "repo-x", 0), grouped("g3", "repo-x", 0), grouped("free", "", 0))
		byIDs := func(js ...queue.Job) []queue.Job {
			t.Helper()
			var ids []string
			for _, j := range js {
				ids = append(ids, j.ID)
			}
			got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 10, JobIDs: ids})
			require.NoError(t, err)
			return got
		}
		g, err := b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: "repo-x", Limit: 1})
		require.NoError(t, err)
		require.Equal(t, queue.Group{Name: "repo-x", Limit: 1, Queued: 3}, g)

		got := claim(t, b, 10)
		require.Equal(t, []string{"g1", "free"}, names(got), "one of the group, and the job without a group")
		require.Empty(t, claim(t, b, 10), "the group is full")
		require.Empty(t, byIDs(jobs[1]), "a claim by id too")
		gs := groupsByName(t, b)
		require.Equal(t, queue.Group{Name: "repo-x", Limit: 1, Running: 1, Queued: 2}, gs["repo-x"])
		j, err := b.st.JobGet(b.ctx, "g2")
		require.NoError(t, err)
		q, err := b.st.QueueGet(b.ctx)
		require.NoError(t, err)
		require.Equal(t, "group repo-x full (1/1)", queue.Waiting(j, q, gs, b.clock.Now()))

		finish(t, b, got[0].ID)
		got = claim(t, b, 10)
		require.Equal(t, []string{"g2"}, names(got), "the slot is free again")

		// A raised limit frees a slot at once; a removed one frees them all.
		_, err = b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: "repo-x", Limit: 2})
		require.NoError(t, err)
		require.Equal(t, []string{"g3"}, names(byIDs(jobs[2])), "by id, counted against the limit")
		b.enqueue(t, grouped("g4", "repo-x", 0))
		require.Empty(t, claim(t, b, 10), "2 of 2 running")
		_, err = b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: "repo-x", Limit: 0})
		require.NoError(t, err)
		require.Equal(t, []string{"g4"}, names(claim(t, b, 10)))
		gs = groupsByName(t, b)
		require.Equal(t, queue.Group{Name: "repo-x", Running: 3}, gs["repo-x"], "listed while it has running jobs, without a limit")

		for _, p := range []queue.GroupLimitSetParams{{Name: "", Limit: 1}, {Name: "bad name", Limit: 1}, {Name: "x", Limit: -1}, {Name: "x", Limit: queue.MaxGroupLimit + 1}} {
			_, err := b.st.GroupLimitSet(b.ctx, &p)
			require.ErrorIs(t, err, queue.ErrInvalid, "%+v", p)
		}
	})

	t.Run("GroupLimitsInOneClaim", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The head of the claim order is all of group a: the claim must
		// look past it, not stop.
		b.enqueue(t, grouped("a1", "a", 9), grouped("a2", "a", 9), grouped("a3", "a", 9),
			grouped("b1", "b", 5), grouped("b2", "b", 5), grouped("b3", "b", 5),
			grouped("c1", "c", 1), grouped("c2", "c", 1), grouped("n1", "", 0))
		for name, n := range map[string]int{"a": 1, "b": 2} {
			_, err := b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: name, Limit: n})
			require.NoError(t, err)
		}
		require.Equal(t, []string{"a1", "b1", "b2", "c1"}, names(claim(t, b, 4)), "claim order, skipping what the limits refuse")
		require.Equal(t, []string{"c2", "n1"}, names(claim(t, b, 10)))
		require.Empty(t, claim(t, b, 10))
		gs := groupsByName(t, b)
		require.Equal(t, queue.Group{Name: "a", Limit: 1, Running: 1, Queued: 2}, gs["a"])
		require.Equal(t, queue.Group{Name: "b", Limit: 2, Running: 2, Queued: 1}, gs["b"])
		require.Equal(t, queue.Group{Name: "c", Running: 2}, gs["c"])
		require.NotContains(t, gs, "", "jobs without a group are no group")

		// Names: exactly those, even unknown.
		l, err := b.st.GroupList(b.ctx, &queue.GroupListParams{Names: []string{"b", "zzz"}})
		require.NoError(t, err)
		require.Equal(t, []queue.Group{gs["b"], {Name: "zzz"}}, l)
	})

	t.Run("PauseResume", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobs := b.enqueue(t, grouped("x1", "x", 0), grouped("y1", "y", 0), grouped("y2", "y", 0))
		q, err := b.st.QueueGet(b.ctx)
		require.NoError(t, err)
		require.Equal(t, queue.QueueState{}, q)

		require.NoError(t, b.st.QueuePause(b.ctx, &queue.QueuePauseParams{}))
		require.NoError(t, b.st.QueuePause(b.ctx, &queue.QueuePauseParams{}), "pausing twice is a no-op")
		q, err = b.st.QueueGet(b.ctx)
		require.NoError(t, err)
		require.True(t, q.Paused)
		require.True(t, q.PausedAt.Equal(b.clock.Now()), "paused at the store's clock")
		require.Empty(t, claim(t, b, 10), "a paused queue hands out nothing")
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", JobIDs: []string{jobs[0].ID}})
		require.NoError(t, err)
		require.Empty(t, got, "not even a claim by id")
		require.Equal(t, "queue paused", queue.Waiting(jobs[0], q, nil, b.clock.Now()))

		// Pause a group while the queue is paused; resume the queue.
		require.NoError(t, b.st.QueuePause(b.ctx, &queue.QueuePauseParams{Group: "y"}))
		require.NoError(t, b.st.QueuePause(b.ctx, &queue.QueuePauseParams{Group: "idle"}), "a group without jobs can be paused")
		require.NoError(t, b.st.QueueResume(b.ctx, &queue.QueuePauseParams{}))
		require.NoError(t, b.st.QueueResume(b.ctx, &queue.QueuePauseParams{}), "resuming twice is a no-op")
		q, err = b.st.QueueGet(b.ctx)
		require.NoError(t, err)
		require.Equal(t, queue.QueueState{}, q)
		got = claim(t, b, 10)
		require.Equal(t, []string{"x1"}, names(got), "group y is still paused")
		gs := groupsByName(t, b)
		require.Equal(t, queue.Group{Name: "y", Paused: true, Queued: 2}, gs["y"])
		require.Equal(t, queue.Group{Name: "idle", Paused: true}, gs["idle"])
		require.Equal(t, "group y paused", queue.Waiting(jobs[1], q, gs, b.clock.Now()))
		// A running job goes on through a pause.
		require.NoError(t, b.st.QueuePause(b.ctx, &queue.QueuePauseParams{Group: "x"}))
		finish(t, b, got[0].ID)

		require.NoError(t, b.st.QueueResume(b.ctx, &queue.QueuePauseParams{Group: "y"}))
		require.Equal(t, []string{"y1", "y2"}, names(claim(t, b, 10)))
		require.ErrorIs(t, b.st.QueuePause(b.ctx, &queue.QueuePauseParams{Group: "no way"}), queue.ErrInvalid)
	})

	t.Run("DelayedJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		runAt := T0.Add(time.Hour)
		jobs := b.enqueue(t,
			jobspec.Spec{Name: "later", Command: []string{"true"}, Delay: 10 * time.Minute},
			jobspec.Spec{Name: "at", Command: []string{"true"}, RunAt: runAt},
			jobspec.Spec{Name: "both", Command: []string{"true"}, RunAt: T0.Add(time.Minute), Delay: 2 * time.Minute},
			jobspec.Spec{Name: "past", Command: []string{"true"}, RunAt: T0.Add(-time.Hour)},
		)
		require.True(t, jobs[0].NotBefore.Equal(T0.Add(10*time.Minute)), "delay counts from enqueue: %s", jobs[0].NotBefore)
		require.True(t, jobs[1].NotBefore.Equal(runAt))
		require.True(t, jobs[2].NotBefore.Equal(T0.Add(2*time.Minute)), "the later of run_at and delay")
		for _, j := range jobs {
			b.requireStored(t, j)
		}
		require.Equal(t, "due "+runAt.Format(time.RFC3339), queue.Waiting(jobs[1], queue.QueueState{}, nil, T0))
		require.Equal(t, []string{"past"}, names(claim(t, b, 10)), "a run_at in the past is due at once")
		b.clock.Advance(2*time.Minute - time.Nanosecond)
		require.Empty(t, claim(t, b, 10))
		b.clock.Advance(time.Nanosecond)
		require.Equal(t, []string{"both"}, names(claim(t, b, 10)), "due exactly at its time, on the store's clock")
		b.clock.Advance(8 * time.Minute)
		require.Equal(t, []string{"later"}, names(claim(t, b, 10)))
		b.clock.Advance(time.Hour)
		require.Equal(t, []string{"at"}, names(claim(t, b, 10)))

		// Canceled before it was due, then retried: still not before run_at.
		later := T0.Add(24 * time.Hour)
		j := b.enqueue(t, jobspec.Spec{Name: "tomorrow", Command: []string{"true"}, RunAt: later})[0]
		_, err := b.st.JobCancel(b.ctx, j.ID)
		require.NoError(t, err)
		j, err = b.st.JobRetry(b.ctx, j.ID)
		require.NoError(t, err)
		require.True(t, j.NotBefore.Equal(later), "retry keeps run_at: %s", j.NotBefore)
		require.Empty(t, claim(t, b, 10))
	})

	t.Run("TimesAndSource", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobs, err := b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "t", Command: []string{"false"}, Retries: 1}}, Source: "# the file"})
		require.NoError(t, err)
		require.True(t, jobs[0].StartedAt.IsZero())
		j, err := b.st.JobGet(b.ctx, "t")
		require.NoError(t, err)
		require.Empty(t, j.Source, "JobGet leaves the source alone")
		src, err := b.st.JobSourceGet(b.ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, "# the file", src)
		_, err = b.st.JobSourceGet(b.ctx, "0000000000000000")
		require.ErrorIs(t, err, queue.ErrNotFound)

		b.clock.Advance(time.Second)
		got := claim(t, b, 1)
		require.True(t, got[0].StartedAt.Equal(T0.Add(time.Second)), "set at claim")
		b.clock.Advance(time.Second)
		_, err = b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: j.ID, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeFailed}})
		require.NoError(t, err)
		b.clock.Advance(time.Hour)
		got = claim(t, b, 1)
		start2 := b.clock.Now()
		require.True(t, got[0].StartedAt.Equal(start2), "the newest attempt's start")
		b.clock.Advance(time.Second)
		_, err = b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: j.ID, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
		require.NoError(t, err)
		l, err := b.st.JobList(b.ctx, &queue.JobListParams{})
		require.NoError(t, err)
		require.Len(t, l, 1)
		require.True(t, l[0].StartedAt.Equal(start2), "JobList fills it without attempts")
		require.True(t, l[0].FinishedAt.Equal(start2.Add(time.Second)))
		require.Nil(t, l[0].Attempts)
	})

	t.Run("BlockedAheadKeepOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Ahead in claim order: a full group, a paused group and jobs
		// not yet due; behind them, claimable jobs of every kind.
		b.enqueue(t, grouped("full-run", "full", 9))
		_, err := b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: "full", Limit: 1})
		require.NoError(t, err)
		require.Equal(t, []string{"full-run"}, names(claim(t, b, 1)))
		require.NoError(t, b.st.QueuePause(b.ctx, &queue.QueuePauseParams{Group: "held"}))
		_, err = b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: "room", Limit: 2})
		require.NoError(t, err)
		b.enqueue(t,
			grouped("full-1", "full", 8), grouped("full-2", "full", 8),
			grouped("held-1", "held", 8), grouped("held-2", "held", 7),
			jobspec.Spec{Name: "soon", Command: []string{"true"}, Priority: 8, Delay: time.Minute},
			jobspec.Spec{Name: "soon-room", Command: []string{"true"}, Priority: 8, Group: "room", Delay: time.Minute},
			grouped("room-1", "room", 6), grouped("free-1", "free", 6), grouped("none-1", "", 6),
			grouped("room-2", "room", 5), grouped("room-3", "room", 5), grouped("none-2", "", 4),
		)
		require.Equal(t, []string{"room-1", "free-1", "none-1"}, names(claim(t, b, 3)), "blocked jobs ahead are passed over, claim order kept")

		// Due now: ahead of what was claimable, and counted in its group
		// (room has 1 of 2 running: soon-room takes the last slot).
		b.clock.Advance(time.Minute)
		require.Equal(t, []string{"soon", "soon-room", "none-2"}, names(claim(t, b, 10)), "jobs that became due take their place in claim order")

		// The paused group resumed: its jobs come first again, by
		// priority, before a full group's.
		require.NoError(t, b.st.QueueResume(b.ctx, &queue.QueuePauseParams{Group: "held"}))
		b.enqueue(t, grouped("none-3", "", 8))
		require.Equal(t, []string{"held-1", "none-3", "held-2"}, names(claim(t, b, 10)))
		require.Empty(t, claim(t, b, 10), "full and room are full")

		// Removing a limit puts its jobs back among the others.
		_, err = b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: "full", Limit: 0})
		require.NoError(t, err)
		b.enqueue(t, grouped("none-4", "", 8))
		require.Equal(t, []string{"full-1", "full-2", "none-4"}, names(claim(t, b, 10)), "enqueue order among equal priorities")
	})

	t.Run("LimitSetOnQueuedJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Jobs queued (and one running) before their group had a limit.
		b.enqueue(t, grouped("r1", "repo", 0), grouped("r2", "repo", 0), grouped("r3", "repo", 0),
			jobspec.Spec{Name: "flaky", Command: []string{"false"}, Group: "repo", Retries: 1, Priority: -1},
			jobspec.Spec{Name: "bad", Command: []string{"false"}, Group: "repo", Priority: -2})
		first := claim(t, b, 1)
		require.Equal(t, []string{"r1"}, names(first))
		_, err := b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: "repo", Limit: 2})
		require.NoError(t, err)
		second := claim(t, b, 10)
		require.Equal(t, []string{"r2"}, names(second), "the running job counts")
		finish(t, b, first[0].ID)
		third := claim(t, b, 10)
		require.Equal(t, []string{"r3"}, names(third))
		require.Empty(t, claim(t, b, 10))
		finish(t, b, second[0].ID)
		finish(t, b, third[0].ID)
		got := claim(t, b, 10)
		require.Equal(t, []string{"flaky", "bad"}, names(got))
		// A failed attempt queued again for its retry, and a failed job
		// retried, stay under the group's limit.
		for _, j := range got {
			_, err = b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: j.ID, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeFailed}})
			require.NoError(t, err)
		}
		_, err = b.st.JobRetry(b.ctx, "bad")
		require.NoError(t, err)
		b.enqueue(t, grouped("r4", "repo", 9)) // enqueued while the limit is set
		b.clock.Advance(time.Hour)             // past the retry's backoff
		require.Equal(t, []string{"r4", "flaky"}, names(claim(t, b, 10)), "bad waits for a slot")
		gs := groupsByName(t, b)
		require.Equal(t, queue.Group{Name: "repo", Limit: 2, Running: 2, Queued: 1}, gs["repo"])
	})

	t.Run("GroupUnsetUnknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, grouped("j", "has-jobs", 0))
		for _, name := range []string{"never-seen", "has-jobs"} {
			_, err := b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: name, Limit: 0})
			require.ErrorIs(t, err, queue.ErrGroupNotFound, name)
			require.ErrorContains(t, err, name)
		}
		require.NoError(t, b.st.QueuePause(b.ctx, &queue.QueuePauseParams{Group: "paused-only"}))
		_, err := b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: "paused-only", Limit: 0})
		require.ErrorIs(t, err, queue.ErrGroupNotFound, "a pause is no limit")
		require.Equal(t, queue.Group{Name: "paused-only", Paused: true}, groupsByName(t, b)["paused-only"], "and the pause stays")
	})

	t.Run("DueWhileWaitingForDependency", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.enqueue(t, jobspec.Spec{Name: "dep", Command: []string{"true"}},
			jobspec.Spec{Name: "child", Command: []string{"true"}, After: []string{"dep"}, Delay: time.Minute, Priority: 5})
		got := claim(t, b, 10)
		require.Equal(t, []string{"dep"}, names(got))
		b.clock.Advance(time.Hour)
		require.Empty(t, claim(t, b, 10), "due, but its dependency runs")
		finish(t, b, got[0].ID)
		require.Equal(t, []string{"child"}, names(claim(t, b, 10)))
	})

	t.Run("GroupSlotRace2Processes", func(t *testing.T) { raceGroupSlot(t, setup, 2, 1) })
	t.Run("GroupSlotRace4Processes", func(t *testing.T) { raceGroupSlot(t, setup, 4, 2) })
}

// raceGroupSlot has procs processes claim the jobs of one group whose
// limit is limit, holding each job a few milliseconds, and checks from
// the attempts' start and end times (store clock) that never more than
// limit ran at once, and that every job ran exactly once.
func raceGroupSlot(t *testing.T, setup func(t *testing.T) *testBundle, procs, limit int) {
	t.Parallel()
	b := setup(t)
	const nJobs = 40
	specs := make([]jobspec.Spec, 0, nJobs+10)
	for i := range nJobs {
		specs = append(specs, jobspec.Spec{Name: "g" + strconv.Itoa(i), Command: []string{"true"}, Group: "slot"})
	}
	for i := range 10 { // ungrouped jobs keep claims busy beside the group
		specs = append(specs, jobspec.Spec{Name: "n" + strconv.Itoa(i), Command: []string{"true"}})
	}
	b.enqueue(t, specs...)
	_, err := b.st.GroupLimitSet(b.ctx, &queue.GroupLimitSetParams{Name: "slot", Limit: limit})
	require.NoError(t, err)
	exe, err := os.Executable()
	require.NoError(t, err)
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		cmd := childCommand(exe)
		cmd.Env = append(os.Environ(), envChild+"=group", envLoc+"="+b.loc, envWorker+"=proc"+strconv.Itoa(i))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		wg.Go(func() {
			outs[i], errs[i] = cmd.Output()
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%w: %s", errs[i], stderr.String())
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, os.WriteFile(filepath.Join(b.loc, "go"), nil, 0o644))
	wg.Wait()
	seen := map[string]bool{}
	for i := range procs {
		require.NoError(t, errs[i], "child %d (is storetest.RunChild called from TestMain?)", i)
		for _, id := range strings.Fields(string(outs[i])) {
			require.False(t, seen[id], "job %s claimed twice", id)
			seen[id] = true
		}
	}
	require.Len(t, seen, nJobs+10)
	l, err := b.st.JobList(b.ctx, &queue.JobListParams{WithAttempts: true})
	require.NoError(t, err)
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, j := range l {
		require.Equal(t, queue.StateSucceeded, j.State, j.Name)
		require.Len(t, j.Attempts, 1, j.Name)
		if j.Spec.Group != "slot" {
			continue
		}
		a := j.Attempts[0]
		require.True(t, a.EndedAt.After(a.StartedAt), j.Name)
		edges = append(edges, edge{a.StartedAt, 1}, edge{a.EndedAt, -1})
	}
	// An end at the same instant as a start comes first: [start, end).
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	running, most := 0, 0
	for _, e := range edges {
		running += e.delta
		most = max(most, running)
	}
	require.LessOrEqual(t, most, limit, "at most %d of the group ran at once", limit)
	require.Positive(t, most)
}

// runGroupChild is a child of raceGroupSlot: it claims and finishes jobs,
// holding each a few milliseconds, until nothing is queued, and prints
// the ids it ran.
func runGroupChild(open Opener) {
	ctx, st, worker, fail := startChild(open, "storetest group child")
	out := bufio.NewWriter(os.Stdout)
	for {
		jobs, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: worker, Limit: 2, Lease: time.Minute})
		if err != nil {
			fail(err)
		}
		if len(jobs) == 0 {
			c, err := st.JobCounts(ctx)
			if err != nil {
				fail(err)
			}
			if c[queue.StateQueued] == 0 {
				break
			}
			time.Sleep(time.Millisecond)
			continue
		}
		time.Sleep(3 * time.Millisecond)
		for _, j := range slices.Backward(jobs) {
			fmt.Fprintln(out, j.ID)
			if _, err := st.AttemptFinish(ctx, &queue.AttemptFinishParams{JobID: j.ID, WorkerID: worker, Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}}); err != nil {
				fail(err)
			}
		}
	}
	out.Flush()
	st.Close()
	os.Exit(0)
}

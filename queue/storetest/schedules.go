package storetest

import (
	"bufio"
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

// exerciseSchedules is the schedule part of the contract. The fake clock
// starts at T0 (2026-01-02 03:04:05 UTC).
func exerciseSchedules(t *testing.T, setup func(t *testing.T) *testBundle) {
	exerciseScheduleProcesses(t, setup)
	sched := func(name, expr string, mod ...func(*jobspec.Spec)) jobspec.Spec {
		s := jobspec.Spec{Name: name, Command: []string{"true"}, Schedule: expr, Labels: map[string]string{"team": "ops"}}
		for _, m := range mod {
			m(&s)
		}
		return s
	}
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		return tm
	}
	// tick runs the scheduler once and returns the decisions made.
	tick := func(t *testing.T, b *testBundle) queue.ScheduleTickResult {
		t.Helper()
		res, err := b.st.ScheduleTick(b.ctx, &queue.ScheduleTickParams{WorkerID: "w"})
		require.NoError(t, err)
		return res
	}
	kinds := func(ds []queue.ScheduleDecision) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Decision)
		}
		return out
	}
	finish := func(t *testing.T, b *testBundle, id string) {
		t.Helper()
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", JobIDs: []string{id}})
		require.NoError(t, err)
		require.Len(t, got, 1)
		_, err = b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: id, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
		require.NoError(t, err)
	}

	t.Run("ScheduleEnqueueMixedBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		jobs, err := b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
			{Name: "once", Command: []string{"true"}},
			sched("nightly", "30 3 * * *", func(s *jobspec.Spec) { s.Timezone = "Europe/Paris" }),
		}, Source: "# mixed", SourcePath: "/jobs/mixed.toml"})
		require.NoError(t, err)
		require.Equal(t, []string{"once"}, names(jobs), "JobEnqueue returns the one-off jobs only")
		s, err := b.st.ScheduleGet(b.ctx, "nightly")
		require.NoError(t, err)
		require.Equal(t, "30 3 * * *", s.Spec.Schedule)
		require.Equal(t, "# mixed", s.Source)
		require.Equal(t, "/jobs/mixed.toml", s.SourcePath)
		require.False(t, s.Paused)
		require.Equal(t, "2026-01-03T03:30:00+01:00", s.NextRun.Format(time.RFC3339))
		require.True(t, s.LastRun.IsZero())
		require.Nil(t, s.LastDecision)

		// Resubmitting updates in place; an unchanged expression keeps the next run.
		b.clock.Advance(time.Hour)
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
			sched("nightly", "30 3 * * *", func(s *jobspec.Spec) { s.Timezone = "Europe/Paris"; s.Command = []string{"echo", "v2"} }),
		}, Source: "# v2"})
		require.NoError(t, err)
		all, err := b.st.ScheduleList(b.ctx, nil)
		require.NoError(t, err)
		require.Len(t, all, 1)
		require.Equal(t, []string{"echo", "v2"}, all[0].Spec.Command)
		require.Equal(t, "# v2", all[0].Source)
		require.Equal(t, "2026-01-03T03:30:00+01:00", all[0].NextRun.Format(time.RFC3339))
		// A new expression restarts from now.
		_, err = b.st.ScheduleUpsert(b.ctx, &queue.ScheduleUpsertParams{Specs: []jobspec.Spec{sched("nightly", "@hourly")}})
		require.NoError(t, err)
		s, err = b.st.ScheduleGet(b.ctx, "nightly")
		require.NoError(t, err)
		require.Equal(t, at("2026-01-02T05:00:00Z"), s.NextRun.UTC())

		// A file with one bad job stores neither its jobs nor its schedules.
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
			sched("weekly", "@weekly"),
			{Name: "bad", Command: []string{"true"}, After: []string{"nothing-by-that-name"}},
		}})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		_, err = b.st.ScheduleGet(b.ctx, "weekly")
		require.ErrorIs(t, err, queue.ErrScheduleNotFound)

		// A schedule needs a name and a valid expression.
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{sched("", "@daily")}})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{sched("x", "61 * * * *")}})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
	})

	t.Run("ScheduleTickExactlyOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.ScheduleUpsert(b.ctx, &queue.ScheduleUpsertParams{Specs: []jobspec.Spec{sched("every-minute", "* * * * *")}})
		require.NoError(t, err)
		res := tick(t, b)
		require.Empty(t, res.Decisions, "nothing due before the first tick")
		require.Equal(t, at("2026-01-02T03:05:00Z"), res.NextDue.UTC())

		b.clock.Advance(56 * time.Second) // 03:05:01
		var wg sync.WaitGroup
		var mu sync.Mutex
		var made []queue.Job
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := b.st.ScheduleTick(b.ctx, &queue.ScheduleTickParams{WorkerID: "w"})
				require.NoError(t, err)
				mu.Lock()
				made = append(made, r.Jobs...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		require.Len(t, made, 1, "one instance per tick, however many schedulers")
		j, err := b.st.JobGet(b.ctx, made[0].ID)
		require.NoError(t, err)
		require.Equal(t, "every-minute-20260102T030500Z", j.Name)
		require.Equal(t, queue.StateQueued, j.State)
		require.Equal(t, map[string]string{"team": "ops", queue.ScheduleLabel: "every-minute", queue.ScheduleTickLabel: "2026-01-02T03:05:00Z"}, j.Spec.Labels)
		require.Empty(t, j.Spec.Schedule)
		require.Equal(t, "every-minute", j.Spec.Env["PADDOCK_SCHEDULE"])
		listed, err := b.st.JobList(b.ctx, &queue.JobListParams{Labels: map[string]string{queue.ScheduleLabel: "every-minute"}})
		require.NoError(t, err)
		require.Len(t, listed, 1)

		s, err := b.st.ScheduleGet(b.ctx, "every-minute")
		require.NoError(t, err)
		require.Equal(t, at("2026-01-02T03:05:00Z"), s.LastRun.UTC())
		require.Equal(t, j.ID, s.LastJobID)
		require.Equal(t, queue.StateQueued, s.LastJobState)
		require.Equal(t, at("2026-01-02T03:06:00Z"), s.NextRun.UTC())
		require.NotNil(t, s.LastDecision)
		require.Equal(t, queue.DecisionFired, s.LastDecision.Decision)
		require.Equal(t, j.ID, s.LastDecision.JobID)
	})

	t.Run("ScheduleOverlap", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.ScheduleUpsert(b.ctx, &queue.ScheduleUpsertParams{Specs: []jobspec.Spec{
			sched("skip", "* * * * *"),
			sched("queue", "* * * * *", func(s *jobspec.Spec) { s.Overlap = jobspec.OverlapQueue }),
			sched("allow", "* * * * *", func(s *jobspec.Spec) { s.Overlap = jobspec.OverlapAllow }),
		}})
		require.NoError(t, err)
		b.clock.Advance(time.Minute) // 03:05:05: the first tick of each
		first := map[string]string{}
		for _, j := range tick(t, b).Jobs {
			first[j.Spec.Labels[queue.ScheduleLabel]] = j.ID
		}
		require.Len(t, first, 3)

		b.clock.Advance(time.Minute) // 03:06:05: every first instance is still queued
		res := tick(t, b)
		got := map[string]string{}
		for _, d := range res.Decisions {
			got[d.Schedule] = d.Decision
		}
		require.Equal(t, map[string]string{"skip": queue.DecisionSkippedOverlap, "queue": queue.DecisionDeferred, "allow": queue.DecisionFired}, got)
		require.Len(t, res.Jobs, 1)

		b.clock.Advance(time.Minute) // 03:07:05: a second waiting tick is not queued
		got = map[string]string{}
		for _, d := range tick(t, b).Decisions {
			got[d.Schedule] = d.Decision
		}
		require.Equal(t, queue.DecisionSkippedOverlap, got["queue"])
		require.Equal(t, queue.DecisionSkippedOverlap, got["skip"])

		// Once the running instance finishes, the waiting tick runs.
		finish(t, b, first["queue"])
		finish(t, b, first["skip"])
		res = tick(t, b)
		require.Equal(t, []string{queue.DecisionFired}, kinds(res.Decisions))
		require.Len(t, res.Jobs, 1)
		require.Equal(t, "queue-20260102T030600Z", res.Jobs[0].Name)

		b.clock.Advance(time.Minute) // 03:08:05
		got = map[string]string{}
		for _, d := range tick(t, b).Decisions {
			got[d.Schedule] = d.Decision
		}
		require.Equal(t, queue.DecisionFired, got["skip"])
		require.Equal(t, queue.DecisionDeferred, got["queue"], "the waiting instance is still queued")

		// Pausing drops the waiting tick, and says so in the log.
		_, err = b.st.SchedulePause(b.ctx, "queue")
		require.NoError(t, err)
		log, err := b.st.ScheduleDecisionList(b.ctx, &queue.ScheduleDecisionListParams{Schedule: "queue", Limit: 100})
		require.NoError(t, err)
		require.NotContains(t, kinds(log), queue.DecisionDeferred)
		s, err := b.st.ScheduleGet(b.ctx, "queue")
		require.NoError(t, err)
		require.Equal(t, queue.DecisionSkippedOverlap, s.LastDecision.Decision)
	})

	t.Run("ScheduleMissedRunOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.ScheduleUpsert(b.ctx, &queue.ScheduleUpsertParams{Specs: []jobspec.Spec{
			sched("hourly", "0 * * * *", func(s *jobspec.Spec) { s.Overlap = jobspec.OverlapAllow; s.MissedGrace = 20 * time.Minute }),
		}})
		require.NoError(t, err)
		b.clock.Advance(3*time.Hour + 5*time.Minute + 55*time.Second) // 06:10:00; ticks 04, 05, 06 passed unseen
		res := tick(t, b)
		require.Equal(t, []string{queue.DecisionMissed, queue.DecisionCaughtUp}, kinds(res.Decisions))
		require.Equal(t, 2, res.Decisions[0].Count)
		require.Equal(t, at("2026-01-02T04:00:00Z"), res.Decisions[0].Tick.UTC())
		require.Len(t, res.Jobs, 1, "one catch-up instance, not a burst")
		require.Equal(t, "hourly-20260102T060000Z", res.Jobs[0].Name)
		require.Empty(t, tick(t, b).Decisions, "decided once")

		b.clock.Advance(2*time.Hour + 30*time.Minute) // 08:40: ticks 07 and 08; the newest is 40m late, beyond the 20m grace
		res = tick(t, b)
		require.Equal(t, []string{queue.DecisionMissed}, kinds(res.Decisions))
		require.Equal(t, 2, res.Decisions[0].Count)
		require.Empty(t, res.Jobs)
		require.Contains(t, res.Decisions[0].Detail, "beyond missed_grace")

		b.clock.Advance(20*time.Minute + 30*time.Second) // 09:00:30: on time again
		res = tick(t, b)
		require.Equal(t, []string{queue.DecisionFired}, kinds(res.Decisions))

		log, err := b.st.ScheduleDecisionList(b.ctx, &queue.ScheduleDecisionListParams{Schedule: "hourly"})
		require.NoError(t, err)
		require.Equal(t, []string{queue.DecisionFired, queue.DecisionMissed, queue.DecisionCaughtUp, queue.DecisionMissed}, kinds(log))
	})

	t.Run("ScheduleMissedSkip", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.ScheduleUpsert(b.ctx, &queue.ScheduleUpsertParams{Specs: []jobspec.Spec{
			sched("hourly", "0 * * * *", func(s *jobspec.Spec) { s.Missed = jobspec.MissedSkip }),
		}})
		require.NoError(t, err)
		b.clock.Advance(2*time.Hour + 56*time.Minute) // 06:00:05: 04 and 05 missed, 06 on time
		res := tick(t, b)
		require.Equal(t, []string{queue.DecisionMissed, queue.DecisionFired}, kinds(res.Decisions))
		require.Len(t, res.Jobs, 1)
		finish(t, b, res.Jobs[0].ID)
		b.clock.Advance(90 * time.Minute) // 07:30:05: 07 is half an hour late
		res = tick(t, b)
		require.Equal(t, []string{queue.DecisionMissed}, kinds(res.Decisions))
		require.Empty(t, res.Jobs)
	})

	t.Run("SchedulePauseResumeDelete", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.ScheduleUpsert(b.ctx, &queue.ScheduleUpsertParams{Specs: []jobspec.Spec{sched("m", "* * * * *"), sched("h", "@hourly")}})
		require.NoError(t, err)
		s, err := b.st.SchedulePause(b.ctx, "m")
		require.NoError(t, err)
		require.True(t, s.Paused)
		require.True(t, s.NextRun.IsZero())
		_, err = b.st.SchedulePause(b.ctx, "m")
		require.NoError(t, err, "pausing twice is a no-op")
		b.clock.Advance(10 * time.Minute)
		res := tick(t, b)
		require.Empty(t, res.Decisions, "a paused schedule decides nothing")
		require.Equal(t, at("2026-01-02T04:00:00Z"), res.NextDue.UTC(), "the earliest schedule that is not paused")

		s, err = b.st.ScheduleResume(b.ctx, "m")
		require.NoError(t, err)
		require.False(t, s.Paused)
		require.Equal(t, at("2026-01-02T03:15:00Z"), s.NextRun.UTC(), "resumes from now: the paused ticks are not caught up")
		require.Empty(t, tick(t, b).Decisions)

		b.clock.Advance(time.Minute)
		res = tick(t, b)
		require.Len(t, res.Jobs, 1)
		require.NoError(t, b.st.ScheduleDelete(b.ctx, "m"))
		_, err = b.st.ScheduleGet(b.ctx, "m")
		require.ErrorIs(t, err, queue.ErrScheduleNotFound)
		require.ErrorIs(t, b.st.ScheduleDelete(b.ctx, "m"), queue.ErrScheduleNotFound)
		_, err = b.st.SchedulePause(b.ctx, "nope")
		require.ErrorIs(t, err, queue.ErrScheduleNotFound)
		_, err = b.st.JobGet(b.ctx, res.Jobs[0].ID)
		require.NoError(t, err, "instances outlive their schedule")
		left, err := b.st.ScheduleList(b.ctx, &queue.ScheduleListParams{NameGlob: "*"})
		require.NoError(t, err)
		require.Len(t, left, 1)
		require.Equal(t, "h", left[0].Name)
	})

	t.Run("ScheduleRunNow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.ScheduleUpsert(b.ctx, &queue.ScheduleUpsertParams{Specs: []jobspec.Spec{
			sched("nightly", "30 3 * * *", func(s *jobspec.Spec) { s.Jitter = time.Hour }),
			sched("many", "30 3 * * *", func(s *jobspec.Spec) { s.Overlap = jobspec.OverlapAllow }),
		}})
		require.NoError(t, err)
		_, err = b.st.SchedulePause(b.ctx, "nightly")
		require.NoError(t, err)
		res, err := b.st.ScheduleRun(b.ctx, &queue.ScheduleRunParams{Name: "nightly", WorkerID: "cli"})
		require.NoError(t, err, "a paused schedule runs on request")
		require.NotNil(t, res.Job)
		require.Equal(t, queue.DecisionManual, res.Decision.Decision)
		require.Equal(t, res.Job.ID, res.Decision.JobID)
		require.Equal(t, "cli", res.Decision.WorkerID)
		require.Equal(t, "nightly-20260102T030405Z", res.Job.Name, "its tick is now, to the second")
		require.True(t, res.Job.NotBefore.IsZero(), "now means now: no jitter")
		require.Equal(t, "nightly", res.Job.Spec.Labels[queue.ScheduleLabel])
		b.requireStored(t, *res.Job)
		s, err := b.st.ScheduleGet(b.ctx, "nightly")
		require.NoError(t, err)
		require.Equal(t, queue.DecisionManual, s.LastDecision.Decision)
		require.Equal(t, res.Job.ID, s.LastJobID)

		// overlap = skip: refused while that instance is queued, even
		// within the same second.
		b.clock.Advance(time.Millisecond)
		res, err = b.st.ScheduleRun(b.ctx, &queue.ScheduleRunParams{Name: "nightly"})
		require.NoError(t, err)
		require.Nil(t, res.Job)
		require.Equal(t, queue.DecisionSkippedOverlap, res.Decision.Decision)
		require.Equal(t, "manual", res.Decision.WorkerID)
		require.True(t, res.Decision.Tick.Equal(b.clock.Now()), "recorded at the exact time")
		b.clock.Advance(time.Second)
		ds, err := b.st.ScheduleDecisionList(b.ctx, &queue.ScheduleDecisionListParams{Schedule: "nightly"})
		require.NoError(t, err)
		require.Equal(t, []string{queue.DecisionSkippedOverlap, queue.DecisionManual}, kinds(ds))

		// overlap = allow: one per second; the same second again is the same name.
		for range 2 {
			res, err = b.st.ScheduleRun(b.ctx, &queue.ScheduleRunParams{Name: "many"})
			require.NoError(t, err)
			require.NotNil(t, res.Job)
			b.clock.Advance(time.Second)
		}
		b.clock.Advance(-time.Second)
		_, err = b.st.ScheduleRun(b.ctx, &queue.ScheduleRunParams{Name: "many"})
		require.ErrorIs(t, err, queue.ErrNameInUse)
		_, err = b.st.ScheduleRun(b.ctx, &queue.ScheduleRunParams{Name: "ghost"})
		require.ErrorIs(t, err, queue.ErrScheduleNotFound)
		s, err = b.st.ScheduleGet(b.ctx, "many")
		require.NoError(t, err)
		require.Equal(t, at("2026-01-02T03:30:00Z"), s.NextRun.UTC(), "a manual run leaves the next tick alone")
	})

	t.Run("ScheduleJitter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.ScheduleUpsert(b.ctx, &queue.ScheduleUpsertParams{Specs: []jobspec.Spec{
			sched("spread", "5 * * * *", func(s *jobspec.Spec) { s.Jitter = 30 * time.Minute }),
		}})
		require.NoError(t, err)
		b.clock.Advance(time.Minute) // 03:05:05
		res := tick(t, b)
		require.Len(t, res.Jobs, 1)
		tk := at("2026-01-02T03:05:00Z")
		d := queue.TickJitter("spread", tk, 30*time.Minute)
		require.True(t, res.Jobs[0].NotBefore.Equal(tk.Add(d)), "due at tick + TickJitter: %s", res.Jobs[0].NotBefore)
		require.Equal(t, []string{queue.DecisionFired}, kinds(res.Decisions), "judged on time by its tick, not its due time")
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w"})
		require.NoError(t, err)
		require.Equal(t, d == 0, len(got) == 1, "claimable only once due")
	})
}

// tickChildFor is how long each child process runs the scheduler.
const tickChildFor = 2500 * time.Millisecond

// runTickChild runs the scheduler in a loop, on the real clock, for
// tickChildFor, printing the name of every instance it enqueued; then exits.
func runTickChild(open Opener) {
	ctx, st, worker, fail := startChild(open, "storetest tick child")
	out := bufio.NewWriter(os.Stdout)
	for end := time.Now().Add(tickChildFor); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		res, err := st.ScheduleTick(ctx, &queue.ScheduleTickParams{WorkerID: worker})
		if err != nil {
			fail(err)
		}
		for _, j := range res.Jobs {
			fmt.Fprintln(out, j.Name)
		}
	}
	out.Flush()
	st.Close()
	os.Exit(0)
}

// exerciseScheduleProcesses: schedulers in several processes on one store
// make one instance per tick.
func exerciseScheduleProcesses(t *testing.T, setup func(t *testing.T) *testBundle) {
	t.Run("ScheduleTickProcesses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.ScheduleUpsert(b.ctx, &queue.ScheduleUpsertParams{Specs: []jobspec.Spec{
			{Name: "every-second", Command: []string{"true"}, Schedule: "@every 1s", Overlap: jobspec.OverlapAllow},
		}})
		require.NoError(t, err)
		exe, err := os.Executable()
		require.NoError(t, err)
		const nProcs = 4
		outs := make([]string, nProcs)
		errs := make([]error, nProcs)
		var wg sync.WaitGroup
		for i := range nProcs {
			cmd := childCommand(exe)
			cmd.Env = append(os.Environ(), envChild+"=tick", envLoc+"="+b.loc, envWorker+"=proc"+strconv.Itoa(i))
			var stderr strings.Builder
			cmd.Stderr = &stderr
			wg.Go(func() {
				out, err := cmd.Output()
				if err != nil {
					err = fmt.Errorf("%w: %s", err, stderr.String())
				}
				outs[i], errs[i] = string(out), err
			})
		}
		time.Sleep(50 * time.Millisecond)
		require.NoError(t, os.WriteFile(filepath.Join(b.loc, "go"), nil, 0o644))
		wg.Wait()
		seen := map[string]int{}
		for i := range nProcs {
			require.NoError(t, errs[i], "child %d", i)
			for _, name := range strings.Fields(outs[i]) {
				prev, dup := seen[name]
				require.False(t, dup, "instance %s made by proc%d and proc%d", name, i, prev)
				seen[name] = i
			}
		}
		require.GreaterOrEqual(t, len(seen), 2, "the children made instances (is storetest.RunChild called from TestMain?)")
		jobs, err := b.st.JobList(b.ctx, &queue.JobListParams{Labels: map[string]string{queue.ScheduleLabel: "every-second"}})
		require.NoError(t, err)
		require.Len(t, jobs, len(seen))
	})
}

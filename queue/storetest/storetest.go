// Package storetest is the contract suite every queue.Store must pass.
//
// A store's test calls Exercise once, and its TestMain calls RunChild first
// (the suite re-executes the test binary to claim from several processes
// at once):
//
//	func TestMain(m *testing.M) {
//		storetest.RunChild(openMyStore)
//		os.Exit(m.Run())
//	}
//
//	func TestMyStore(t *testing.T) {
//		t.Parallel()
//		storetest.Exercise(t, openMyStore)
//	}
//
// Every Store method is required today. When a feature becomes optional,
// a store will return queue.ErrNotImplemented from it and the suite will
// skip that subtest (and only on that error).
//
// The suite uses a fake clock ([Clock]) and a fixed jitter sample (0.5), so
// no subtest sleeps through a lease or a backoff; the multi-process subtests
// (claims, and schedulers, which run for 2.5 s) use the real clock in their
// children.
package storetest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
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

// Options are what the suite injects into a store.
type Options struct {
	Clock func() time.Time // never nil
	Rand  func() float64   // never nil
}

// Opener opens the store at loc, a fresh empty directory owned by one test.
// Opening the same loc again, from this process or another, must open the
// same store.
type Opener func(ctx context.Context, loc string, o Options) (queue.Store, error)

// Clock is a fake clock safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

const (
	envChild  = "PADDOCK_STORETEST_CHILD"
	envLoc    = "PADDOCK_STORETEST_LOC"
	envWorker = "PADDOCK_STORETEST_WORKER"
)

// RunChild runs the work of a child process started by Exercise and exits;
// in any other process it returns at once. Call it first in TestMain.
func RunChild(open Opener) {
	if os.Getenv(envChild) == "tick" {
		runTickChild(open) // schedules.go
	}
	if os.Getenv(envChild) != "claim" {
		return
	}
	ctx, st, worker, fail := startChild(open, "storetest child")
	out := bufio.NewWriter(os.Stdout)
	for {
		jobs, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: worker, Limit: 1 + rand.IntN(3), Lease: time.Minute})
		if err != nil {
			fail(err)
		}
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
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

// T0 is the fake clock's starting time.
var T0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

type testBundle struct {
	ctx   context.Context
	st    queue.Store
	clock *Clock
	loc   string
	rnd   float64
}

// Exercise runs the contract suite against stores made by open.
func Exercise(t *testing.T, open Opener) {
	t.Helper()
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{ctx: context.Background(), clock: NewClock(T0), loc: t.TempDir(), rnd: 0.5}
		st, err := open(b.ctx, b.loc, Options{Clock: b.clock.Now, Rand: func() float64 { return b.rnd }})
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		b.st = st
		return b
	}

	t.Run("EnqueueGet", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		src := "[[job]]\nname = \"a\"\ncommand = \"echo a\"\n[[job]]\ncommand = [\"true\"]\n"
		specs, err := jobspec.Parse("jobs.toml", []byte(src), "/srv")
		require.NoError(t, err)
		jobs, err := b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: specs, Source: src, SourcePath: "/srv/jobs.toml"})
		require.NoError(t, err)
		require.Len(t, jobs, 2)
		require.Less(t, jobs[0].ID, jobs[1].ID, "ids sort by creation")
		for _, ref := range []string{jobs[0].ID, "a"} {
			j, err := b.st.JobGet(b.ctx, ref)
			require.NoError(t, err)
			require.Equal(t, jobs[0].ID, j.ID)
			require.Equal(t, queue.StateQueued, j.State)
			require.Equal(t, src, j.Source)
			require.Equal(t, "/srv/jobs.toml", j.SourcePath)
			require.Equal(t, specs[0], j.Spec)
			require.Equal(t, T0, j.CreatedAt)
			require.Equal(t, 1, j.MaxAttempts)
		}
		j, err := b.st.JobGet(b.ctx, jobs[1].ID)
		require.NoError(t, err)
		require.Equal(t, "", j.Name)
		_, err = b.st.JobGet(b.ctx, "nope")
		require.ErrorIs(t, err, queue.ErrNotFound)
		_, err = b.st.JobGet(b.ctx, "")
		require.ErrorIs(t, err, queue.ErrNotFound)
	})

	t.Run("NameRules", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first := b.enqueue(t, jobspec.Spec{Name: "n", Command: []string{"true"}})[0]
		_, err := b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "n", Command: []string{"true"}}}})
		require.ErrorIs(t, err, queue.ErrNameInUse)
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		var verr *jobspec.ValidationError
		require.ErrorAs(t, err, &verr)
		require.Len(t, verr.Errors, 1)
		require.Equal(t, `job "n"`, verr.Errors[0].Job)
		require.ErrorContains(t, err, first.ID)
		require.ErrorContains(t, err, "the name is free again once that job is final")
		require.Equal(t, 1, strings.Count(err.Error(), "queue:")+strings.Count(err.Error(), "jobspec:"), "a package prefix, said once: %v", err)
		b.runOnce(t, "w", queue.OutcomeSucceeded)
		b.clock.Advance(time.Second)
		second := b.enqueue(t, jobspec.Spec{Name: "n", Command: []string{"true"}})[0]
		j, err := b.st.JobGet(b.ctx, "n")
		require.NoError(t, err)
		require.Equal(t, second.ID, j.ID, "a name resolves to the newest job")
		j, err = b.st.JobGet(b.ctx, first.ID)
		require.NoError(t, err)
		require.Equal(t, queue.StateSucceeded, j.State)
	})

	// Retrying a job whose name a newer job holds is refused in enqueue's
	// words: the holder's state and id, and when the name is free again
	// (it once said only "is held by job ID").
	t.Run("RetryNameInUse", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := b.enqueue(t, jobspec.Spec{Name: "n", Command: []string{"true"}})[0]
		_, err := b.st.JobCancel(b.ctx, old.ID)
		require.NoError(t, err)
		holder := b.enqueue(t, jobspec.Spec{Name: "n", Command: []string{"true"}})[0]
		held := func(state string) string {
			return `"n" is held by ` + state + ` job ` + holder.ID + `; the name is free again once that job is final (wait for it, or cancel it)`
		}
		_, err = b.st.JobRetry(b.ctx, old.ID)
		require.ErrorIs(t, err, queue.ErrNameInUse)
		require.EqualError(t, err, "queue: "+held("queued"))
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "n", Command: []string{"true"}}}})
		require.ErrorContains(t, err, held("queued"), "enqueue says it in the same words")
		got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w"})
		require.NoError(t, err)
		require.Len(t, got, 1)
		_, err = b.st.JobRetry(b.ctx, old.ID)
		require.ErrorIs(t, err, queue.ErrNameInUse)
		require.EqualError(t, err, "queue: "+held("running"))
		_, err = b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: holder.ID, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
		require.NoError(t, err)
		j, err := b.st.JobRetry(b.ctx, old.ID)
		require.NoError(t, err, "the name is free once its holder is final")
		require.Equal(t, queue.StateQueued, j.State)
	})

	t.Run("BatchRefusedWhole", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
			{Name: "ok", Command: []string{"true"}},
			{Name: "bad", Command: []string{"true"}, After: []string{"ghost"}},
			{Name: "worse", Command: []string{"true"}, Mode: "yolo"},
		}})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		var verr *jobspec.ValidationError
		require.ErrorAs(t, err, &verr)
		require.Len(t, verr.Errors, 1, "spec errors are reported before store lookups")
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
			{Name: "ok", Command: []string{"true"}},
			{Name: "bad", Command: []string{"true"}, After: []string{"ghost"}},
			{Name: "bad2", Command: []string{"true"}, After: []string{"ok", "phantom"}},
		}})
		require.ErrorAs(t, err, &verr)
		require.Len(t, verr.Errors, 2)
		require.ErrorContains(t, err, "ghost")
		require.ErrorContains(t, err, "phantom")
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
			{Name: "p", Command: []string{"true"}, After: []string{"q"}},
			{Name: "q", Command: []string{"true"}, After: []string{"p"}},
		}})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		require.ErrorContains(t, err, "dependency cycle")
		counts, err := b.st.JobCounts(b.ctx)
		require.NoError(t, err)
		for _, st := range queue.JobStates() {
			require.Zero(t, counts[st], st)
		}
		_, err = b.st.JobGet(b.ctx, "ok")
		require.ErrorIs(t, err, queue.ErrNotFound)
	})

	t.Run("EnqueueAllWholeOrNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		one := &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "one", Command: []string{"true"}}}, SourcePath: "/srv/one.toml"}
		for _, bad := range []*queue.JobEnqueueParams{
			{Specs: []jobspec.Spec{{Name: "one", Command: []string{"true"}, Line: 4}}, SourcePath: "/srv/dup.toml"},
			{Specs: []jobspec.Spec{{Name: "two", Command: []string{"true"}, After: []string{"ghost"}}}, SourcePath: "/srv/ghost.toml"},
			{Specs: []jobspec.Spec{{Name: "two", Command: []string{"true"}, Mode: "yolo"}}, SourcePath: "/srv/mode.toml"},
		} {
			_, err := b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{one, bad})
			require.ErrorIs(t, err, jobspec.ErrInvalid, bad.SourcePath)
			require.ErrorContains(t, err, bad.SourcePath)
			_, err = b.st.JobGet(b.ctx, "one")
			require.ErrorIs(t, err, queue.ErrNotFound, "the first batch of %s was stored", bad.SourcePath)
		}
		_, err := b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{one, {Specs: []jobspec.Spec{{Name: "one", Command: []string{"true"}, Line: 4}}, SourcePath: "/srv/dup.toml"}})
		require.ErrorContains(t, err, `/srv/dup.toml:4: job "one": name: duplicate name "one": a job or schedule of /srv/one.toml has it too`)
		// SourceName, when set, names the batch in messages instead of
		// SourcePath, whichever check finds the problem.
		for _, second := range []jobspec.Spec{
			{Name: "one", Command: []string{"true"}, Line: 4},
			{Name: "two", Command: []string{"true"}, After: []string{"ghost"}, Line: 4},
			{Name: "two", Command: []string{"true"}, Mode: "yolo", Line: 4},
			{Name: "two", Command: []string{"true"}, Schedule: "@daily", Mode: "yolo", Line: 4},
		} {
			_, err = b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{
				{Specs: one.Specs, SourcePath: "/srv/one.toml", SourceName: "one.toml"},
				{Specs: []jobspec.Spec{second}, SourcePath: "/srv/dup.toml", SourceName: "./dup.toml"}})
			require.ErrorIs(t, err, jobspec.ErrInvalid)
			require.ErrorContains(t, err, `./dup.toml:4: job "`+second.Name+`": `)
			require.NotContains(t, err.Error(), "/srv/", "SourcePath in a message")
		}
		require.ErrorContains(t, err, `./dup.toml:4: job "two": mode:`)
		_, err = b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{
			{Specs: one.Specs, SourcePath: "/srv/one.toml", SourceName: "one.toml"},
			{Specs: []jobspec.Spec{{Name: "one", Command: []string{"true"}, Line: 4}}, SourcePath: "/srv/dup.toml", SourceName: "./dup.toml"}})
		require.ErrorContains(t, err, `./dup.toml:4: job "one": name: duplicate name "one": a job or schedule of one.toml has it too`)
		_, err = b.st.JobEnqueueAll(b.ctx, nil)
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		// A schedule given twice: the second would replace the first.
		hourly := &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "s", Command: []string{"true"}, Schedule: "@hourly", Line: 2}}, SourcePath: "/srv/s1.toml"}
		daily := &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "s", Command: []string{"false"}, Schedule: "@daily", Line: 3}}, SourcePath: "/srv/s2.toml"}
		_, err = b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{hourly, daily})
		require.ErrorContains(t, err, `/srv/s2.toml:3: job "s": name: duplicate name "s": a job or schedule of /srv/s1.toml:2 has it too`)
		// A job and a schedule of the same name, in two batches, as in one.
		_, err = b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{one, {Specs: []jobspec.Spec{{Name: "one", Command: []string{"true"}, Schedule: "@daily"}}}})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		require.ErrorContains(t, err, `duplicate name "one"`)
		scheds, err := b.st.ScheduleList(b.ctx, &queue.ScheduleListParams{})
		require.NoError(t, err)
		require.Empty(t, scheds)

		// An earlier batch's after naming a job of a later one says so.
		_, err = b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{
			{Specs: []jobspec.Spec{{Name: "two", Command: []string{"true"}, After: []string{"one"}, Line: 1}}, SourcePath: "/srv/two.toml"}, one})
		require.ErrorIs(t, err, jobspec.ErrInvalid)
		require.ErrorContains(t, err, `/srv/two.toml:1: job "two": after: "one" is a job of /srv/one.toml, which comes later in this submission: list it first`)
		_, err = b.st.JobGet(b.ctx, "one")
		require.ErrorIs(t, err, queue.ErrNotFound)

		// A later batch's after names a job of an earlier one; a schedule
		// may share a name with nothing here but is not a job.
		got, err := b.st.JobEnqueueAll(b.ctx, []*queue.JobEnqueueParams{one,
			{Specs: []jobspec.Spec{{Name: "two", Command: []string{"true"}, After: []string{"one"}}}}})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Len(t, got[0], 1)
		require.Len(t, got[1], 1)
		require.Equal(t, []string{got[0][0].ID}, got[1][0].DependsOn)
		require.Equal(t, 1, got[1][0].DepsPending)
		j, err := b.st.JobGet(b.ctx, "two")
		require.NoError(t, err)
		require.Equal(t, []string{got[0][0].ID}, j.DependsOn)
	})

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
			cmd := exec.Command(exe, "-test.run=^$")
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
	exerciseSchedules(t, setup)
}

func names(jobs []queue.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.Name
	}
	return out
}

func (b *testBundle) enqueue(t *testing.T, specs ...jobspec.Spec) []queue.Job {
	t.Helper()
	jobs, err := b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: specs, Source: "# test"})
	require.NoError(t, err)
	return jobs
}

// claimFinish claims exactly the job named name and finishes it with a.
func (b *testBundle) claimFinish(t *testing.T, name string, a queue.Attempt) queue.Job {
	t.Helper()
	got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []string{name}, names(got))
	j, err := b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: got[0].ID, WorkerID: "w", Attempt: a})
	require.NoError(t, err)
	b.requireStored(t, j)
	return j
}

// requireStored checks that a job returned by a write is the job the store
// now holds (Source aside: only JobGet fills it).
func (b *testBundle) requireStored(t *testing.T, j queue.Job) {
	t.Helper()
	stored, err := b.st.JobGet(b.ctx, j.ID)
	require.NoError(t, err)
	stored.Source = j.Source
	require.Equal(t, stored, j)
}

// runOnce claims one job and finishes it with outcome.
func (b *testBundle) runOnce(t *testing.T, worker, outcome string) queue.Job {
	t.Helper()
	got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: worker})
	require.NoError(t, err)
	require.Len(t, got, 1)
	j, err := b.st.AttemptFinish(b.ctx, &queue.AttemptFinishParams{JobID: got[0].ID, WorkerID: worker, Attempt: queue.Attempt{Outcome: outcome}})
	require.NoError(t, err)
	b.requireStored(t, j)
	return j
}

func (b *testBundle) requireNoClaim(t *testing.T) {
	t.Helper()
	got, err := b.st.JobClaim(b.ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 10})
	require.NoError(t, err)
	require.Empty(t, got)
}

// startChild is the common start of a child process of the multi-process
// tests: open the store named by the environment on the real clock, then
// wait for the parent's "go" file so that every child starts together.
// fail reports err on stderr and exits 2.
func startChild(open Opener, who string) (ctx context.Context, st queue.Store, worker string, fail func(error)) {
	loc := os.Getenv(envLoc)
	worker = os.Getenv(envWorker)
	ctx = context.Background()
	fail = func(err error) {
		fmt.Fprintln(os.Stderr, who+":", err)
		os.Exit(2)
	}
	st, err := open(ctx, loc, Options{Clock: time.Now, Rand: rand.Float64})
	if err != nil {
		fail(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(filepath.Join(loc, "go")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("no go signal"))
		}
	}
	return ctx, st, worker, fail
}

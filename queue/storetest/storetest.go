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
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
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

// childLifetime bounds a child process's whole run.
const childLifetime = 2 * time.Minute

// childCommand returns the command that runs this test binary as a child
// (RunChild): it dies with the test process that started it
// (PR_SET_PDEATHSIG), so a killed or timed-out test leaves none behind.
func childCommand(exe string) *exec.Cmd {
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// RunChild runs the work of a child process started by Exercise and exits;
// in any other process it returns at once. Call it first in TestMain.
func RunChild(open Opener) {
	if os.Getenv(envChild) == "tick" {
		runTickChild(open) // schedules.go
	}
	if os.Getenv(envChild) == "group" {
		runGroupChild(open) // groups.go
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

	exerciseEnqueue(t, setup)
	exerciseClaim(t, setup)
	exerciseDeps(t, setup)
	exerciseLeases(t, setup)
	exerciseList(t, setup)
	exerciseSchedules(t, setup)
	exercisePolicy(t, setup)
	exerciseGroups(t, setup)
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
	// A child whose loop can no longer end (a job left queued that no
	// claim takes) must not outlive its test.
	time.AfterFunc(childLifetime, func() { fail(fmt.Errorf("still running after %v", childLifetime)) })
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

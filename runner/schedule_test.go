package runner

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"
	_ "time/tzdata" // America/New_York even without /usr/share/zoneinfo

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/sqlite"
	"paddock/queue/storetest"
)

type scheduleBundle struct {
	ctx   context.Context
	st    *sqlite.Store
	clock *storetest.Clock
	w     *Worker
}

func setupSchedule(t *testing.T) *scheduleBundle {
	t.Helper()
	b := &scheduleBundle{ctx: context.Background(), clock: storetest.NewClock(time.Date(2026, 3, 8, 6, 59, 30, 0, time.UTC))}
	st, err := sqlite.Open(b.ctx, filepath.Join(t.TempDir(), "q.db"), sqlite.Options{Clock: b.clock.Now})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	b.st = st
	b.w = NewWorker(WorkerOptions{Store: st, Executor: &Executor{}, Concurrency: 1, ID: "w1"})
	return b
}

// TestScheduleWorkerPass drives the worker's scheduler pass with an
// injected store clock across the 2026 New York spring-forward gap: the
// 02:30 tick that does not exist runs once, at 03:00 EDT.
func TestScheduleWorkerPass(t *testing.T) {
	t.Parallel()
	b := setupSchedule(t)
	_, err := b.st.ScheduleUpsert(b.ctx, &queue.ScheduleUpsertParams{Specs: []jobspec.Spec{
		{Name: "nightly", Command: []string{"true"}, Schedule: "30 2 * * *", Timezone: "America/New_York"},
	}})
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	next := b.w.tickSchedules(b.ctx, log)
	require.Equal(t, "2026-03-08T03:00:00-04:00", next.In(mustLoc(t, "America/New_York")).Format(time.RFC3339))

	b.clock.Advance(31 * time.Second) // 07:00:01Z = 03:00:01 EDT
	second := NewWorker(WorkerOptions{Store: b.st, Executor: &Executor{}, Concurrency: 1, ID: "w2"})
	next = b.w.tickSchedules(b.ctx, log)
	_ = second.tickSchedules(b.ctx, log) // a second worker on the same store adds nothing
	jobs, err := b.st.JobList(b.ctx, &queue.JobListParams{Labels: map[string]string{queue.ScheduleLabel: "nightly"}})
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, "nightly-20260308T070000Z", jobs[0].Name)
	require.Equal(t, "2026-03-09T02:30:00-04:00", next.In(mustLoc(t, "America/New_York")).Format(time.RFC3339))
}

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

func TestScheduleTimer(t *testing.T) {
	t.Parallel()
	require.Nil(t, scheduleTimer(time.Time{}), "no schedule: the poll covers it")
	require.Nil(t, scheduleTimer(time.Now().Add(time.Hour)), "far off: the poll covers it")
	start := time.Now()
	<-scheduleTimer(start.Add(50 * time.Millisecond))
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "sleeps until the next run, not less")
	start = time.Now()
	<-scheduleTimer(start.Add(-time.Hour))
	require.GreaterOrEqual(t, time.Since(start), scheduleMinSleep, "an overdue run never spins")
}

package runner

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"paddock/queue"
)

// Schedules: every worker runs the scheduler. At least once a second, and
// at the earliest schedule's next run, its loop calls Store.ScheduleTick,
// which decides every due tick in one store transaction: the store, not
// the worker, makes each (schedule, tick) exactly once, so any number of
// workers may share a store. The instances are ordinary queued jobs that
// the same pass then claims.

// scheduleMinSleep keeps a worker from spinning when the store reports a
// next run that is already due (a store clock ahead of the worker's).
const scheduleMinSleep = 10 * time.Millisecond

// tickSchedules runs one scheduler pass and returns when the next is due
// (zero: no schedule is active, or the pass failed). Failures are logged:
// a store error must not stop the worker from running jobs.
func (w *Worker) tickSchedules(ctx context.Context, log *slog.Logger) time.Time {
	res, err := w.o.Store.ScheduleTick(ctx, &queue.ScheduleTickParams{WorkerID: w.o.ID})
	switch {
	case errors.Is(err, queue.ErrNotImplemented):
		return time.Time{}
	case err != nil:
		if ctx.Err() == nil {
			logStoreErr(log, "schedules", err)
		}
		return time.Time{}
	}
	for _, d := range res.Decisions {
		level := slog.LevelInfo
		if d.Decision == queue.DecisionMissed || d.Decision == queue.DecisionSkippedOverlap {
			level = slog.LevelWarn
		}
		log.Log(ctx, level, "schedule", "schedule", d.Schedule, "tick", d.Tick.Format(time.RFC3339), "decision", d.Decision,
			"job", d.JobID, "detail", d.Detail)
	}
	return res.NextDue
}

// scheduleTimer returns a channel that fires at next when that is sooner
// than the worker's poll interval, else nil (the poll covers it).
func scheduleTimer(next time.Time) <-chan time.Time {
	if next.IsZero() {
		return nil
	}
	d := time.Until(next)
	if d >= pollInterval {
		return nil
	}
	return time.After(max(d+time.Millisecond, scheduleMinSleep))
}

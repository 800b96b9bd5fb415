package runner

import (
	"errors"
	"log/slog"
	"time"

	"paddock/queue"
)

// Store outages: a store with a server (queue.OutageReporter: PostgreSQL)
// retries each call with backoff while the server cannot be reached (a
// restart, a fail-over), for up to its retry time, and then fails it with
// queue.ErrUnreachable; the worker's loop then calls again, so a worker
// never gives up on its own, and its running jobs keep running. The
// worker says once when the store becomes unreachable and once when it
// is back, counts each retried try in paddock_store_errors_total
// {op="retried"}, and does not log the calls that failed meanwhile with
// queue.ErrUnreachable one by one.

// watchOutages returns the worker's watcher of the store's outages.
func (w *Worker) watchOutages(log *slog.Logger) func(queue.OutageEvent) {
	return func(ev queue.OutageEvent) {
		switch ev.Kind {
		case queue.OutageStarted:
			log.Warn("store unreachable: retrying until it is back; running jobs keep running",
				"since", ev.Since.Format(time.RFC3339), "err", ev.Err,
				"retry_per_call", ev.RetryFor.String(), "then", "the call fails and the worker calls again")
		case queue.OutageRetry:
			w.o.Metrics.storeError("retried")
		case queue.OutageEnded:
			log.Info("store reachable again", "down_for", time.Since(ev.Since).Round(time.Millisecond).String(), "retried_tries", ev.Retries)
		}
	}
}

// logStoreErr logs the failure of a store call, unless the store's
// server could not be reached: watchOutages says that once.
func logStoreErr(log *slog.Logger, msg string, err error) {
	if errors.Is(err, queue.ErrUnreachable) {
		return
	}
	log.Error(msg, "err", err)
}

package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/queue"
)

// The next state after an attempt, for every branch of the rule: drivers
// only execute it, so it is tested here once, without a store.
func TestAttemptEnded(t *testing.T) {
	t.Parallel()
	job := func(n, max int, cancel bool) queue.Job {
		return queue.Job{AttemptCount: n, MaxAttempts: max, CancelRequested: cancel}
	}
	tests := []struct {
		name    string
		j       queue.Job
		outcome string
		want    queue.Transition
	}{
		{"succeeded", job(1, 1, false), queue.OutcomeSucceeded, queue.Transition{State: queue.StateSucceeded, Reason: "why"}},
		{"succeeded despite a cancel", job(1, 1, true), queue.OutcomeSucceeded, queue.Transition{State: queue.StateSucceeded, Reason: "why"}},
		{"canceled", job(2, 3, false), queue.OutcomeCanceled, queue.Transition{State: queue.StateCanceled, Reason: "canceled (attempt 2: why)"}},
		{"failed after a cancel", job(1, 3, true), queue.OutcomeFailed, queue.Transition{State: queue.StateCanceled, Reason: "canceled (attempt 1: why)"}},
		{"denied", job(1, 3, false), queue.OutcomeDenied, queue.Transition{State: queue.StateDenied, Reason: "why"}},
		{"retried", job(1, 3, false), queue.OutcomeTimeout, queue.Transition{State: queue.StateQueued, Delay: 750 * time.Millisecond,
			Reason: "attempt 1 of 3 timeout: why; retrying after 750ms"}},
		{"spent", job(3, 3, false), queue.OutcomeRunnerFailed, queue.Transition{State: queue.StateFailed, Reason: "attempt 3 of 3 runner_failed: why"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, queue.AttemptEnded(tt.j, tt.outcome, "why", 0.5))
		})
	}
	require.Equal(t, "attempt 1 of 1 failed: failed", queue.AttemptEnded(job(1, 1, false), queue.OutcomeFailed, "", 0).Reason,
		"an attempt without a reason is worded by its outcome")
}

func TestAttemptInterrupted(t *testing.T) {
	t.Parallel()
	last := queue.Job{AttemptCount: 2, MaxAttempts: 2}
	require.Equal(t, queue.Transition{State: queue.StateFailed, Reason: "attempt 2 of 2 interrupted: gone"}, queue.AttemptInterrupted(last, "gone", true))
	require.Equal(t, queue.Transition{State: queue.StateQueued, RaiseMaxAttempts: true,
		Reason: "attempt 2 interrupted: gone; queued again (a worker's stop does not count against retries)"}, queue.AttemptInterrupted(last, "gone", false))
	require.Equal(t, queue.Transition{State: queue.StateQueued, Reason: "attempt 1 of 2 interrupted: gone; queued again"},
		queue.AttemptInterrupted(queue.Job{AttemptCount: 1, MaxAttempts: 2}, "gone", true))
	last.CancelRequested = true
	require.Equal(t, queue.StateCanceled, queue.AttemptInterrupted(last, "gone", false).State)
}

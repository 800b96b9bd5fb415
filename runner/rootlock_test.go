package runner

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLockProtect: shared holders go together, an exclusive one waits
// for them to be released, and a wait ends when the attempt is canceled,
// its timeout passes or the worker stops.
func TestLockProtect(t *testing.T) {
	t.Parallel()
	state := StateDir{Root: t.TempDir()}
	ctx := context.Background()

	s1, err := lockProtect(ctx, nil, time.Time{}, state, false)
	require.NoError(t, err)
	s2, err := lockProtect(ctx, nil, time.Time{}, state, false)
	require.NoError(t, err, "shared holders go together")

	got := make(chan error, 1)
	exclusive := func(ctx context.Context, cancel <-chan struct{}, deadline time.Time) {
		l, err := lockProtect(ctx, cancel, deadline, state, true)
		require.Equal(t, err == nil, l.exclusiveHeld())
		l.release()
		got <- err
	}
	cancel := make(chan struct{})
	go exclusive(ctx, cancel, time.Time{})
	select {
	case err := <-got:
		t.Fatalf("the exclusive lock did not wait: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(cancel)
	require.ErrorIs(t, <-got, errLockCanceled)

	go exclusive(ctx, nil, time.Now().Add(100*time.Millisecond))
	require.ErrorIs(t, <-got, errLockTimeout)

	stop, stopWorker := context.WithCancel(ctx)
	go exclusive(stop, nil, time.Time{})
	stopWorker()
	require.ErrorIs(t, <-got, context.Canceled)

	go exclusive(ctx, nil, time.Time{})
	s1.release()
	s2.release()
	s2.release() // idempotent
	require.NoError(t, <-got, "free once the shared holders let go")
}

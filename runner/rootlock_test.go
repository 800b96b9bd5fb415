package runner

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLockRoots: shared locks of one root go together, an exclusive one
// waits for them to be released, a wait ends when the attempt is
// canceled or the worker stops, and two names of one directory are one
// lock.
func TestLockRoots(t *testing.T) {
	t.Parallel()
	state := StateDir{Root: t.TempDir()}
	a, b := t.TempDir(), t.TempDir()
	ctx := context.Background()

	s1, err := lockRoots(ctx, nil, state, []string{a, b}, false)
	require.NoError(t, err)
	s2, err := lockRoots(ctx, nil, state, []string{b, a, a + "/."}, false)
	require.NoError(t, err, "shared locks go together")
	require.Len(t, s2.files, 2, "one lock per directory")

	cancel := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		l, err := lockRoots(ctx, cancel, state, []string{a}, true)
		l.release()
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the exclusive lock did not wait: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(cancel)
	require.ErrorIs(t, <-got, errLockCanceled)

	stop, cancelCtx := context.WithCancel(ctx)
	go func() {
		l, err := lockRoots(stop, nil, state, []string{a}, true)
		l.release()
		got <- err
	}()
	cancelCtx()
	require.ErrorIs(t, <-got, context.Canceled)

	go func() {
		l, err := lockRoots(ctx, nil, state, []string{a}, true)
		l.release()
		got <- err
	}()
	s1.release()
	s2.release()
	require.NoError(t, <-got, "free once the shared ones are released")
}

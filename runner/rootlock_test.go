package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"paddock/internal/testenv"
)

// TestLockRoots: jobs writing disjoint trees hold their locks together;
// one writing the same root, or a root inside or around another's, waits
// until it is released; a wait ends when the attempt is canceled, its
// timeout passes or the worker stops. Each root is locked exclusive and
// its ancestors shared, in offset order.
func TestLockRoots(t *testing.T) {
	t.Parallel()
	state := StateDir{Root: t.TempDir()}
	base := t.TempDir()
	key, err := rootLockKey(state)
	require.NoError(t, err)
	again, err := rootLockKey(state)
	require.NoError(t, err)
	require.Equal(t, key, again, "one key per state directory")
	a, b := filepath.Join(base, "a"), filepath.Join(base, "b")
	inA := filepath.Join(a, "repo")
	require.NoError(t, os.MkdirAll(inA, 0o755))
	require.NoError(t, os.MkdirAll(b, 0o755))
	ctx := context.Background()

	offsets, exclusive := rootLockPlan(key, []string{inA})
	require.Len(t, exclusive, len(offsets))
	require.IsIncreasing(t, offsets)
	for _, off := range offsets {
		require.True(t, off >= 0 && off < rootLockSpace, "offset %d", off)
	}
	held := 0
	for _, ex := range exclusive {
		if ex {
			held++
		}
	}
	require.Equal(t, 1, held, "the root alone is exclusive")

	la, err := lockRoots(ctx, nil, time.Time{}, nil, state, []string{a})
	require.NoError(t, err)
	lb, err := lockRoots(ctx, nil, time.Time{}, nil, state, []string{b})
	require.NoError(t, err, "disjoint trees go together")

	got := make(chan error, 1)
	try := func(ctx context.Context, cancel <-chan struct{}, deadline time.Time, roots ...string) {
		l, err := lockRoots(ctx, cancel, deadline, nil, state, roots)
		require.Equal(t, err == nil, l.covers(roots))
		l.release()
		got <- err
	}
	for _, roots := range [][]string{{a}, {inA}, {base}} {
		go try(ctx, nil, time.Now().Add(150*time.Millisecond), roots...)
		require.ErrorIs(t, <-got, errLockTimeout, "%v waits for %s", roots, a)
	}
	cancel := make(chan struct{})
	go try(ctx, cancel, time.Time{}, inA)
	close(cancel)
	require.ErrorIs(t, <-got, errLockCanceled)
	stop, stopWorker := context.WithCancel(ctx)
	go try(stop, nil, time.Time{}, inA)
	stopWorker()
	require.ErrorIs(t, <-got, context.Canceled)

	// The wait is announced once, naming the roots.
	var said []string
	_, err = lockRoots(ctx, nil, time.Now().Add(120*time.Millisecond), func(why string) { said = append(said, why) }, state, []string{inA})
	require.ErrorIs(t, err, errLockTimeout)
	require.Len(t, said, 1)
	require.Contains(t, said[0], "another job writes "+inA)

	go try(ctx, nil, time.Time{}, inA)
	la.release()
	la.release() // idempotent
	require.NoError(t, <-got, "free once the other lets go")
	lb.release()
}

// TestLockRootsManySiblings: jobs writing many sibling directories all
// hold their locks at once: no two directories' locks fall on one place
// (with a place per directory drawn from a thousand, 300 siblings and
// their shared parents would meet several times).
func TestLockRootsManySiblings(t *testing.T) {
	t.Parallel()
	state := StateDir{Root: t.TempDir()}
	base := t.TempDir()
	var held []*rootLocks
	t.Cleanup(func() {
		for _, l := range held {
			l.release()
		}
	})
	for i := range 300 {
		dir := filepath.Join(base, fmt.Sprint(i), "w")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		l, err := lockRoots(context.Background(), nil, time.Now().Add(time.Second), nil, state, []string{dir})
		require.NoError(t, err, "job %d of sibling workspaces", i)
		held = append(held, l)
	}
	_, err := lockRoots(context.Background(), nil, time.Now().Add(100*time.Millisecond), nil, state, []string{filepath.Join(base, "7")})
	require.ErrorIs(t, err, errLockTimeout, "a directory around one of them still waits")
}

// TestLockRootsThroughABindMount: a directory reached by two paths (a
// bind mount) is one lock: a job writing it through one path waits for a
// job writing it through the other.
func TestLockRootsThroughABindMount(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		testenv.Unavailable(t, "a bind mount needs root")
	}
	state := StateDir{Root: t.TempDir()}
	base := t.TempDir()
	orig, alias := filepath.Join(base, "orig"), filepath.Join(base, "alias")
	require.NoError(t, os.MkdirAll(filepath.Join(orig, "w"), 0o755))
	require.NoError(t, os.Mkdir(alias, 0o755))
	require.NoError(t, unix.Mount(orig, alias, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(alias, unix.MNT_DETACH) })

	held, err := lockRoots(context.Background(), nil, time.Time{}, nil, state, []string{filepath.Join(alias, "w")})
	require.NoError(t, err)
	defer held.release()
	_, err = lockRoots(context.Background(), nil, time.Now().Add(150*time.Millisecond), nil, state, []string{filepath.Join(orig, "w")})
	require.ErrorIs(t, err, errLockTimeout, "the same directory through another path")
}

// TestRootLockKeyConcurrent: processes' goroutines making the key at once
// all get the one that was linked in place.
func TestRootLockKeyConcurrent(t *testing.T) {
	t.Parallel()
	state := StateDir{Root: t.TempDir()}
	keys := make(chan []byte, 16)
	for range 16 {
		go func() {
			k, err := rootLockKey(state)
			if err != nil {
				t.Error(err)
			}
			keys <- k
		}()
	}
	first := <-keys
	for range 15 {
		require.Equal(t, first, <-keys)
	}
	onDisk, err := os.ReadFile(state.RootLockKey())
	require.NoError(t, err)
	require.Equal(t, first, onDisk)
	entries, err := os.ReadDir(filepath.Dir(state.RootLockKey()))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")
}

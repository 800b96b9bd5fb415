package runner

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"paddock/hooks"
	"paddock/queue"
	"paddock/sandbox"
)

// A protected path ([sandbox.PolicyParams].Protect) is pinned by a mount
// in the job's own mount namespace only: another job writing the same
// tree, in its namespace, may remove or rename the path (the kernel then
// detaches the first job's mount, which may create it again), swap a
// symlink the first one's resolution followed, or have the runner's clean
// up after it remove a placeholder the first one still relies on. So jobs
// that write overlapping trees never run at once: each workspace_write
// job holds, from before it resolves its protected paths until they are
// checked after it ([sandbox.Policy.AfterCommand]), an exclusive lock on
// each of its writable roots and a shared lock on each of their ancestor
// directories (hierarchical locking): two jobs writing /srv/a and
// /srv/a/b meet on /srv/a (shared against exclusive), two writing /srv/a
// and /srv/b do not (both hold /srv shared), and jobs in their own default
// workspaces run side by side. Locks are taken in one order (by bucket,
// below), so no two jobs wait for each other in a cycle.
//
// The locks are flock(2) locks on rootLockBuckets files of the state
// directory ([StateDir.RootLock], hidden from every job, so no job can
// take or hold one), a directory's path hashed to one of them: two paths
// in one bucket only make their jobs wait for each other when one of them
// needs it exclusive. The kernel drops them when the worker's process
// ends, however it ends. Workers of one state directory share them;
// workers with different state directories do not see each other's
// (docs/policy.md).

// rootLockBuckets is how many lock files a state directory has at most.
const rootLockBuckets = 1024

// rootLockPoll bounds how long a waiting job sleeps between two tries.
const rootLockPoll = 50 * time.Millisecond

// rootLocks are the locks one job holds; release drops them (nil-safe,
// idempotent).
type rootLocks struct {
	files []*os.File
	roots []string // the writable roots they were taken for
}

func (l *rootLocks) release() {
	if l == nil {
		return
	}
	for _, f := range l.files {
		f.Close() // closing the last descriptor drops the flock
	}
	l.files = nil
}

// covers reports whether l holds the locks of roots (nil-safe).
func (l *rootLocks) covers(roots []string) bool {
	return l != nil && l.files != nil && slices.Equal(l.roots, roots)
}

// errLockCanceled is lockRoots' error when the attempt was canceled
// while it waited.
var errLockCanceled = errors.New("canceled while waiting for another job writing the same directories")

// errLockTimeout is lockRoots' error when the job's timeout passed while
// it waited.
var errLockTimeout = errors.New("its timeout passed while it waited for another job writing the same directories")

// rootLockPlan returns the buckets to lock for roots (canonical absolute
// paths), in the order to take them, with whether each is exclusive.
func rootLockPlan(roots []string) (buckets []int, exclusive map[int]bool) {
	exclusive = map[int]bool{}
	add := func(dir string, ex bool) {
		h := fnv.New32a()
		h.Write([]byte(dir))
		b := int(h.Sum32() % rootLockBuckets)
		if _, ok := exclusive[b]; !ok {
			buckets = append(buckets, b)
		}
		exclusive[b] = exclusive[b] || ex
	}
	for _, r := range roots {
		add(r, true)
		for d := filepath.Dir(r); ; d = filepath.Dir(d) {
			add(d, false)
			if d == "/" {
				break
			}
		}
	}
	slices.Sort(buckets)
	return buckets, exclusive
}

// lockRoots takes the locks of roots: each root exclusive, each ancestor
// shared. It waits until each is free, until ctx ends, cancel is closed
// or deadline (when not zero) passes.
//
// Errors: a lock file cannot be created; ctx.Err(), errLockCanceled or
// errLockTimeout when it stopped waiting; nothing is held then.
func lockRoots(ctx context.Context, cancel <-chan struct{}, deadline time.Time, state StateDir, roots []string) (*rootLocks, error) {
	buckets, exclusive := rootLockPlan(roots)
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	l := &rootLocks{roots: slices.Clone(roots)}
	for _, b := range buckets {
		name := state.RootLock(b)
		if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
			l.release()
			return nil, fmt.Errorf("root lock: %w", err)
		}
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			l.release()
			return nil, fmt.Errorf("root lock: %w", err)
		}
		l.files = append(l.files, f)
		how := unix.LOCK_SH
		if exclusive[b] {
			how = unix.LOCK_EX
		}
		for wait := time.Millisecond; ; wait = min(2*wait, rootLockPoll) {
			err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
			if err == nil {
				break
			}
			if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
				l.release()
				return nil, fmt.Errorf("root lock %s: %w", name, err)
			}
			select {
			case <-ctx.Done():
				l.release()
				return nil, ctx.Err()
			case <-cancel:
				l.release()
				return nil, errLockCanceled
			case <-expired:
				l.release()
				return nil, errLockTimeout
			case <-time.After(wait):
			}
		}
	}
	return l, nil
}

// maxLockRounds bounds how often lockAndResolve starts again because the
// roots changed under it.
const maxLockRounds = 4

// lockAndResolve takes the locks of pol's writable roots (workspace_write
// only; other modes write nothing and hold none) and builds j's policy
// again under them, so that its protected paths are resolved while no
// other job writes those trees. When the policy built under the locks has
// other roots (a symlink on a root's path changed), it lets go and starts
// again. deadline (zero: none) bounds the wait.
//
// Errors: lockRoots' (see [lockOutcome]), the policy's, or roots that
// kept changing.
func (e *Executor) lockAndResolve(ctx context.Context, cancel <-chan struct{}, deadline time.Time, fence Fence, j hooks.Job, pol sandbox.Policy) (sandbox.Policy, *rootLocks, error) {
	if pol.Mode() != sandbox.ModeWorkspaceWrite {
		return pol, nil, nil
	}
	for range maxLockRounds {
		locks, err := lockRoots(ctx, cancel, deadline, StateDir{Root: e.StateDir}, pol.Roots())
		if err != nil {
			return pol, nil, err
		}
		again, err := fence.policy(j)
		if err != nil {
			locks.release()
			return pol, nil, err
		}
		if locks.covers(again.Roots()) {
			return again, locks, nil
		}
		locks.release()
		pol = again
	}
	return pol, nil, fmt.Errorf("the writable roots %s changed %d times while the job waited to start", strings.Join(pol.Roots(), ", "), maxLockRounds)
}

// lockOutcome is the attempt's outcome when lockAndResolve gave up
// because the attempt was canceled, timed out or the worker is stopping;
// "" for any other error (or none).
func lockOutcome(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errLockCanceled):
		return queue.OutcomeCanceled
	case errors.Is(err, errLockTimeout):
		return queue.OutcomeTimeout
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return queue.OutcomeInterrupted
	}
	return ""
}

package runner

import (
	"context"
	"errors"
	"fmt"
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

// Jobs that write one directory at once may each resolve the protected
// paths inside it ([sandbox.PolicyParams].Protect) while another rewrites
// what that resolution follows: a symlinked ".git" swapped by one job
// between another's resolution and its mounts leaves the second
// protecting the wrong directory. So each job that writes a root with
// protected paths holds that root's lock from before its resolution until
// the links are checked after it ([sandbox.Policy.AfterCommand]): shared
// when its resolution followed no symlink inside a writable root (the
// mounts pin everything it resolved: such jobs run side by side),
// exclusive when it did (it waits for the others, and they for it). The
// locks are flock(2) locks on files of the state directory
// ([StateDir.RootLock], hidden from every job, so no job can take or hold
// one), keyed by the root's device and inode; the kernel drops them when
// the worker's process ends, however it ends. Workers of one state
// directory share them; workers with different state directories do not
// see each other's (docs/policy.md).

// rootLockPoll bounds how long a waiting job sleeps between two tries.
const rootLockPoll = 50 * time.Millisecond

// rootLocks are the locks one job holds; release drops them (nil-safe,
// idempotent).
type rootLocks struct {
	files     []*os.File
	exclusive bool
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

// lockRoots takes the locks of roots (shared, or exclusive), in the order
// of their lock files' names so that two jobs never wait for each other
// in a cycle. It waits until each is free, until ctx ends or cancel is
// closed.
//
// Errors: a root cannot be stat'ed, the lock file cannot be created, or
// ctx ended (ctx.Err()) or cancel was closed (errLockCanceled) while
// waiting; nothing is held then.
func lockRoots(ctx context.Context, cancel <-chan struct{}, state StateDir, roots []string, exclusive bool) (*rootLocks, error) {
	var names []string
	for _, r := range roots {
		var st unix.Stat_t
		if err := unix.Stat(r, &st); err != nil {
			return nil, fmt.Errorf("lock %s: %w", r, err)
		}
		names = append(names, state.RootLock(uint64(st.Dev), st.Ino))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	l := &rootLocks{exclusive: exclusive}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Dir(n), 0o700); err != nil {
			l.release()
			return nil, fmt.Errorf("root lock: %w", err)
		}
		f, err := os.OpenFile(n, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			l.release()
			return nil, fmt.Errorf("root lock: %w", err)
		}
		l.files = append(l.files, f)
		for wait := time.Millisecond; ; wait = min(2*wait, rootLockPoll) {
			err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
			if err == nil {
				break
			}
			if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
				l.release()
				return nil, fmt.Errorf("root lock %s: %w", n, err)
			}
			select {
			case <-ctx.Done():
				l.release()
				return nil, ctx.Err()
			case <-cancel:
				l.release()
				return nil, errLockCanceled
			case <-time.After(wait):
			}
		}
	}
	return l, nil
}

// errLockCanceled is lockRoots' error when the attempt was canceled
// while it waited.
var errLockCanceled = errors.New("canceled while waiting for another job writing the same directory")

// exclusiveHeld reports whether l holds its roots exclusively (nil-safe).
func (l *rootLocks) exclusiveHeld() bool { return l != nil && l.exclusive && len(l.files) > 0 }

// maxLockRounds bounds how often lockAndResolve starts again because the
// resolution changed under it.
const maxLockRounds = 4

// lockAndResolve takes the locks of pol's writable roots (workspace_write
// only; other modes write nothing and hold none) and builds j's policy
// again under them: exclusive when the resolution follows a protected
// link, else shared. When the policy built under the locks needs other
// locks (its roots changed, or it now follows a link), it lets go and
// starts again.
//
// Errors: lockRoots' (canceled, ctx ended: see [lockOutcome]), the
// policy's, or a resolution that kept changing.
func (e *Executor) lockAndResolve(ctx context.Context, cancel <-chan struct{}, fence Fence, j hooks.Job, pol sandbox.Policy) (sandbox.Policy, *rootLocks, error) {
	if pol.Mode() != sandbox.ModeWorkspaceWrite {
		return pol, nil, nil
	}
	exclusive := pol.FollowsProtectedLinks()
	for range maxLockRounds {
		locks, err := lockRoots(ctx, cancel, StateDir{Root: e.StateDir}, pol.Roots(), exclusive)
		if err != nil {
			return pol, nil, err
		}
		again, err := fence.policy(j)
		if err != nil {
			locks.release()
			return pol, nil, err
		}
		if slices.Equal(again.Roots(), pol.Roots()) && (exclusive || !again.FollowsProtectedLinks()) {
			return again, locks, nil
		}
		locks.release()
		pol, exclusive = again, exclusive || again.FollowsProtectedLinks()
	}
	return pol, nil, fmt.Errorf("the protected paths of %s changed %d times while the job waited to start", strings.Join(pol.Roots(), ", "), maxLockRounds)
}

// lockOutcome is the attempt's outcome when lockAndResolve gave up
// because the attempt was canceled or the worker is stopping; "" for any
// other error (or none).
func lockOutcome(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errLockCanceled):
		return queue.OutcomeCanceled
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return queue.OutcomeInterrupted
	}
	return ""
}

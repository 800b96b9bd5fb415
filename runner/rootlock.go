package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"paddock/hooks"
	"paddock/queue"
	"paddock/sandbox"
)

// Jobs that write at once may each resolve the protected paths inside
// their roots ([sandbox.PolicyParams].Protect) while another rewrites
// what that resolution follows: a symlinked ".git" swapped by one job
// between another's resolution and its mounts leaves the second
// protecting the wrong directory, and recording the wrong link to put
// back. Roots may nest (one job writes /srv, another /srv/repo), so no
// lock per root can tell which jobs meet: every workspace_write job holds
// the state directory's protect lock ([StateDir.ProtectLock]) from before
// its resolution until its links are checked after it
// ([sandbox.Policy.AfterCommand]): shared when its resolution followed no
// symlink inside a writable root (the mounts pin everything it resolved:
// such jobs run side by side), exclusive when it did (it runs alone among
// the writing jobs, which wait for it, and it for them). It is a flock(2)
// lock on a file of the state directory (hidden from every job, so no job
// can take or hold it); the kernel drops it when the worker's process
// ends, however it ends. Workers of one state directory share it; workers
// with different state directories do not see each other's
// (docs/policy.md).

// protectLockPoll bounds how long a waiting job sleeps between two tries.
const protectLockPoll = 50 * time.Millisecond

// protectLock is the lock one job holds; release drops it (nil-safe,
// idempotent).
type protectLock struct {
	file      *os.File
	exclusive bool
}

func (l *protectLock) release() {
	if l == nil || l.file == nil {
		return
	}
	l.file.Close() // closing the last descriptor drops the flock
	l.file = nil
}

// exclusiveHeld reports whether l is held exclusively (nil-safe).
func (l *protectLock) exclusiveHeld() bool { return l != nil && l.exclusive && l.file != nil }

// errLockCanceled is lockProtect's error when the attempt was canceled
// while it waited.
var errLockCanceled = errors.New("canceled while waiting for a job that writes through a protected symlink")

// errLockTimeout is lockProtect's error when the job's timeout passed
// while it waited.
var errLockTimeout = errors.New("its timeout passed while it waited for a job that writes through a protected symlink")

// lockProtect takes the state directory's protect lock, shared or
// exclusive. It waits until the lock is free, until ctx ends, cancel is
// closed or deadline (when not zero) passes.
//
// Errors: the lock file cannot be created; ctx.Err(), errLockCanceled or
// errLockTimeout when it stopped waiting; nothing is held then.
func lockProtect(ctx context.Context, cancel <-chan struct{}, deadline time.Time, state StateDir, exclusive bool) (*protectLock, error) {
	name := state.ProtectLock()
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return nil, fmt.Errorf("protect lock: %w", err)
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("protect lock: %w", err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	for wait := time.Millisecond; ; wait = min(2*wait, protectLockPoll) {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return &protectLock{file: f, exclusive: exclusive}, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("protect lock %s: %w", name, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-cancel:
			f.Close()
			return nil, errLockCanceled
		case <-expired:
			f.Close()
			return nil, errLockTimeout
		case <-time.After(wait):
		}
	}
}

// maxLockRounds bounds how often lockAndResolve starts again because the
// resolution changed under it.
const maxLockRounds = 4

// lockAndResolve takes the protect lock for a job whose policy is pol
// (workspace_write only; other modes write nothing and hold none) and
// builds j's policy again under it: exclusive when the resolution follows
// a protected link, else shared. When the policy built under the lock
// follows a link a shared lock does not cover, it lets go and starts
// again. deadline (zero: none) bounds the wait.
//
// Errors: lockProtect's (see [lockOutcome]), the policy's, or a
// resolution that kept changing.
func (e *Executor) lockAndResolve(ctx context.Context, cancel <-chan struct{}, deadline time.Time, fence Fence, j hooks.Job, pol sandbox.Policy) (sandbox.Policy, *protectLock, error) {
	if pol.Mode() != sandbox.ModeWorkspaceWrite {
		return pol, nil, nil
	}
	exclusive := pol.FollowsProtectedLinks()
	for range maxLockRounds {
		lock, err := lockProtect(ctx, cancel, deadline, StateDir{Root: e.StateDir}, exclusive)
		if err != nil {
			return pol, nil, err
		}
		again, err := fence.policy(j)
		if err != nil {
			lock.release()
			return pol, nil, err
		}
		if exclusive || !again.FollowsProtectedLinks() {
			return again, lock, nil
		}
		lock.release()
		exclusive = true
	}
	return pol, nil, fmt.Errorf("the protected paths of %s changed %d times while the job waited to start", pol.Workspace(), maxLockRounds)
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

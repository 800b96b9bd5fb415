package runner

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
// workspaces run side by side. Locks are taken in one order (by offset,
// below), so no two jobs wait for each other in a cycle.
//
// The locks are open file description locks (fcntl(2) F_OFD_SETLK) on
// one byte each of one file of the state directory ([StateDir.RootLocks],
// hidden from every job, so no job can take or hold one). A directory is
// known by its device and inode (a bind mount gives one directory two
// paths) and its byte is at an offset hashed from them with the state
// directory's secret key ([rootLockPlan]) into 2^62 places: two
// directories whose locks fall on one byte would make their jobs wait for
// each other, which no job can bring about (it cannot choose such a
// directory without the key) and chance does not (one pair in 2^62). The
// kernel drops a job's locks when its descriptor is closed, and all of
// them when the worker's process ends, however it ends. Workers of one
// state directory share them; workers with different state directories
// do not see each other's (docs/policy.md).

// rootLockSpace is how many places (bytes of the lock file) a directory's
// lock may fall on: offsets are below it, so that each lock's one byte
// stays below the largest offset fcntl(2) takes (2^63-1).
const rootLockSpace = 1 << 62

// rootLockPoll bounds how long a waiting job sleeps between two tries.
const rootLockPoll = 50 * time.Millisecond

// rootLocks are the locks one job holds, all on one open file
// description; release drops them (nil-safe, idempotent).
type rootLocks struct {
	file  *os.File // nil once released
	roots []string // the writable roots they were taken for
}

func (l *rootLocks) release() {
	if l == nil || l.file == nil {
		return
	}
	l.file.Close() // closing the description drops its locks
	l.file = nil
}

// covers reports whether l holds the locks of roots (nil-safe).
func (l *rootLocks) covers(roots []string) bool {
	return l != nil && l.file != nil && slices.Equal(l.roots, roots)
}

// errLockCanceled is lockRoots' error when the attempt was canceled
// while it waited.
var errLockCanceled = errors.New("canceled while waiting for another job writing the same directories")

// errLockTimeout is lockRoots' error when the job's timeout passed while
// it waited.
var errLockTimeout = errors.New("its timeout passed while it waited for another job writing the same directories")

// rootLockPlan returns the offsets (in [0, rootLockSpace)) of the bytes
// to lock for roots (canonical absolute paths), in the order to take them
// (increasing), with whether each is exclusive. A
// directory is known by its device and inode, not its path (a bind mount
// gives one directory two paths), and its ancestors are those ".." leads
// to from it, up to the root directory, which is left out (no job writes
// it, and every job would share its lock). The offset is a keyed hash
// (HMAC-SHA256 with key) of the two numbers, so that a job cannot choose a
// directory whose lock falls where another's does. A root that cannot be
// opened is left out: the fence refuses it before anything runs.
func rootLockPlan(key []byte, roots []string) (offsets []int64, exclusive map[int64]bool) {
	exclusive = map[int64]bool{}
	add := func(st *unix.Stat_t, ex bool) {
		m := hmac.New(sha256.New, key)
		var id [16]byte
		binary.LittleEndian.PutUint64(id[:8], uint64(st.Dev))
		binary.LittleEndian.PutUint64(id[8:], st.Ino)
		m.Write(id[:])
		b := int64(binary.LittleEndian.Uint64(m.Sum(nil)) % rootLockSpace)
		if _, ok := exclusive[b]; !ok {
			offsets = append(offsets, b)
		}
		exclusive[b] = exclusive[b] || ex
	}
	for _, r := range roots {
		fd, err := unix.Open(r, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			unix.Close(fd)
			continue
		}
		add(&st, true)
		// Each directory above is added once its own ".." is known to
		// lead elsewhere: the root directory, whose ".." is itself, is
		// left out.
		cur, above := st, false
		for depth := 0; depth < maxLockDepth; depth++ {
			up, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				break
			}
			unix.Close(fd)
			fd = up
			var ust unix.Stat_t
			if unix.Fstat(fd, &ust) != nil || ust.Dev == cur.Dev && ust.Ino == cur.Ino {
				break
			}
			if above {
				add(&cur, false)
			}
			cur, above = ust, true
		}
		unix.Close(fd)
	}
	slices.Sort(offsets)
	return offsets, exclusive
}

// maxLockDepth bounds the walk up from a root.
const maxLockDepth = 256

// rootLockKeys caches each state directory's lock key for the process.
var rootLockKeys sync.Map // StateDir.RootLockKey() -> []byte

// rootLockKey returns the state directory's lock key (32 random bytes in
// [StateDir.RootLockKey], made by the first process that needs it; the
// first one linked in place wins, and every process then reads it). Safe
// for concurrent use.
func rootLockKey(state StateDir) ([]byte, error) {
	name := state.RootLockKey()
	if k, ok := rootLockKeys.Load(name); ok {
		return k.([]byte), nil
	}
	key, err := os.ReadFile(name)
	if err != nil || len(key) != 32 {
		if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
			return nil, fmt.Errorf("root lock key: %w", err)
		}
		fresh := make([]byte, 32)
		if _, err := rand.Read(fresh); err != nil {
			return nil, fmt.Errorf("root lock key: %w", err)
		}
		tmp, err := os.CreateTemp(filepath.Dir(name), "key.*.tmp")
		if err != nil {
			return nil, fmt.Errorf("root lock key: %w", err)
		}
		_, werr := tmp.Write(fresh)
		cerr := tmp.Close()
		if werr == nil && cerr == nil {
			// Link, not rename: an existing key is never replaced.
			if lerr := os.Link(tmp.Name(), name); lerr != nil && !errors.Is(lerr, fs.ErrExist) {
				werr = lerr
			}
		}
		os.Remove(tmp.Name())
		if werr != nil || cerr != nil {
			return nil, fmt.Errorf("root lock key: %w", errors.Join(werr, cerr))
		}
		if key, err = os.ReadFile(name); err != nil || len(key) != 32 {
			return nil, fmt.Errorf("root lock key %s: unreadable or not 32 bytes", name)
		}
	}
	k, _ := rootLockKeys.LoadOrStore(name, key)
	return k.([]byte), nil
}

// lockRoots takes the locks of roots: each root exclusive, each ancestor
// shared. It waits until each is free, until ctx ends, cancel is closed
// or deadline (when not zero) passes; waiting, when not nil, is called
// once before it first waits, with the reason.
//
// Errors: the lock file cannot be opened or created, or fcntl(2)
// refuses a lock for another reason than another's; ctx.Err(), errLockCanceled or
// errLockTimeout when it stopped waiting; nothing is held then.
func lockRoots(ctx context.Context, cancel <-chan struct{}, deadline time.Time, waiting func(string), state StateDir, roots []string) (*rootLocks, error) {
	key, err := rootLockKey(state)
	if err != nil {
		return nil, err
	}
	offsets, exclusive := rootLockPlan(key, roots)
	var expired <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	name := state.RootLocks() // beside the key: its directory exists
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("root lock: %w", err)
	}
	l := &rootLocks{file: f, roots: slices.Clone(roots)}
	for _, off := range offsets {
		lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: io.SeekStart, Start: off, Len: 1}
		if exclusive[off] {
			lk.Type = unix.F_WRLCK
		}
		for wait := time.Millisecond; ; wait = min(2*wait, rootLockPoll) {
			err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
			if err == nil {
				break
			}
			// fcntl(2): a lock held by another description fails
			// with EAGAIN or EACCES.
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EINTR) {
				l.release()
				return nil, fmt.Errorf("root lock %s: %w", name, err)
			}
			if waiting != nil {
				waiting(fmt.Sprintf("another job writes %s or a directory around or inside it", strings.Join(roots, ", ")))
				waiting = nil
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
// again. deadline (zero: none) bounds the wait; waiting is told once when
// it must wait.
//
// Errors: lockRoots' (see [lockOutcome]), the policy's, or roots that
// kept changing.
func (e *Executor) lockAndResolve(ctx context.Context, cancel <-chan struct{}, deadline time.Time, waiting func(string), fence Fence, j hooks.Job, pol sandbox.Policy) (sandbox.Policy, *rootLocks, error) {
	if pol.Mode() != sandbox.ModeWorkspaceWrite {
		return pol, nil, nil
	}
	for range maxLockRounds {
		locks, err := lockRoots(ctx, cancel, deadline, waiting, StateDir{Root: e.StateDir}, pol.Roots())
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

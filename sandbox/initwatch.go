package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrInitUnknown is returned by [WatchInit] when the status does not say
// which process is the sandbox's init, or in which pid namespace.
var ErrInitUnknown = errors.New("sandbox: bwrap did not report the sandbox's init (child-pid with pid-namespace)")

// InitWatch tells when the sandbox's init has exited. The init of a pid
// namespace exits only after every other process of the namespace has
// died and been reaped (the kernel kills them when the init dies:
// pid_namespaces(7)), and bwrap's init waits for all of its children, so
// once Done is closed nothing of the job is left, whatever bwrap itself is
// still doing on the host. Safe for concurrent use.
type InitWatch struct {
	done     chan struct{}
	f        *os.File // nil when the init was already gone
	stopOnce sync.Once
	stopped  chan struct{}
}

// WatchInit starts watching the init that s reports (s.ChildPID in the pid
// namespace s.PidNamespace) through a pidfd (pidfd_open(2)), in the Go
// netpoller: no thread waits for it. Call it once the child-pid record
// has arrived, while the bwrap that made the init still runs or soon
// after; a pid that no longer names a process of that namespace means the
// init has exited (its pid can only be reused once it was reaped), and
// the returned watch is done at once.
//
// onDone, when not nil, is called exactly once, on the watch's own
// goroutine, once the watch is over: with true when the init has exited
// (after Done is closed), with false when Stop came first or the exit
// could not be told. It is never called when WatchInit returns an error.
//
// Errors: [ErrInitUnknown] when s has no child pid or no pid namespace
// (bwrap older than 0.5, or no record yet); a wrapped error when the
// kernel has no pidfd_open (Linux < 5.3) or the process's namespace
// cannot be read (another user's process). The caller then has no way to
// tell when the job's processes are gone but bwrap's exit.
func WatchInit(s Status, onDone func(exited bool)) (*InitWatch, error) {
	if s.ChildPID <= 0 || s.PidNamespace == 0 {
		return nil, ErrInitUnknown
	}
	w := &InitWatch{done: make(chan struct{}), stopped: make(chan struct{})}
	gone := func() (*InitWatch, error) {
		close(w.done)
		if onDone != nil {
			go onDone(true)
		}
		return w, nil
	}
	fd, err := unix.PidfdOpen(s.ChildPID, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return gone() // exited and reaped
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: watch the sandbox's init: pidfd_open(%d): %w", s.ChildPID, err)
	}
	// The pidfd names one process for good; the check that it is the
	// init comes after it was opened, so a pid reused in between shows
	// as another namespace (or none): the init is gone then.
	link, err := os.Readlink("/proc/" + strconv.Itoa(s.ChildPID) + "/ns/pid")
	switch {
	case errors.Is(err, os.ErrNotExist):
		syscall.Close(fd)
		return gone()
	case err != nil:
		syscall.Close(fd)
		return nil, fmt.Errorf("sandbox: watch the sandbox's init: %w", err)
	case link != "pid:["+strconv.FormatUint(s.PidNamespace, 10)+"]":
		syscall.Close(fd)
		return gone()
	}
	w.f = os.NewFile(uintptr(fd), "pidfd") // non-blocking: the netpoller watches it
	rc, err := w.f.SyscallConn()
	if err != nil {
		w.f.Close()
		return nil, fmt.Errorf("sandbox: watch the sandbox's init: %w", err)
	}
	go func() {
		exited := false
		defer func() {
			if onDone != nil {
				onDone(exited)
			}
		}()
		var pollErr error
		err := rc.Read(func(fd uintptr) bool {
			ready, err := pidfdReadable(int(fd))
			pollErr = err
			return ready || err != nil
		})
		select {
		case <-w.stopped:
			return // Stop closed the file: not an exit
		default:
		}
		if err == nil && pollErr == nil {
			exited = true
			close(w.done)
		}
		// Otherwise the exit cannot be told: Done stays open, and the
		// caller goes by bwrap's exit.
	}()
	return w, nil
}

// Done is closed when the init has exited. It is never closed after Stop
// unless the exit came first.
func (w *InitWatch) Done() <-chan struct{} { return w.done }

// Stop ends the watch and releases its pidfd. Idempotent.
func (w *InitWatch) Stop() {
	w.stopOnce.Do(func() {
		close(w.stopped)
		if w.f != nil {
			w.f.Close()
		}
	})
}

// AwaitPidfd blocks the calling goroutine, in the Go netpoller rather
// than in a system call, until the process of pidfd has exited (a pidfd
// turns readable then: pidfd_open(2), "NOTES"). It takes ownership of
// pidfd and closes it. It returns at once, with an error, when pidfd is
// negative or cannot be polled; the caller then falls back on a blocking
// wait.
func AwaitPidfd(pidfd int) error {
	if pidfd < 0 {
		return errors.New("sandbox: no pidfd")
	}
	if err := syscall.SetNonblock(pidfd, true); err != nil {
		syscall.Close(pidfd)
		return err
	}
	f := os.NewFile(uintptr(pidfd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var pollErr error
	err = rc.Read(func(fd uintptr) bool {
		ready, err := pidfdReadable(int(fd))
		pollErr = err
		return ready || err != nil
	})
	if err == nil {
		err = pollErr
	}
	return err
}

// pidfdReadable polls pidfd without waiting: true when its process has
// exited; an error when poll fails for another reason than EINTR.
func pidfdReadable(pidfd int) (bool, error) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("poll pidfd: %w", err)
		}
		switch re := fds[0].Revents; {
		case n == 0:
			return false, nil
		case re&(unix.POLLIN|unix.POLLHUP) != 0:
			return true, nil // exited (POLLHUP: and reaped)
		default:
			return false, fmt.Errorf("poll pidfd: revents %#x", re)
		}
	}
}

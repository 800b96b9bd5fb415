package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"paddock/internal/filekind"
)

// Event is one line of the event log: a job changed state.
type Event struct {
	// Time is when the change was recorded (RFC 3339 with nanoseconds).
	Time time.Time `json:"time"`
	// Type is "started" (a worker claimed the job and runs an attempt),
	// "finished" (the attempt was recorded; State is the job's state after
	// it) or "recovered" (an expired lease was taken back, or a stopping
	// worker gave back a job it had to stop).
	Type     string `json:"type"`
	JobID    string `json:"job_id"`
	JobName  string `json:"job_name,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	State    string `json:"state,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Reason   string `json:"reason,omitempty"`
	WorkerID string `json:"worker_id,omitempty"`
}

// EventLogMaxBytes is the size, in bytes, past which an event log is
// rotated (64 MiB, ~330,000 events of ~200 bytes, two per attempt): the
// file is renamed
// to PATH.1, replacing the previous one, and a new PATH is started. So
// the log takes at most about twice this on disk.
const EventLogMaxBytes = 64 << 20

// EventLog appends events as JSON lines to a file (events.jsonl in the
// state directory). Each event is one write on an O_APPEND descriptor, so
// several workers can share the file without interleaving lines. Once the
// file reaches its size limit, the writer that sees it rotates the file
// (see rotate); the others notice at their next append and reopen PATH.
// Safe for concurrent use. A nil *EventLog discards events.
type EventLog struct {
	path     string
	maxBytes int64

	mu sync.Mutex
	f  *os.File
}

// OpenEventLog opens (creating, mode 0600) the event log at path, rotated
// past maxBytes (<= 0 means [EventLogMaxBytes]).
func OpenEventLog(path string, maxBytes int64) (*EventLog, error) {
	if maxBytes <= 0 {
		maxBytes = EventLogMaxBytes
	}
	f, err := openEventFile(path)
	if err != nil {
		return nil, err
	}
	return &EventLog{path: path, maxBytes: maxBytes, f: f}, nil
}

// openEventFile opens (creating it) the event log at path for
// appending. Only a regular file will do: a FIFO would block the worker
// (O_NONBLOCK makes its open fail at once instead, with ENXIO, when
// nothing reads it), and a device such as /dev/zero takes every line and
// keeps none; it is also what a wait reads, and a wait reading /dev/zero
// would never reach its end. Returns ErrEventLogNotRegular (wrapped) for
// anything else.
//
// A missing log is created with O_EXCL, which follows no symlink: a link
// to nothing at path is refused (the open without O_CREAT then finds no
// file), not a cause to create its target wherever it points.
func openEventFile(path string) (*os.File, error) {
	const flags = os.O_APPEND | os.O_WRONLY | syscall.O_NONBLOCK
	f, err := os.OpenFile(path, flags, 0)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(path, flags|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			// Another worker made it since, or path is a dangling link.
			f, err = os.OpenFile(path, flags, 0)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := CheckEventFile(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ErrEventLogNotRegular is returned by [OpenEventLog] and [CheckEventFile]
// when the event log's path names something other than a regular file.
var ErrEventLogNotRegular = errors.New("event log: not a regular file")

// CheckEventFile returns an error wrapping [ErrEventLogNotRegular],
// naming f and what it is, unless f is a regular file (a symlink to one
// will do); a wait checks the event log it reads with it too.
func CheckEventFile(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is %s", ErrEventLogNotRegular, f.Name(), filekind.Of(fi.Mode()))
	}
	return nil
}

// Append writes e. Errors are returned but a worker only logs them: losing
// an event line must not stop a job.
func (l *EventLog) Append(e Event) error {
	if l == nil {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(b); err != nil {
		return err
	}
	// With O_APPEND the offset after a write is the file's end: its size,
	// other workers' lines included.
	if end, err := l.f.Seek(0, io.SeekCurrent); err == nil && end >= l.maxBytes {
		return l.rotate()
	}
	return nil
}

// rotate starts a new log file once the current one has reached its
// limit. Under an exclusive flock(2) of the full file (so two workers
// that both saw it full rotate it once): when PATH is still that file,
// PATH.1 is replaced by a hard link to it and a new empty file is renamed
// onto PATH, so PATH always exists (a reader watching it sees the old
// file's link count change, and reopens PATH); when PATH is already
// another file, another worker rotated it, and this one reopens PATH. A
// line another worker appends between the rotation and its reopening
// lands in PATH.1; nothing is lost. Called with l.mu held.
func (l *EventLog) rotate() error {
	old := l.f
	if err := syscall.Flock(int(old.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("event log: rotate: %w", err)
	}
	nf, err := l.next(old)
	if err != nil {
		// Go on appending to the full file; the next append tries again.
		_ = syscall.Flock(int(old.Fd()), syscall.LOCK_UN)
		return fmt.Errorf("event log: rotate %s: %w", l.path, err)
	}
	l.f = nf
	return old.Close() // releases the lock
}

// next returns the file to append to after old, rotating PATH when it is
// still old (see rotate).
func (l *EventLog) next(old *os.File) (*os.File, error) {
	cur, err := old.Stat()
	if err != nil {
		return nil, err
	}
	if named, err := os.Stat(l.path); err != nil || !os.SameFile(cur, named) {
		return openEventFile(l.path) // another worker rotated it
	}
	prev := l.path + ".1"
	if err := os.Remove(prev); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := os.Link(l.path, prev); err != nil {
		return nil, err
	}
	tmp := l.path + ".new"
	nf, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, l.path); err != nil {
		nf.Close()
		return nil, err
	}
	return nf, nil
}

// Close closes the file.
func (l *EventLog) Close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

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

// The reader.

// otherJobsPause is how long a wait leaves the event log unread after
// lines about other jobs only. A worker busy with other jobs appends a
// few hundred lines a second; reading each as it came cost a wait for one
// job beside a 1,000-job batch 0.22 s of CPU over 6 s (each wake of an
// idle Go process is costly), against 0.11 s with this pause, about what
// the 0.2 s poll alone costs. An event about its own jobs is then seen up
// to this much later.
const otherJobsPause = 100 * time.Millisecond

// EventWatch is the event log's reader, for waits: it sends on C (never blocking, at most one pending) when a line
// naming a wanted job (setWant) is appended to the event log at path, at
// most once per gap (setGap). It reads the lines the log gained since
// it last looked; between two sends it does not read the watcher, so the
// kernel merges the log's writes into one inotify event (inotify(7):
// identical successive events are coalesced while unread). Without
// inotify, or while the file does not exist, c stays quiet; retry tries
// to watch again. Its methods are for one goroutine; close ends the watch.
type EventWatch struct {
	path string
	c    chan struct{}
	w    *fsnotify.Watcher
	gap  atomic.Int64 // nanoseconds
	done chan struct{}

	mu       sync.Mutex
	want     map[string]bool // nil: every line
	own      map[string]bool // every id ever wanted: lines about them are not other jobs'
	f        *os.File        // the log, read from where the last look stopped
	partial  []byte          // the start of a line not yet complete
	skipping bool            // in a line longer than maxEventLine, until its end
}

// maxEventLine is the longest event line a wait keeps while it is
// incomplete, in bytes; paddock's own lines are a few hundred bytes.
const maxEventLine = 64 << 10

// maxEventRead is the most one look at the event log reads, in bytes
// (~5,000 events), so that the wait's loop, which waits for the watch's
// lock, stays responsive to signals and its timeout whatever the log does.
const maxEventRead = 1 << 20

// WatchEvents starts watching the event log at path for the lines that
// name the jobs of [EventWatch.SetWant]. The caller must Close it.
func WatchEvents(path string) *EventWatch {
	ew := &EventWatch{path: path, c: make(chan struct{}, 1), done: make(chan struct{})}
	ew.Retry()
	if ew.f != nil {
		// What is in the log already is older than the wait's first look.
		_, _ = ew.f.Seek(0, io.SeekEnd)
	}
	return ew
}

// C is the channel a wait selects on: a send means a line about a wanted
// job (or something the watch could not read) came; look at the store.
func (ew *EventWatch) C() <-chan struct{} { return ew.c }

// SetGap sets the least time between two sends on C.
func (ew *EventWatch) SetGap(d time.Duration) { ew.gap.Store(int64(d)) }

// SetWant sets the job ids whose events wake the wait.
func (ew *EventWatch) SetWant(ids []string) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	ew.mu.Lock()
	ew.want = want
	if ew.own == nil {
		ew.own = make(map[string]bool, len(ids))
	}
	for _, id := range ids {
		ew.own[id] = true
	}
	ew.mu.Unlock()
}

// wanted reads the lines appended to the log since the last call and
// reports whether one of them names a wanted job (hit), and whether one
// names a job that was never wanted, or none (others): a line about a
// job the wait found final already (its look can come between the
// worker's commit and its event) is neither. A line not yet whole is
// neither until it is. A read error, a log that is not there to read, or
// more than maxEventRead bytes to read counts as wanted (the store is the
// truth).
func (ew *EventWatch) wanted() (hit, others bool) {
	ew.mu.Lock()
	defer ew.mu.Unlock()
	if ew.f == nil || ew.want == nil {
		return true, false
	}
	var buf [32 << 10]byte
	for total := 0; ; {
		if total >= maxEventRead {
			// More than a worker writes between two looks: look at the
			// store now, and read on at the next event (or poll).
			return true, others
		}
		n, err := ew.f.Read(buf[:])
		total += n
		data := buf[:n]
		for len(data) > 0 {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				if len(ew.partial)+len(data) > maxEventLine {
					// Not a line paddock wrote: drop it, and look.
					ew.partial, ew.skipping, hit = nil, true, true
				} else if !ew.skipping {
					ew.partial = append(ew.partial, data...)
				}
				break
			}
			line := data[:i]
			if len(ew.partial) > 0 {
				line = append(ew.partial, line...)
				ew.partial = ew.partial[:0]
			}
			if ew.skipping {
				ew.skipping = false
			} else if id := eventJobID(line); ew.want[id] {
				hit = true
			} else if !ew.own[id] {
				others = true
			}
			data = data[i+1:]
		}
		if err == io.EOF || n == 0 {
			return hit, others
		}
		if err != nil {
			return true, others
		}
	}
}

// eventJobID returns the job_id of one event line, or "": the log is
// written by paddock ([Event]), one JSON object per line, and job
// ids are letters and digits, so a plain search is enough.
func eventJobID(line []byte) string {
	const key = `"job_id":"`
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return ""
	}
	rest := line[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// reopen follows the event log's rotation ([EventLog]: the full
// file is renamed away and a new one takes its name, which changes the old
// file's link count: inotify's IN_ATTRIB, fsnotify's Chmod): when path
// now names another file, it reads that one from its start and watches it
// instead. It reports whether it switched. Lines other workers append to
// the old file after the rotation are not read: the wait's poll covers
// them.
func (ew *EventWatch) reopen(w *fsnotify.Watcher) bool {
	ew.mu.Lock()
	defer ew.mu.Unlock()
	if ew.f == nil {
		return false
	}
	cur, err := ew.f.Stat()
	if err != nil {
		return false
	}
	named, err := os.Stat(ew.path)
	if err != nil || os.SameFile(cur, named) {
		return false
	}
	f, err := openEventLog(ew.path)
	if err != nil {
		return false
	}
	_ = w.Remove(ew.path) // the old file's watch
	if err := w.Add(ew.path); err != nil {
		f.Close()
		return false
	}
	ew.f.Close()
	ew.f, ew.partial, ew.skipping = f, nil, false
	return true
}

// openEventLog opens the event log at path for reading, when it is a
// regular file ([CheckEventFile]): a FIFO would block the open
// (O_NONBLOCK opens it at once, to be refused) and a device such as
// /dev/zero would never let a read reach its end. A wait without the log
// polls the store.
func openEventLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if err := CheckEventFile(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// Retry starts watching if not yet watching and the file exists now.
func (ew *EventWatch) Retry() {
	if ew.w != nil {
		return
	}
	f, err := openEventLog(ew.path)
	if err != nil {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		f.Close()
		return
	}
	if err := w.Add(ew.path); err != nil {
		w.Close()
		f.Close()
		return
	}
	ew.mu.Lock()
	ew.f = f
	ew.mu.Unlock()
	ew.w = w
	go func() {
		for {
			select {
			case <-ew.done:
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if gap := ew.onEvent(w, ev.Op); gap > 0 {
					t := time.NewTimer(gap)
					select {
					case <-ew.done:
						t.Stop()
						return
					case <-t.C:
					}
				}
			case _, ok := <-w.Errors:
				if !ok {
					return
				}
			}
		}
	}()
}

// onEvent handles one event of the log's watch: it reads the lines the
// log gained (following a rotation first, on the ops a rotation makes),
// sends on c when one names a wanted job, and returns how long to leave
// the watch unread: the gap after a send, otherJobsPause after lines about
// other jobs (never waited for) only, and 0 otherwise. Two cases are
// common where pausing would leave a wanted job's end, written just
// after, unseen for otherJobsPause (`submit --wait` returned up to 0.1 s
// after its last job): an event with nothing new to read (the watch's
// reader holds one event while the kernel queues the next, whose lines
// the first read took), and the event line of a job the wait's look
// found final before the line was written.
func (ew *EventWatch) onEvent(w *fsnotify.Watcher, op fsnotify.Op) time.Duration {
	hit, others := ew.wanted()
	if op&(fsnotify.Chmod|fsnotify.Rename|fsnotify.Remove) != 0 && ew.reopen(w) {
		h, o := ew.wanted()
		hit, others = hit || h, others || o
	}
	switch {
	case hit:
		select {
		case ew.c <- struct{}{}:
		default:
		}
		return time.Duration(ew.gap.Load())
	case others:
		return otherJobsPause
	default:
		return 0
	}
}

// Close ends the watch.
func (ew *EventWatch) Close() {
	close(ew.done)
	if ew.w != nil {
		ew.w.Close()
	}
	ew.mu.Lock()
	if ew.f != nil {
		ew.f.Close()
	}
	ew.mu.Unlock()
}

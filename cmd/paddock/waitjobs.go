package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"paddock/queue"
	"paddock/runner"
)

// waitJobs waits until every job of ids is final, showing a progress bar
// when stderr is a terminal, then prints each job's final line, once per
// job however often ids names it. It returns an exit-1 error if any job
// did not succeed, the timeout passed, ctx ended, or a job left the store
// while waited for (pruned).
func waitJobs(ctx context.Context, a *app, ids []string, timeout time.Duration, out io.Writer, asJSON bool) error {
	var pending []string // ids not final yet, each once, in the order given
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			pending = append(pending, id)
		}
	}
	ids = slices.Clone(pending)
	if len(ids) == 0 {
		return nil // a file of schedules only: nothing to wait for
	}
	var bar *progressbar.ProgressBar
	if !asJSON && term.IsTerminal(int(os.Stderr.Fd())) {
		bar = progressbar.NewOptions(len(ids), progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("waiting"), progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish())
	}
	var deadline <-chan time.Time
	if timeout > 0 {
		deadline = time.After(timeout)
	}
	// Workers append an event to <state>/events.jsonl when a job starts,
	// ends or is given back: an event about a pending job wakes the wait.
	// Polling every waitPoll stays the fallback (no events file yet, no
	// inotify, a worker on another machine, a job made final by no worker:
	// canceled while queued, or failed by its dependency).
	wake := watchEvents(filepath.Join(a.stateDir, eventsFile))
	defer wake.close()
	wake.setWant(pending)
	final := make(map[string]queue.Job, len(ids))
	finalStates := slices.DeleteFunc(queue.JobStates(), func(s queue.JobState) bool { return !s.Finished() })
	lastGone := time.Now()
	for {
		// One query per look: which of the pending jobs are final now.
		// (pending is never empty here: an empty IDs would list every job.)
		done, err := a.store.JobList(ctx, &queue.JobListParams{IDs: pending, States: finalStates, WithAttempts: true})
		if err != nil {
			return err
		}
		for _, j := range done {
			final[j.ID] = j
		}
		if len(done) > 0 {
			pending = slices.DeleteFunc(pending, func(id string) bool { _, ok := final[id]; return ok })
			wake.setWant(pending)
			if bar != nil {
				_ = bar.Add(len(done))
			}
		}
		if len(pending) == 0 {
			break
		}
		gap := wakeGap(len(pending))
		if time.Since(lastGone) >= max(waitGoneCheck, 10*gap) {
			// A job that ended and was pruned between two looks would
			// never be seen final: fail rather than wait forever.
			lastGone = time.Now()
			if err := checkJobsExist(ctx, a, pending); err != nil {
				clearBar(bar)
				return &exitCodeError{code: exitFailure, err: err}
			}
		}
		wake.setGap(gap)
		select {
		case <-ctx.Done():
			clearBar(bar)
			// 128+SIGINT, as shells report a command Ctrl-C ended, so that
			// `paddock wait X || handle-failure` can tell an interrupted
			// wait from jobs that failed (exit 1).
			return &exitCodeError{code: exitInterrupted, err: fmt.Errorf("interrupted while waiting; %d of %d jobs final (the jobs go on)", len(final), len(ids))}
		case <-deadline:
			clearBar(bar)
			return &exitCodeError{code: exitFailure, err: fmt.Errorf("timed out waiting; %d of %d jobs final", len(final), len(ids))}
		case <-wake.c:
		case <-time.After(max(waitPoll, gap)):
			wake.retry()
		}
	}
	if bar != nil {
		_ = bar.Finish()
	}
	bad := 0
	for _, id := range ids {
		j := final[id]
		if j.State != queue.StateSucceeded {
			bad++
		}
		printJobLine(out, j, asJSON, "waited")
	}
	if bad > 0 {
		return &exitCodeError{code: exitFailure, err: fmt.Errorf("%d of %d job(s) did not succeed", bad, len(ids))}
	}
	return nil
}

// clearBar removes the progress bar, if any, before an error is printed.
func clearBar(bar *progressbar.ProgressBar) {
	if bar != nil {
		_ = bar.Clear()
	}
}

// waitGoneCheck is how often, at least, a wait checks that its pending
// jobs still exist (ten gaps when that is longer).
const waitGoneCheck = 5 * time.Second

// checkJobsExist returns an error wrapping queue.ErrNotFound naming the
// first of ids (not empty) that is no longer in the store.
func checkJobsExist(ctx context.Context, a *app, ids []string) error {
	there, err := a.store.JobList(ctx, &queue.JobListParams{IDs: ids})
	if err != nil {
		return err
	}
	if len(there) == len(ids) {
		return nil
	}
	found := make(map[string]bool, len(there))
	for _, j := range there {
		found[j.ID] = true
	}
	for _, id := range ids {
		if !found[id] {
			return fmt.Errorf("job %s is no longer in the queue (pruned while waiting?): %w", id, queue.ErrNotFound)
		}
	}
	return nil
}

// checkWaitTimeout refuses a negative --timeout (0 waits forever).
func checkWaitTimeout(d time.Duration) error {
	if d < 0 {
		return usagef("--timeout %s: must not be negative (0 waits forever)", d)
	}
	return nil
}

// waitPoll is how often a wait looks at the store without being woken.
const waitPoll = 200 * time.Millisecond

// eventsFile is the worker's event log in the state directory.
const eventsFile = "events.jsonl"

// wakeGap is the least time between two looks of a wait at the store,
// woken by the event log or not: 2 ms per pending job, at most 10 s (and
// the poll waits at least waitPoll). A look costs ~12 µs per pending job
// here, so a wait takes ~0.6% of a core whatever the size of its batch
// (with a fixed gap of 0.1 s, a wait for 5,000 jobs took half as much CPU
// as the worker running them), and the last jobs of a batch still wake it
// within milliseconds of their end. Waking on each of a worker's two
// events per job, a wait of a 200-job batch took 2.6 ms of CPU per job.
func wakeGap(pending int) time.Duration {
	return min(time.Duration(pending)*2*time.Millisecond, 10*time.Second)
}

// otherJobsPause is how long a wait leaves the event log unread after
// lines about other jobs only. A worker busy with other jobs appends a
// few hundred lines a second; reading each as it came cost a wait for one
// job beside a 1,000-job batch 0.22 s of CPU over 6 s (each wake of an
// idle Go process is costly), against 0.11 s with this pause, about what
// the 0.2 s poll alone costs. An event about its own jobs is then seen up
// to this much later.
const otherJobsPause = 100 * time.Millisecond

// eventWatch sends on c (never blocking, at most one pending) when a line
// naming a wanted job (setWant) is appended to the event log at path, at
// most once per gap (setGap). It reads the lines the log gained since
// it last looked; between two sends it does not read the watcher, so the
// kernel merges the log's writes into one inotify event (inotify(7):
// identical successive events are coalesced while unread). Without
// inotify, or while the file does not exist, c stays quiet; retry tries
// to watch again. Its methods are for one goroutine; close ends the watch.
type eventWatch struct {
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

func watchEvents(path string) *eventWatch {
	ew := &eventWatch{path: path, c: make(chan struct{}, 1), done: make(chan struct{})}
	ew.retry()
	if ew.f != nil {
		// What is in the log already is older than the wait's first look.
		_, _ = ew.f.Seek(0, io.SeekEnd)
	}
	return ew
}

// setGap sets the least time between two sends on c.
func (ew *eventWatch) setGap(d time.Duration) { ew.gap.Store(int64(d)) }

// setWant sets the job ids whose events wake the wait.
func (ew *eventWatch) setWant(ids []string) {
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
func (ew *eventWatch) wanted() (hit, others bool) {
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
// written by paddock (runner.Event), one JSON object per line, and job
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

// reopen follows the event log's rotation (runner.EventLog: the full
// file is renamed away and a new one takes its name, which changes the old
// file's link count: inotify's IN_ATTRIB, fsnotify's Chmod): when path
// now names another file, it reads that one from its start and watches it
// instead. It reports whether it switched. Lines other workers append to
// the old file after the rotation are not read: the wait's poll covers
// them.
func (ew *eventWatch) reopen(w *fsnotify.Watcher) bool {
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
// regular file (runner.CheckEventFile): a FIFO would block the open
// (O_NONBLOCK opens it at once, to be refused) and a device such as
// /dev/zero would never let a read reach its end. A wait without the log
// polls the store.
func openEventLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if err := runner.CheckEventFile(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// retry starts watching if not yet watching and the file exists now.
func (ew *eventWatch) retry() {
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
func (ew *eventWatch) onEvent(w *fsnotify.Watcher, op fsnotify.Op) time.Duration {
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

func (ew *eventWatch) close() {
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

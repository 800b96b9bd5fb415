package inbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"paddock/internal/filekind"
	"paddock/jobspec"
	"paddock/queue"
)

// Inbox defaults and limits.
const (
	// SettleDefault is how long a file's size and modification time
	// must stay unchanged before the inbox takes it.
	SettleDefault = time.Second
	// MaxBytes is the largest job file the inbox reads; larger files
	// are rejected.
	MaxBytes = jobspec.MaxFileBytes
)

// Options configure New.
type Options struct {
	// Dir is the inbox directory, for example <state>/inbox. Required. It
	// and its accepted/ and rejected/ subdirectories are created.
	Dir string
	// Store receives the jobs. Required.
	Store queue.Store
	// Settle is how long, by Clock, a file's size and modification time
	// must stay the same before it is read. 0 means SettleDefault; a
	// negative value takes files at first sight.
	Settle time.Duration
	// Clock defaults to time.Now.
	Clock func() time.Time
	// Check, when not nil, vets a parsed file before it is enqueued, with
	// the name it was dropped under (paddock passes its check of the job's
	// hook names against the config). An error refuses the file as a
	// validation error would. source is the file's text (for KeyLines).
	// Defaults to nil (no extra check).
	Check func(file string, source []byte, specs []jobspec.Spec) error
}

// Result says what happened to one file.
type Result struct {
	File string      // the name it was dropped under
	Path string      // where it is now: under accepted/ or rejected/
	Jobs []queue.Job // the jobs enqueued; nil when rejected
	Err  error       // why it was rejected (also written to Path + ".error"); nil when accepted
}

// Inbox turns job files dropped into a directory into queued jobs.
//
// Writers should create the file under a hidden or non-.toml name in the
// same directory, then rename it into place:
//
//	write inbox/.build.toml.tmp, then rename it to inbox/build.toml
//
// The inbox ignores dotfiles, names not ending in ".toml" and anything in
// subdirectories, and takes a file only once its size and modification
// time have stayed the same for the settle period, so a file still being
// written in place is not read half-way either.
//
// Only regular files are read. A ".toml" entry that is anything else (a
// symbolic link, a named pipe, a directory, a device or a socket) is
// rejected at first sight, unread: it is moved (renamed, never opened, a
// link never followed) to rejected/ with a ".error" file saying what it is.
//
// Each file is one batch: enqueued whole and moved to accepted/, or refused
// whole and moved to rejected/ with a "<name>.error" file beside it saying
// why (one problem per line). A name already taken in accepted/ or
// rejected/ gets a numeric suffix ("build-2.toml"). Relative paths in the
// file resolve against the inbox directory (Dir), where it was dropped; the
// jobs' SourcePath is the file's final path under accepted/.
//
// A file is first moved to Dir/.processing/ so that a crash between enqueue
// and the final move neither loses nor duplicates it: the next Scan finds
// it there and asks the store whether it was enqueued (by source path).
//
// Scan is safe for concurrent use and across processes: it holds an
// exclusive flock on Dir/.lock and returns at once with no results when
// another scanner holds it.
type Inbox struct {
	dir, accepted, rejected, processing string
	store                               queue.Store
	settle                              time.Duration
	clock                               func() time.Time
	check                               func(string, []byte, []jobspec.Spec) error

	mu   sync.Mutex
	seen map[string]seenFile
}

type seenFile struct {
	size  int64
	mtime time.Time
	since time.Time // by the clock: when this size and mtime were first seen
}

// New prepares the inbox directories.
func New(o Options) (*Inbox, error) {
	if o.Dir == "" || o.Store == nil {
		return nil, errors.New("inbox: Dir and Store are required")
	}
	if o.Settle == 0 {
		o.Settle = SettleDefault
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	in := &Inbox{
		dir: dir, accepted: filepath.Join(dir, "accepted"), rejected: filepath.Join(dir, "rejected"),
		processing: filepath.Join(dir, ".processing"),
		store:      o.Store, settle: o.Settle, clock: o.Clock, check: o.Check, seen: map[string]seenFile{},
	}
	for _, d := range []string{in.dir, in.accepted, in.rejected, in.processing} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("inbox: %w", err)
		}
	}
	return in, nil
}

// Dir returns the inbox directory (absolute).
func (in *Inbox) Dir() string { return in.dir }

// Scan takes every settled job file, in name order. It returns an error
// only when the inbox itself cannot be read or the store fails; a bad job
// file is a result with Err set, not an error.
func (in *Inbox) Scan(ctx context.Context) ([]Result, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	lock, err := os.OpenFile(filepath.Join(in.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, nil // another process is scanning
		}
		return nil, fmt.Errorf("inbox: lock: %w", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	var out []Result
	// Files a crash left half-way.
	left, err := os.ReadDir(in.processing)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	for _, e := range left {
		if mark, ok := strings.CutPrefix(e.Name(), recoveringPrefix); ok {
			if !exists(filepath.Join(in.processing, mark)) {
				_ = os.Remove(filepath.Join(in.processing, e.Name())) // its file was removed by hand
			}
			continue // else read with its file
		}
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		r, err := in.recover(ctx, e.Name())
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}

	entries, err := os.ReadDir(in.dir)
	if err != nil {
		return out, fmt.Errorf("inbox: %w", err)
	}
	now := in.clock()
	present := map[string]bool{}
	var ready []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".toml") {
			continue
		}
		if !e.Type().IsRegular() {
			ready = append(ready, name) // rejected unread by take: nothing to settle
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // vanished
		}
		present[name] = true
		s, ok := in.seen[name]
		if !ok || s.size != fi.Size() || !s.mtime.Equal(fi.ModTime()) {
			s = seenFile{size: fi.Size(), mtime: fi.ModTime(), since: now}
			in.seen[name] = s
		}
		if in.settle < 0 || now.Sub(s.since) >= in.settle {
			ready = append(ready, name)
		}
	}
	for name := range in.seen {
		if !present[name] {
			delete(in.seen, name)
		}
	}
	sort.Strings(ready)
	for _, name := range ready {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		delete(in.seen, name)
		final := in.freeName(name)
		proc := filepath.Join(in.processing, final)
		if err := os.Rename(filepath.Join(in.dir, name), proc); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // taken by someone else
			}
			return out, fmt.Errorf("inbox: %w", err)
		}
		r, err := in.take(ctx, name, final)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Pending returns how many job files the last Scan saw and left in the
// inbox to settle (their size or modification time changed within the
// settle period); they are taken by a later Scan. A `worker --drain`
// does not stop while there are any. Safe for concurrent use.
func (in *Inbox) Pending() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.seen)
}

// freeName picks a name free in both accepted/ and rejected/.
func (in *Inbox) freeName(name string) string {
	stem := strings.TrimSuffix(name, ".toml")
	for i := 1; ; i++ {
		n := name
		if i > 1 {
			n = stem + "-" + strconv.Itoa(i) + ".toml"
		}
		if !exists(filepath.Join(in.accepted, n)) && !exists(filepath.Join(in.rejected, n)) && !exists(filepath.Join(in.processing, n)) {
			return n
		}
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// take enqueues the file now in processing/final.
func (in *Inbox) take(ctx context.Context, name, final string) (Result, error) {
	proc := filepath.Join(in.processing, final)
	res := Result{File: name}
	data, err := readCapped(proc, name)
	var specs []jobspec.Spec
	if err == nil {
		specs, err = jobspec.Parse(name, data, in.dir)
	}
	if err == nil && in.check != nil {
		err = in.check(name, data, specs)
	}
	if err == nil {
		var jobs []queue.Job
		jobs, err = in.store.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: string(data), SourcePath: filepath.Join(in.accepted, final)})
		if err == nil {
			res.Jobs = jobs
		} else if verr := (*jobspec.ValidationError)(nil); errors.As(err, &verr) {
			for i := range verr.Errors {
				verr.Errors[i].File = name // as dropped, not where it would have gone
			}
		} else {
			// The store failed: leave the file for the next scan.
			if rerr := os.Rename(proc, filepath.Join(in.dir, name)); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return res, fmt.Errorf("inbox: %s: %w", name, err)
		}
	}
	if err == nil {
		res.Path = filepath.Join(in.accepted, final)
		if err := os.Rename(proc, res.Path); err != nil {
			return res, fmt.Errorf("inbox: %w", err)
		}
		return res, nil
	}
	return in.reject(res, final, err)
}

// reject moves the file now in processing/final to rejected/, with err
// written beside it (.error), and returns res saying so.
func (in *Inbox) reject(res Result, final string, err error) (Result, error) {
	res.Err = err
	res.Path = filepath.Join(in.rejected, final)
	if werr := os.WriteFile(res.Path+".error", []byte(errorText(err)), 0o644); werr != nil {
		return res, fmt.Errorf("inbox: %w", werr)
	}
	if rerr := os.Rename(filepath.Join(in.processing, final), res.Path); rerr != nil {
		return res, fmt.Errorf("inbox: %w", rerr)
	}
	return res, nil
}

// recoveringPrefix names, in processing/, the mark of a file being
// recovered ([Inbox.recover]); the inbox takes no name starting with ".".
const recoveringPrefix = ".recovering-"

// recover finishes a file a crash left in processing/.
func (in *Inbox) recover(ctx context.Context, final string) (Result, error) {
	acc := filepath.Join(in.accepted, final)
	jobs, err := in.store.JobList(ctx, &queue.JobListParams{SourcePath: acc})
	if err != nil {
		return Result{}, fmt.Errorf("inbox: %w", err)
	}
	if len(jobs) > 0 {
		if err := os.Rename(filepath.Join(in.processing, final), acc); err != nil {
			return Result{}, fmt.Errorf("inbox: %w", err)
		}
		return Result{File: final, Path: acc, Jobs: jobs}, nil
	}
	// A file whose reading stops the process (a parser crash, the
	// kernel's OOM killer) would stop every worker at every start: one
	// recovery is tried, under a mark; a second crash leaves the mark,
	// and the next start moves the file aside unread.
	mark := filepath.Join(in.processing, recoveringPrefix+final)
	if exists(mark) {
		res, err := in.reject(Result{File: final}, final, fmt.Errorf("inbox: %s: a worker stopped while reading it, twice (when it was taken and when it was taken again); moved here unread: check it before dropping it again", final))
		if err == nil {
			err = os.Remove(mark)
		}
		return res, err
	}
	if err := os.WriteFile(mark, nil, 0o644); err != nil {
		return Result{}, fmt.Errorf("inbox: %w", err)
	}
	res, err := in.take(ctx, final, final)
	if rerr := os.Remove(mark); rerr != nil && err == nil {
		err = fmt.Errorf("inbox: %w", rerr)
	}
	return res, err
}

// readCapped reads the regular file at path, of at most MaxBytes;
// name is the file's name in the inbox, for messages. Anything else is
// refused unread: its type comes from Lstat (a symlink is not followed),
// and the open (O_NOFOLLOW, O_NONBLOCK: a FIFO cannot block it) is checked
// again, for an entry swapped in between.
func readCapped(path, name string) ([]byte, error) {
	notRegular := func(m fs.FileMode) error {
		return fmt.Errorf("inbox: %s is %s; the inbox reads only regular files, and moves anything else here unread", name, filekind.Of(m))
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(fi.Mode())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(fi.Mode())
	}
	if fi.Size() > MaxBytes {
		return nil, fmt.Errorf("inbox: file is %d bytes; the inbox takes at most %d", fi.Size(), MaxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err == nil && len(data) > MaxBytes {
		err = fmt.Errorf("inbox: file grew past %d bytes; the inbox takes at most %d", MaxBytes, MaxBytes)
	}
	return data, err
}

// errorText is the .error file: one problem per line.
func errorText(err error) string {
	var verr *jobspec.ValidationError
	if errors.As(err, &verr) {
		var b strings.Builder
		for _, fe := range verr.Errors {
			b.WriteString(fe.String() + "\n")
		}
		return b.String()
	}
	return err.Error() + "\n"
}

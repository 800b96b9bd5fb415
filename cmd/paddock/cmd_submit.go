package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"paddock/queue"
	"paddock/runner"
)

// SubmitOptions are the flags of `paddock submit`.
type SubmitOptions struct {
	// Wait blocks until every submitted job is final; the exit status is 1
	// if any did not succeed.
	Wait bool
	// Timeout bounds --wait; 0 waits forever.
	Timeout time.Duration
}

// AddFlags registers the submit flags.
func (o *SubmitOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVarP(&o.Wait, "wait", "w", false, "wait until every submitted job is final (progress bar on a terminal); exit 1 if any did not succeed")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 0, "with --wait, give up after this long (exit 1); 0 waits forever")
}

func newSubmitCommand(gopts *GlobalOptions) *cobra.Command {
	var opts SubmitOptions
	cmd := &cobra.Command{
		Use:   "submit FILE...|-",
		Short: "Validate job files and enqueue them; print the job ids",
		Long: `Validate job files and enqueue them, one transaction per file; print the ids.

Every file is validated before anything is enqueued: one bad job anywhere
refuses the whole submission, and every problem is listed with its file,
line and key. "-" reads one job file from standard input (relative paths
resolve against the current directory).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSubmit(cmd.Context(), cmd, opts, gopts, args)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

// parsedFile is one validated job file, ready to enqueue.
type parsedFile struct {
	path  string
	specs []queue.Spec
	data  []byte
}

// parseJobFiles validates every file (or "-" for stdin) and returns them,
// or one usage error listing every problem of every file.
func parseJobFiles(args []string, stdin io.Reader) ([]parsedFile, error) {
	var out []parsedFile
	var errs []string
	for _, arg := range args {
		if arg == "-" {
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("read standard input: %w", err)
			}
			wd, _ := os.Getwd()
			specs, err := queue.Parse("<stdin>", data, wd)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			out = append(out, parsedFile{path: "-", specs: specs, data: data})
			continue
		}
		specs, data, err := queue.ParseFile(arg)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		abs, _ := filepath.Abs(arg)
		out = append(out, parsedFile{path: abs, specs: specs, data: data})
	}
	if len(errs) > 0 {
		msg := errs[0]
		for _, e := range errs[1:] {
			msg += "\n" + e
		}
		return nil, usagef("nothing was enqueued:\n%s", msg)
	}
	return out, nil
}

func runSubmit(ctx context.Context, cmd *cobra.Command, opts SubmitOptions, gopts *GlobalOptions, args []string) error {
	if cmd.Flags().Changed("timeout") && !opts.Wait {
		return usagef("--timeout %s: only with --wait", opts.Timeout)
	}
	if err := checkWaitTimeout(opts.Timeout); err != nil {
		return err
	}
	files, err := parseJobFiles(args, cmd.InOrStdin())
	if err != nil {
		return err
	}
	a, err := openApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := checkHookNames(a.cfg, files); err != nil {
		return err
	}
	var ids []string
	out := cmd.OutOrStdout()
	for _, f := range files {
		jobs, err := a.store.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: f.specs, Source: string(f.data), SourcePath: f.path})
		if err != nil {
			return enqueueError(f.path, err, ids)
		}
		for _, j := range jobs {
			ids = append(ids, j.ID)
			if gopts.JSON {
				writeJSON(out, map[string]any{"message_type": "submitted", "id": j.ID, "name": j.Name, "file": f.path})
			} else {
				fmt.Fprintf(out, "%s\t%s\n", j.ID, j.Name)
			}
		}
		reportSubmittedSchedules(ctx, a, f.specs, f.path, out, gopts.JSON) // cmd_schedules.go
	}
	_ = runner.Wake(a.stateDir)
	if !opts.Wait {
		return nil
	}
	return waitJobs(ctx, a, ids, opts.Timeout, out, gopts.JSON)
}

// enqueueError explains a file the store refused. Validation the store
// does (an `after` naming nothing, a name held by an active job) is bad
// input: exit 2. Files before it (listed) were enqueued, each whole.
func enqueueError(path string, err error, earlier []string) error {
	msg := fmt.Sprintf("nothing from %s was enqueued: %v", path, err)
	if errors.Is(err, queue.ErrInvalid) {
		msg = fmt.Sprintf("nothing from %s was enqueued:\n%v", path, err)
	}
	if len(earlier) > 0 {
		msg += fmt.Sprintf("\n(the jobs of the files before it were enqueued: %s)", strings.Join(earlier, " "))
	}
	if errors.Is(err, queue.ErrInvalid) {
		return &usageError{errors.New(msg)}
	}
	return errors.New(msg)
}

// checkHookNames runs the config's hook-name check on every file, before
// anything is enqueued, and lists every problem.
func checkHookNames(cfg runner.Config, files []parsedFile) error {
	var problems []string
	for _, f := range files {
		if err := cfg.CheckHookNames(f.path, f.data, f.specs); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return usagef("nothing was enqueued:\n%s", strings.Join(problems, "\n"))
	}
	return nil
}

// isFinal reports whether s is a terminal state.
func isFinal(s queue.JobState) bool {
	switch s {
	case queue.StateSucceeded, queue.StateFailed, queue.StateDenied, queue.StateCanceled:
		return true
	}
	return false
}

// waitJobs polls until every job is final, showing a progress bar when
// stderr is a terminal, then prints each job's final line. It returns an
// exit-1 error if any job did not succeed or the timeout passed.
func waitJobs(ctx context.Context, a *app, ids []string, timeout time.Duration, out io.Writer, asJSON bool) error {
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
	// Workers append a "finished" event to <state>/events.jsonl after each
	// record: a change there wakes the wait at once. Polling every
	// waitPoll stays the fallback (no events file yet, no inotify, a
	// worker on another machine).
	wake := watchEvents(filepath.Join(a.stateDir, eventsFile))
	defer wake.close()
	final := map[string]queue.Job{}
	var pending []string // ids not final yet, each once
	for _, id := range ids {
		if !slices.Contains(pending, id) {
			pending = append(pending, id)
		}
	}
	finalStates := []queue.JobState{queue.StateSucceeded, queue.StateFailed, queue.StateDenied, queue.StateCanceled}
	lastGone := time.Now()
	for {
		// One query per look: which of the pending jobs are final now.
		done, err := a.store.JobList(ctx, &queue.JobListParams{IDs: pending, States: finalStates, WithAttempts: true})
		if err != nil {
			return err
		}
		for _, j := range done {
			final[j.ID] = j
		}
		if len(done) > 0 {
			pending = slices.DeleteFunc(pending, func(id string) bool { _, ok := final[id]; return ok })
			if bar != nil {
				_ = bar.Add(len(done))
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Since(lastGone) >= waitGoneCheck {
			// A job that ended and was pruned between two looks would
			// never be seen final: fail rather than wait forever.
			lastGone = time.Now()
			if err := checkJobsExist(ctx, a, pending); err != nil {
				return err
			}
		}
		wake.setGap(wakeGap(len(pending)))
		select {
		case <-ctx.Done():
			return &exitCodeError{code: exitFailure, err: fmt.Errorf("interrupted while waiting; %d of %d jobs final", len(final), len(ids))}
		case <-deadline:
			return &exitCodeError{code: exitFailure, err: fmt.Errorf("timed out waiting; %d of %d jobs final", len(final), len(ids))}
		case <-wake.c:
		case <-time.After(waitPoll):
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

// waitGoneCheck is how often a wait checks that its pending jobs still
// exist.
const waitGoneCheck = 5 * time.Second

// checkJobsExist returns an error wrapping queue.ErrNotFound naming the
// first of ids that is no longer in the store.
func checkJobsExist(ctx context.Context, a *app, ids []string) error {
	there, err := a.store.JobList(ctx, &queue.JobListParams{IDs: ids})
	if err != nil {
		return err
	}
	if len(there) == len(ids) {
		return nil
	}
	seen := make(map[string]bool, len(there))
	for _, j := range there {
		seen[j.ID] = true
	}
	for _, id := range ids {
		if !seen[id] {
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

// wakeGap is the least time between two wakes of a wait by the event
// log while pending jobs are not final: 2 ms per pending job, at most
// 100 ms. A worker appends two events per job; waking on each, a wait of
// a 200-job batch read the store 400 times and took 2.6 ms of CPU per
// job beside the jobs it waited for. With the gap, a long batch wakes
// about ten times a second, and the last jobs still wake it within
// milliseconds of their end.
func wakeGap(pending int) time.Duration {
	return min(time.Duration(pending)*2*time.Millisecond, 100*time.Millisecond)
}

// eventWatch sends on c (never blocking, at most one pending) when the
// event log at path is written, at most once per gap (setGap): between
// two sends it does not read the watcher, so the kernel merges the log's
// writes into one inotify event (inotify(7): identical successive events
// are coalesced while unread). Without inotify, or while the file does
// not exist, c stays quiet; retry tries to watch again. Its methods are
// for one goroutine; close ends the watch.
type eventWatch struct {
	path string
	c    chan struct{}
	w    *fsnotify.Watcher
	gap  atomic.Int64 // nanoseconds
	done chan struct{}
}

func watchEvents(path string) *eventWatch {
	ew := &eventWatch{path: path, c: make(chan struct{}, 1), done: make(chan struct{})}
	ew.retry()
	return ew
}

// setGap sets the least time between two sends on c.
func (ew *eventWatch) setGap(d time.Duration) { ew.gap.Store(int64(d)) }

// retry starts watching if not yet watching and the file exists now.
func (ew *eventWatch) retry() {
	if ew.w != nil {
		return
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return
	}
	if err := w.Add(ew.path); err != nil {
		w.Close()
		return
	}
	ew.w = w
	go func() {
		for {
			select {
			case <-ew.done:
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				select {
				case ew.c <- struct{}{}:
				default:
				}
				if gap := time.Duration(ew.gap.Load()); gap > 0 {
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

func (ew *eventWatch) close() {
	close(ew.done)
	if ew.w != nil {
		ew.w.Close()
	}
}

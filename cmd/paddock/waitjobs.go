package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

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
	// inotify, a worker on another machine sharing a PostgreSQL store, a job made final by no worker:
	// canceled while queued, or failed by its dependency).
	wake := runner.WatchEvents(a.EventsPath())
	defer wake.Close()
	wake.SetWant(pending)
	final := make(map[string]queue.Job, len(ids))
	finalStates := slices.DeleteFunc(queue.JobStates(), func(s queue.JobState) bool { return !s.Finished() })
	lastGone := time.Now()
	// A wait with no worker on the queue would be silent forever: once,
	// if nothing has started by then, say what may be missing.
	hintAt := time.Now().Add(waitNoWorkerHint)
	if timeout > 0 && timeout/2 < waitNoWorkerHint {
		hintAt = time.Now().Add(timeout / 2)
	}
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
			wake.SetWant(pending)
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
		if !hintAt.IsZero() && time.Now().After(hintAt) {
			hintAt = time.Time{}
			running, err := a.store.JobList(ctx, &queue.JobListParams{IDs: pending, States: []queue.JobState{queue.StateRunning}})
			if err == nil && len(running) == 0 && len(final) == 0 && !asJSON {
				clearBar(bar)
				fmt.Fprintf(os.Stderr, "paddock: still waiting: none of the %d job(s) has started; is a worker running on this state directory (paddock worker)?\n", len(pending))
			}
		}
		wake.SetGap(gap)
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
		case <-wake.C():
		case <-time.After(max(waitPoll, gap)):
			wake.Retry()
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

// waitNoWorkerHint is how long a wait in which no job has started goes
// on before it says that a worker may be missing (half the wait's
// timeout, when that is sooner).
const waitNoWorkerHint = 10 * time.Second

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

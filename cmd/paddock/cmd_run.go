package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"paddock/queue"
	"paddock/runner"
)

// Exit statuses of `paddock run` when the job did not exit by itself;
// docs/commands.md ("Exit codes") documents them.
const (
	exitRunTimeout   = 124 // the job timed out and was stopped (as timeout(1))
	exitRunnerFailed = 125 // the sandbox or the runner failed; the command never ran
	exitDenied       = 126 // a hook denied the job; it never ran
	exitCanceled     = 130 // canceled (Ctrl-C or paddock cancel) while running
	exitSignalBase   = 128 // + signal number when the job was killed by a signal
)

func newRunCommand(gopts *GlobalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "run FILE|-",
		Short: "Run one job now, in the foreground, through the same hooks and sandbox; exit with its status",
		Long: `Run one job now, in the foreground: it is enqueued and recorded like any
other job, decided by the same hook chain, confined by the same sandbox, and
its output streams to the terminal while it is logged. The file must hold
exactly one job. Retries follow the job's policy, in the foreground.

Exit status: the job's own; 128+N when killed by signal N; 124 timed out;
125 the runner or sandbox failed (the command never ran); 126 denied by a
hook; 130 canceled (Ctrl-C cancels the job and records it as canceled).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRun(cmd.Context(), cmd, gopts, args[0])
		},
	}
}

func runRun(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, file string) error {
	// A reader that stops reading (`paddock run job.toml | head -1`) must
	// not kill paddock with SIGPIPE, as it kills the other commands: the
	// job would be left "running" until its lease expired and a worker ran
	// it again. Asked for with Notify (the channel is never read), SIGPIPE
	// makes writes to a closed stdout fail with EPIPE instead (os/signal,
	// "SIGPIPE"); the echo ignores them and the job runs to its end. The
	// job keeps SIGPIPE's default action, which signal.Ignore would pass on.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	files, err := parseJobFiles(ctx, []string{file}, cmd.InOrStdin())
	if err != nil {
		return notEnqueued(err)
	}
	if n := len(files[0].specs); n != 1 {
		return usagef("%s: paddock run takes a file with exactly one job, this one has %d (use paddock submit)", files[0].name, n)
	}
	if files[0].specs[0].Schedule != "" {
		return usagef("%s: the job has a schedule; paddock run runs one-off jobs (use paddock submit)", files[0].name)
	}
	if err := refuseBeforeMaking(ctx, cmd, gopts, files); err != nil {
		return err
	}
	a, err := openApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.loadPolicy(ctx, "not running the job"); err != nil {
		return err
	}
	probe, probeErr := a.Probe(ctx)
	chain, err := a.newChain(ctx, false)
	if err != nil {
		return err
	}
	defer chain.Close(context.Background())
	ex := a.Executor(chain, probe, probeErr)
	// Waits in other processes wake on the event log; a log that cannot
	// be opened only makes them poll.
	events, err := a.Events()
	if err != nil {
		events = nil
	}
	defer events.Close()

	if err := checkFiles(a.CheckSpecs, files); err != nil {
		return notEnqueued(err)
	}
	jobs, err := a.store.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: files[0].specs, Source: string(files[0].data), SourcePath: files[0].path, SourceName: files[0].name})
	if err != nil {
		return enqueueError(err)
	}
	a.warnCreated(cmd, gopts, "run_warning")
	id := jobs[0].ID
	note := func(event, text string, attempt int) {
		if gopts.JSON {
			_ = writeJSON(termSafeWriter{os.Stderr}, runProgress{MessageType: "run_progress", Event: event, JobID: id, Attempt: attempt, Message: text})
			return
		}
		fmt.Fprintf(os.Stderr, "paddock: %s\n", termSafe(text))
	}
	note("enqueued", "job "+id, 0)
	// done reports the final state (under --json only: the exit status
	// says it otherwise) and returns the exit error.
	done := func(j queue.Job) error {
		if gopts.JSON {
			_ = writeJSON(termSafeWriter{os.Stderr}, runProgress{MessageType: "run_progress", Event: "finished", JobID: id, Attempt: j.AttemptCount, State: string(j.State),
				Message: fmt.Sprintf("job %s %s: %s", id, j.State, j.Reason)})
		}
		return runExit(j)
	}
	// Ctrl-C cancels the job (recorded as canceled); it is never
	// abandoned.
	final, err := runner.RunJob(runner.RunJobParams{
		Store: a.store, Executor: ex, Events: events, WorkerID: runWorkerID(), JobID: id,
		Stdout: os.Stdout, Stderr: os.Stderr, Cancel: ctx.Done(), Note: note,
	})
	if err != nil {
		return err
	}
	return done(final)
}

// runWorkerID names `paddock run` in leases and attempts
// (runner.NewWorkerID): host:pid:boot:nonce:run.
func runWorkerID() string { return runner.NewWorkerID("run") }

// runProgress is what `paddock run --json` prints on stderr while the job
// is on its way (the job's own output keeps stdout and stderr).
type runProgress struct {
	MessageType string `json:"message_type"` // "run_progress"
	// Event is enqueued, following (another worker runs the attempt),
	// backoff (waiting before a retry), cancel_requested, attempt_finished
	// (one that will be retried) or finished (the last line: the job's
	// final state).
	Event   string `json:"event"`
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt,omitempty"`
	State   string `json:"state,omitempty"` // finished only: succeeded, failed, denied or canceled
	Message string `json:"message"`         // the text printed without --json
}

// runExit maps a final job to run's exit status.
func runExit(j queue.Job) error {
	if j.State == queue.StateSucceeded {
		return nil
	}
	var at queue.Attempt
	if n := len(j.Attempts); n > 0 {
		at = j.Attempts[n-1]
	}
	err := fmt.Errorf("job %s %s: %s", j.ID, j.State, j.Reason)
	switch {
	case j.State == queue.StateDenied:
		return &exitCodeError{code: exitDenied, err: err}
	case j.State == queue.StateCanceled:
		return &exitCodeError{code: exitCanceled, err: err}
	case at.Outcome == queue.OutcomeTimeout:
		return &exitCodeError{code: exitRunTimeout, err: err}
	case at.Outcome == queue.OutcomeRunnerFailed:
		return &exitCodeError{code: exitRunnerFailed, err: err}
	case at.Signal != "":
		if n := signalNumber(at.Signal); n > 0 {
			return &exitCodeError{code: exitSignalBase + n, err: err}
		}
	case at.ExitCode != nil && *at.ExitCode > 0:
		return &exitCodeError{code: *at.ExitCode, err: nil}
	}
	return &exitCodeError{code: exitFailure, err: err}
}

// signalNumber maps "SIGKILL" to 9; 0 when unknown.
func signalNumber(name string) int { return int(unix.SignalNum(name)) }

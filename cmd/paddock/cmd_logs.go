package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"paddock/queue"
	"paddock/runner"
)

// LogsOptions are the flags of `paddock logs`.
type LogsOptions struct {
	Follow  bool
	Stderr  bool
	Attempt int
}

// AddFlags registers the logs flags.
func (o *LogsOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVarP(&o.Follow, "follow", "f", false, "keep printing while the job runs; return when it is final")
	f.BoolVar(&o.Stderr, "stderr", false, "print standard error instead of standard output")
	f.IntVar(&o.Attempt, "attempt", 0, "attempt number (default: the latest)")
}

func newLogsCommand(gopts *GlobalOptions) *cobra.Command {
	var opts LogsOptions
	cmd := &cobra.Command{
		Use:   "logs ID|NAME",
		Short: "Print a job's output (the latest attempt's stdout, or --stderr)",
		Long: `Print a job's output: the latest attempt's stdout, or stderr with --stderr.

Logs are capped (log_max_bytes, 16 MiB by default): past the cap the
first and the last halves are kept with a marker line between them.

With a PostgreSQL store (--store), an attempt that ran on another host
is read from the store once it has ended (workers store each attempt's
capped output there), never from a file that happens to be at its path
on this host; --follow shows it when the attempt ends.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLogs(cmd.Context(), cmd, opts, gopts, args[0])
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func pickAttempt(j queue.Job, n int) (queue.Attempt, bool) {
	if len(j.Attempts) == 0 {
		return queue.Attempt{}, false
	}
	if n == 0 {
		return j.Attempts[len(j.Attempts)-1], true
	}
	for _, a := range j.Attempts {
		if a.Number == n {
			return a, true
		}
	}
	return queue.Attempt{}, false
}

func runLogs(ctx context.Context, cmd *cobra.Command, opts LogsOptions, gopts *GlobalOptions, ref string) error {
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	out := rawOut(cmd.OutOrStdout()) // the job's bytes, as written
	var f *os.File
	var stored *queue.AttemptLog // the output kept in the store, once read
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	hintAt := time.Now().Add(waitNoWorkerHint) // as wait says it
	for {
		j, err := a.getJob(ctx, ref)
		if err != nil {
			return err
		}
		at, ok := pickAttempt(j, opts.Attempt)
		final := j.State.Finished() || (opts.Attempt != 0 && ok && !at.EndedAt.IsZero())
		stdoutPath, stderrPath := at.StdoutPath, at.StderrPath
		if ok && at.EndedAt.IsZero() && stdoutPath == "" {
			// Running: the record names its logs only once it ended.
			stdoutPath, stderrPath = runner.AttemptLogPaths(a.StateDir, j.ID, at.Number)
		}
		if _, isLS := a.store.(queue.LogStore); isLS && ok && !runner.WorkerOnThisHost(at.WorkerID) {
			// Run on another host: a file at its paths here is not its
			// output; the store's copy is.
			stdoutPath, stderrPath = "", ""
		}
		path := stdoutPath
		if opts.Stderr {
			path = stderrPath
		}
		if f == nil && ok && path != "" {
			f, err = os.Open(path)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if err != nil {
				f = nil
			}
		}
		if f != nil {
			if _, err := io.Copy(out, f); err != nil {
				return err
			}
		}
		// Not on this host: the attempt ran on another host sharing the
		// queue, whose store keeps the output once the attempt ended.
		if f == nil && stored == nil && ok && !at.EndedAt.IsZero() {
			if ls, isLS := a.store.(queue.LogStore); isLS {
				l, err := ls.AttemptLogGet(ctx, j.ID, at.Number)
				switch {
				case err == nil:
					stored = &l
					data := l.Stdout
					if opts.Stderr {
						data = l.Stderr
					}
					if _, err := out.Write(data); err != nil {
						return err
					}
				case !errors.Is(err, queue.ErrNotFound):
					return err
				}
			}
		}
		if !opts.Follow || final {
			if ok && f == nil && stored != nil && !opts.Stderr && len(stored.Stdout) == 0 && len(stored.Stderr) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "paddock: job %s attempt %d wrote nothing on stdout; its stderr has %d bytes: paddock logs --stderr %s\n", j.ID, at.Number, len(stored.Stderr), ref)
			}
			if ok && f == nil && stored == nil && !opts.Stderr && stderrPath != "" {
				// Nothing on stdout: say where the job's words went.
				if fi, err := os.Stat(stderrPath); err == nil && fi.Size() > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "paddock: job %s attempt %d wrote nothing on stdout; its stderr has %d bytes: paddock logs --stderr %s\n", j.ID, at.Number, fi.Size(), ref)
				}
			}
			if ok && f == nil && stored == nil && (at.Outcome == queue.OutcomeDenied || at.Outcome == queue.OutcomeRunnerFailed) {
				// A job the fence stopped ran (and made a protected
				// path); one a hook, the policy or the sandbox refused did
				// not.
				verb := "never ran"
				if strings.HasPrefix(at.Reason, "the fence:") {
					verb = "left no output"
				}
				return &exitCodeError{code: exitFailure, err: fmt.Errorf("job %s attempt %d %s (%s): %s", j.ID, at.Number, verb, at.Outcome, at.Reason)}
			}
			if !ok {
				if opts.Attempt != 0 {
					return usagef("job %s has no attempt %d", j.ID, opts.Attempt)
				}
				if !opts.Follow {
					if j.State.Finished() {
						// Ended without an attempt (canceled before it
						// started, failed with a dependency): it never will.
						return &exitCodeError{code: exitFailure, err: fmt.Errorf("job %s never ran: it is %s (%s)", j.ID, j.State, j.Reason)}
					}
					return &exitCodeError{code: exitFailure, err: fmt.Errorf("job %s has not run yet (state %s)", j.ID, j.State)}
				}
			}
			return nil
		}
		if !hintAt.IsZero() && time.Now().After(hintAt) {
			hintAt = time.Time{}
			if j.State == queue.StateQueued && !ok {
				fmt.Fprintf(cmd.ErrOrStderr(), "paddock: still waiting: job %s has not started; is a worker running on this state directory (paddock worker)?\n", j.ID)
			}
		}
		select {
		case <-ctx.Done():
			// Interrupted before the job was final: 130 (main.go), so
			// that a script can tell it from "final, output done".
			return fmt.Errorf("logs -f of job %s: %w", j.ID, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

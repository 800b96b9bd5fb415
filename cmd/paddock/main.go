// Command paddock is a job runner for Linux: TOML-defined commands wait in a
// durable queue, WebAssembly hooks allow, adjust or deny each one, and what
// is allowed runs inside a bubblewrap write fence. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"paddock/sandbox/launch"
)

// Exit codes shared by every command; docs/commands.md ("Exit codes") documents them.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and reported failure (a denied hook, a failed job), or the state directory or queue database cannot be used
	exitUsage   = 2 // bad flags, bad input, a file that does not load
	// exitInterrupted: a command other than worker and run ended by SIGINT
	// or SIGTERM before it was done (a wait before its jobs were final);
	// 128+SIGINT, as a shell reports a command that Ctrl-C ended.
	exitInterrupted = 130
)

func main() {
	// Inside a confined job's sandbox paddock is the launcher (the first
	// program bwrap runs): nothing else of paddock runs there, not even
	// the descriptor sweep below, which would close the launcher's report
	// pipe.
	launch.Dispatch()
	closeInheritedFDs()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

// closeInheritedFDs marks every file descriptor paddock inherited beyond
// stdin, stdout and stderr close-on-exec. Go sets it on the files it opens,
// but not on those a shell redirect, a supervisor or a parent left open
// (`paddock run job.toml 7>>file`): bwrap would pass them into the job, and
// a read_only job could write through them.
func closeInheritedFDs() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// run executes the CLI with args and returns the process exit code. It is the
// single place that turns errors into exit codes.
func run(ctx context.Context, args []string) int {
	gopts := &GlobalOptions{}
	root := newRootCommand(gopts)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ec *exitCodeError
	if errors.As(err, &ec) {
		if ec.err != nil {
			printError(gopts, ec.err)
		}
		return ec.code
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// SIGINT or SIGTERM ended the command mid-way (opening the queue,
		// a query): that is not a failure of the store, whatever the
		// layer that saw the canceled context says.
		printError(gopts, errors.New("interrupted"))
		return exitInterrupted
	}
	printError(gopts, err)
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFailure
}

// usageError marks an error caused by the user's input (flags, files);
// it maps to exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// exitCodeError asks run to exit with code, printing err if it is not nil.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitCodeError) Unwrap() error { return e.err }

// printError writes err for the user: an exit_error JSON object on stderr
// under --json, otherwise "paddock: <message>".
func printError(gopts *GlobalOptions, err error) {
	if gopts.JSON {
		writeJSON(termSafeWriter{os.Stderr}, map[string]any{"message_type": "exit_error", "message": err.Error()})
		return
	}
	fmt.Fprintf(os.Stderr, "paddock: %s\n", termSafe(err.Error()))
}

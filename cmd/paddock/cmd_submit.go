package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"paddock/cmd/internal/compose"
	"paddock/internal/filekind"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/runner"
	"paddock/sandbox"
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
		Long: `Validate job files and enqueue them, all in one transaction; print the ids.

Every file is validated before anything is enqueued: one bad job anywhere
refuses the whole submission, and every problem is listed with its file
(as typed), line and key. "-" reads one job file from standard input,
called <stdin> in messages (relative paths resolve against the current
directory).`,
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
	name  string // as typed, for messages; queue.StdinName for "-"
	path  string // absolute, as stored (queue.JobEnqueueParams.SourcePath); "" for stdin
	specs []jobspec.Spec
	data  []byte
	// keyLines is jobspec.KeyLines(data), made at the first message
	// that needs it (a scan as long as parsing).
	keyLines func(jobLine int, key string) int
}

// at returns where sp is in f, for a message about it: `FILE:LINE: job
// "NAME": `, at the line where the job (or [defaults]) sets key, or at the
// job's own line when key is "" or set nowhere.
func (f *parsedFile) at(sp jobspec.Spec, key string) string {
	line := sp.Line
	if key != "" {
		if f.keyLines == nil {
			f.keyLines = jobspec.KeyLines(f.data)
		}
		line = f.keyLines(sp.Line, key)
	}
	return fmt.Sprintf("%s:%d: job %q: ", f.name, line, sp.Name)
}

// parseJobFiles validates every file (or "-" for stdin) and returns them,
// or one usage error listing every problem of every file (a
// *jobFileProblems: submit and run head it with [notEnqueued], check does
// not, as it never enqueues).
//
// Reading a file or stdin can block for good (a named pipe nothing writes
// to, a terminal): ctx ending (SIGINT, SIGTERM) then ends the command with
// exitInterrupted, which the read itself, in a system call, would not.
func parseJobFiles(ctx context.Context, args []string, stdin io.Reader) ([]parsedFile, error) {
	if err := checkGivenOnce(args, stdin); err != nil {
		return nil, err
	}
	var out []parsedFile
	var errs []string
	for _, arg := range args {
		if arg == "-" {
			data, err := interruptible(ctx, jobspec.StdinName, func() ([]byte, error) {
				return filekind.ReadFile("-", stdin, jobspec.MaxFileBytes, "a job file")
			})
			if tl := (*filekind.TooLargeError)(nil); errors.As(err, &tl) {
				errs = append(errs, err.Error())
				continue
			}
			if err != nil {
				return nil, err
			}
			wd, _ := os.Getwd()
			specs, err := jobspec.Parse(jobspec.StdinName, data, wd)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			out = append(out, parsedFile{name: jobspec.StdinName, specs: specs, data: data})
			continue
		}
		var specs []jobspec.Spec
		data, err := interruptible(ctx, arg, func() (data []byte, err error) {
			specs, data, err = jobspec.ParseFile(arg)
			return data, err
		})
		var ec *exitCodeError
		if errors.As(err, &ec) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		abs, _ := filepath.Abs(arg)
		out = append(out, parsedFile{name: arg, path: abs, specs: specs, data: data})
	}
	if len(errs) > 0 {
		return nil, &usageError{&jobFileProblems{errs}}
	}
	return out, nil
}

// interruptible runs read, which reads the job file name, and returns
// what it returns, unless ctx ends first: then an exitInterrupted error
// naming the file (the read goes on in its goroutine until the process
// exits). A read error of stdin is returned as a plain error, a file's as
// read returns it.
func interruptible(ctx context.Context, name string, read func() ([]byte, error)) ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := read()
		done <- result{data, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && name == jobspec.StdinName {
			return nil, fmt.Errorf("read %s: %w", name, r.err)
		}
		return r.data, r.err
	case <-ctx.Done():
		return nil, &exitCodeError{code: exitInterrupted, err: fmt.Errorf("interrupted while reading %s", name)}
	}
}

// jobFileProblems lists what is wrong with the job files of one command,
// one problem a line; each names its file (as typed) and line.
type jobFileProblems struct{ problems []string }

func (e *jobFileProblems) Error() string { return strings.Join(e.problems, "\n") }

// notEnqueued heads the problems of the job files submit or run was given
// with "nothing was enqueued"; other errors are returned as they are.
func notEnqueued(err error) error {
	var p *jobFileProblems
	if errors.As(err, &p) {
		return usagef("nothing was enqueued:\n%w", p)
	}
	return err
}

// checkGivenOnce refuses a file given twice, however spelled (a.toml,
// ./a.toml, its absolute path, a link to it: the same file as
// os.SameFile sees it, its device and inode), and standard input given
// twice, however spelled ("-", called <stdin>, and /dev/stdin,
// /dev/fd/0 or /proc/self/fd/0, whose device and inode are stdin's, as
// are those of a file that stdin redirects from): its jobs would clash
// with themselves, or the second read would find nothing left. A file that
// cannot be read is left to the parser to report.
func checkGivenOnce(args []string, stdin io.Reader) error {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{} // the argument that named it first
	idOf := func(fi os.FileInfo) (inode, bool) {
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return inode{}, false
		}
		return inode{uint64(st.Dev), st.Ino}, true
	}
	dash := false
	for _, arg := range args {
		var fi os.FileInfo
		var err error
		name := arg
		if arg == "-" {
			if dash {
				return usagef("%s is given twice", jobspec.StdinName)
			}
			dash = true
			name = jobspec.StdinName
			// "-" is read from stdin; when stdin is a file (os.Stdin,
			// not a test's reader) it has a device and inode too.
			f, ok := stdin.(interface{ Stat() (os.FileInfo, error) })
			if !ok {
				continue
			}
			fi, err = f.Stat()
		} else {
			fi, err = os.Stat(arg)
		}
		if err != nil {
			continue
		}
		if id, ok := idOf(fi); ok {
			if first, ok := seen[id]; ok {
				return givenTwice(first, name)
			}
			seen[id] = name
		}
	}
	return nil
}

// givenTwice is checkGivenOnce's error for a file given as first, then as
// again.
func givenTwice(first, again string) error {
	if first == again {
		return usagef("%s is given twice", first)
	}
	return usagef("%s is given twice (again as %s)", first, again)
}

func runSubmit(ctx context.Context, cmd *cobra.Command, opts SubmitOptions, gopts *GlobalOptions, args []string) error {
	if cmd.Flags().Changed("timeout") && !opts.Wait {
		return usagef("--timeout %s: only with --wait", opts.Timeout)
	}
	if err := checkWaitTimeout(opts.Timeout); err != nil {
		return err
	}
	files, err := parseJobFiles(ctx, args, cmd.InOrStdin())
	if err != nil {
		return notEnqueued(err)
	}
	if err := refuseBeforeMaking(ctx, cmd, gopts, files); err != nil {
		return err
	}
	a, err := openApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.loadPolicy(ctx, "nothing was enqueued"); err != nil {
		return err
	}
	if err := checkFiles(a.CheckSpecs, files); err != nil {
		return notEnqueued(err)
	}
	// A config its workers would refuse (a module missing, a digest
	// that does not match) is refused here too, before anything waits
	// for them.
	if err := a.Config.CheckHooks(); err != nil {
		return &usageError{fmt.Errorf("nothing was enqueued: %w", err)}
	}
	// Every file in one transaction: all of them are enqueued, or none.
	enqueued, err := a.store.JobEnqueueAll(ctx, enqueueBatches(files))
	if err != nil {
		return enqueueError(err)
	}
	var ids []string
	out := cmd.OutOrStdout()
	for i, f := range files {
		for _, j := range enqueued[i] {
			ids = append(ids, j.ID)
			if gopts.JSON {
				writeJSON(out, map[string]any{"message_type": "submitted", "id": j.ID, "name": j.Name, "file": cmp.Or(f.path, jobspec.StdinName)})
			} else {
				fmt.Fprintf(out, "%s\t%s\n", j.ID, j.Name)
			}
		}
		reportSubmittedSchedules(ctx, a, f.specs, f.path, out, gopts.JSON) // cmd_schedules.go
	}
	a.warnCreated(cmd, gopts, "submit_warning")
	warnUnrunnable(cmd.ErrOrStderr(), a, files, gopts.JSON)
	_ = runner.Wake(a.StateDir)
	if !opts.Wait {
		return nil
	}
	return waitJobs(ctx, a, ids, opts.Timeout, out, gopts.JSON)
}

// warnUnrunnable says, on w, which submitted jobs every worker would
// fail before they run (runner_failed, as `paddock check` says
// cannot_run): a workspace that does not exist yet (an earlier job, or
// the operator, may make it before they start), or a workspace or
// writable path the fence refuses (paddock's state directory, a hidden
// one, one holding what paddock runs). They are queued all the same: a
// worker on another host may see other paths. Each workspace is said
// once (a job with its own default workspace is not checked); with
// asJSON each warning is a "submit_warning" object.
func warnUnrunnable(w io.Writer, a *app, files []parsedFile, asJSON bool) {
	warn := func(msg string) {
		if asJSON {
			writeJSON(w, map[string]any{"message_type": "submit_warning", "message": msg})
		} else {
			fmt.Fprintf(w, "paddock: warning: %s\n", msg)
		}
	}
	// A job with no workspace gets its own when it runs: its writable
	// paths and cwd are checked beside a stand-in, made on first need.
	placeholder := ""
	defer func() {
		if placeholder != "" {
			os.RemoveAll(placeholder)
		}
	}()
	// What the fence is asked depends on these alone: a batch of jobs
	// that share them is checked once.
	seen := map[string]bool{}
	ex := a.Executor(nil, sandbox.ProbeReport{}, nil)
	for i := range files {
		f := &files[i]
		for _, sp := range f.specs {
			key := strings.Join(append([]string{sp.Mode, sp.Workspace, sp.Cwd}, sp.Writable...), "\x00")
			if seen[key] {
				continue
			}
			seen[key] = true
			ws := sp.Workspace
			if ws == "" {
				if placeholder == "" {
					var err error
					if placeholder, err = os.MkdirTemp("", "paddock-submit-"); err != nil {
						return // a check for warnings only: the jobs are queued
					}
				}
				ws = placeholder
			} else if _, err := os.Stat(ws); errors.Is(err, fs.ErrNotExist) {
				warn(fmt.Sprintf("%sworkspace %s does not exist yet: each attempt that starts before it does fails (not run)", f.at(sp, "workspace"), ws))
				continue
			}
			hj := ex.HookJob(queue.Job{Name: sp.Name, Spec: sp}, ws, 1)
			if err := a.Fence().CheckJob(hj); err != nil {
				warn(fmt.Sprintf("%seach attempt will fail before it runs (not run): %v", f.at(sp, keyOf(err)), err))
			}
		}
	}
}

// enqueueBatches returns the store's enqueue parameters for files, one
// batch a file.
func enqueueBatches(files []parsedFile) []*queue.JobEnqueueParams {
	batches := make([]*queue.JobEnqueueParams, len(files))
	for i, f := range files {
		batches[i] = &queue.JobEnqueueParams{Specs: f.specs, Source: string(f.data), SourcePath: f.path, SourceName: f.name}
	}
	return batches
}

// refuseBeforeMaking checks files, where the state directory holds no
// queue yet, against what the empty queue submit and run are about to
// make would enforce (its default policy, the config's hooks, and what
// only the store checks, an `after` naming nothing, asked of a
// throwaway queue: [compose.TryEnqueue]), and returns their refusal, so
// that a file refused so makes no queue: a mistyped --state-dir left an
// empty queue behind, which ls then answered from. Where a queue exists
// it does nothing: the command's own checks against it follow.
func refuseBeforeMaking(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, files []parsedFile) error {
	cfg, stateDir, err := loadConfig(cmd, gopts)
	if err != nil {
		return err
	}
	a := &app{Install: &compose.Install{Config: cfg, StateDir: stateDir, Policy: runner.DefaultPolicy()}}
	if a.HasStore() {
		return nil
	}
	if err := checkFiles(a.CheckSpecs, files); err != nil {
		return notEnqueued(err)
	}
	if err := a.Config.CheckHooks(); err != nil {
		return &usageError{fmt.Errorf("nothing was enqueued: %w", err)}
	}
	if err := compose.TryEnqueue(ctx, enqueueBatches(files)); errors.Is(err, jobspec.ErrInvalid) {
		if errors.Is(err, queue.ErrNoSuchDependency) {
			// An after naming a job of the queue meant, at a mistyped
			// --state-dir: say where it was looked for.
			err = fmt.Errorf("%w\n(no queue is at %s, which is where the jobs named were looked for: check --state-dir or $PADDOCK_STATE_DIR)", err, stateDir)
		}
		return enqueueError(err)
	}
	return nil
}

// keyOf returns the job-file key a fence or sandbox error is about
// ([sandbox.KeyError]), or "" when it names none.
func keyOf(err error) string {
	if ke := (*sandbox.KeyError)(nil); errors.As(err, &ke) {
		return ke.Key
	}
	return ""
}

// enqueueError explains a submission the store refused (nothing of it was
// enqueued). Validation the store does (an `after` naming nothing, a name
// held by an active job or given twice) is bad input: exit 2; the
// problems name their file and line.
func enqueueError(err error) error {
	if errors.Is(err, jobspec.ErrInvalid) {
		return usagef("nothing was enqueued:\n%v", err)
	}
	return fmt.Errorf("nothing was enqueued: %w", err)
}

// checkFiles runs check (compose.Install.CheckSpecs: the policy's
// ceilings and the chain's hook names) on every file, before anything is
// enqueued, and lists every problem (a *jobFileProblems, as
// parseJobFiles).
func checkFiles(check func(file string, source []byte, specs []jobspec.Spec) error, files []parsedFile) error {
	var problems []string
	for _, f := range files {
		if err := check(f.name, f.data, f.specs); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return &usageError{&jobFileProblems{problems}}
	}
	return nil
}

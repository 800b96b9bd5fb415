package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"paddock/cmd/internal/compose"
	"paddock/hooks"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/runner"
	"paddock/sandbox"
)

func newCheckCommand(gopts *GlobalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "check JOB.toml|-",
		Short: "Validate a job file and run the configured hook chain on it without running anything",
		Long: `Validate a job file and run the configured hook chain on each job in it,
without enqueueing or running anything. For each job it prints the decision
trail, the final argv and the confined argv that would run.

Exit status: 0 when every job would be allowed, 1 when any would be denied
or could not run (verdict "cannot_run": its sandbox cannot be built, for
example a cwd outside what the sandbox shows), 2 for a file or config that
does not load.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCheck(cmd.Context(), cmd, gopts, args[0])
		},
	}
}

// checkResult is one job's line of `paddock check --json`.
type checkResult struct {
	MessageType  string             `json:"message_type"`
	Name         string             `json:"name"`
	Verdict      string             `json:"verdict"`
	Reason       string             `json:"reason,omitempty"`
	Argv         []string           `json:"argv"`
	Mode         string             `json:"mode"`
	ConfinedArgv []string           `json:"confined_argv,omitempty"`
	Error        string             `json:"error,omitempty"`
	Trail        []hooks.TrailEntry `json:"trail"`
}

// verdictRefusedByPolicy is the verdict of a job the queue's policy
// refuses: one of its ceilings (runner.RefusedError) is exceeded.
const verdictRefusedByPolicy = "refused_by_policy"

func runCheck(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, file string) error {
	files, err := parseJobFiles(ctx, []string{file}, cmd.InOrStdin())
	if err != nil {
		return err
	}
	cfg, stateDir, err := loadConfig(cmd, gopts)
	if err != nil {
		return err
	}
	a := &app{Install: &compose.Install{Config: cfg, StateDir: stateDir}}
	// The queue's policy, when the state directory holds a queue (check
	// creates none): its chain decides and its ceilings refuse.
	if a.HasStore() {
		if err := a.openStore(ctx); err != nil {
			return err
		}
		defer a.Close()
		if err := a.loadPolicy(ctx, "nothing was checked"); err != nil {
			return err
		}
	}
	// What submit, run and the inbox refuse (ranges, keys that apply to
	// schedules only, an after naming nothing), check
	// refuses too, with the same words: the enqueue's own planning, asking
	// the queue when there is one.
	if err := planAsEnqueue(ctx, a, files); err != nil {
		return usagef("%w", err)
	}
	// As submit and run refuse the file (hooks it names that the chain
	// lacks), so does check. The policy's ceilings are reported per job.
	if err := checkFiles(a.Config.CheckHookNames, files); err != nil {
		return err
	}
	if _, err := a.Probe(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "paddock: warning: %v (confined argv shown for the default bwrap)\n", err)
	}
	chain, err := a.newChain(ctx, false)
	if err != nil {
		return err
	}
	defer chain.Close(context.Background())
	// A job without a workspace gets a fresh, empty one when it runs;
	// check shows every such job with one empty placeholder directory
	// (made once: a directory made and removed per job was four fifths of
	// the time of checking a file of many jobs).
	placeholder, err := os.MkdirTemp("", "paddock-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(placeholder)
	emptyWorkspace := filepath.Join(placeholder, "workspace")
	if err := os.Mkdir(emptyWorkspace, 0o755); err != nil {
		return err
	}
	ex := a.Executor(chain, sandbox.ProbeReport{}, nil)
	out := cmd.OutOrStdout()
	// An allow from no hooks is not an allow from the hooks, and one
	// from no queue (a mistyped --state-dir) is not the queue's.
	var warnings []string
	if len(chain.Hooks()) == 0 {
		warnings = append(warnings, "no hooks: the queue's policy names none and no config names any; only the policy's ceilings and the fence are checked (paddock policy show)")
	}
	if a.store == nil {
		warnings = append(warnings, fmt.Sprintf("no queue at %s: checked against the default policy; check --state-dir (or $PADDOCK_STATE_DIR) if the queue you meant is elsewhere", stateDir))
	}
	if msg := strings.Join(warnings, "; "); msg != "" {
		if gopts.JSON {
			writeJSON(termSafeWriter{cmd.ErrOrStderr()}, map[string]any{"message_type": "check_warning", "message": msg})
		} else {
			fmt.Fprintln(cmd.ErrOrStderr(), "paddock: check: "+termSafe(msg))
		}
	}
	denied := 0
	// emit prints one job's result and counts it when it fails.
	emit := func(r checkResult, failed bool) {
		if failed {
			denied++
		}
		if gopts.JSON {
			writeJSON(out, r)
			return
		}
		printCheck(out, r)
	}
	for i, spec := range files[0].specs {
		job := queue.Job{ID: fmt.Sprintf("check-%d", i+1), Name: spec.Name, Spec: spec}
		ws := spec.Workspace
		if ws == "" {
			ws = emptyWorkspace
		}
		hj := ex.HookJob(job, ws, 1)
		if refused := a.Policy.Judge(runner.AskOf(spec, cfg.DefaultMode)); refused != nil {
			// Before any hook runs, as the worker refuses it.
			refused.File, refused.Line, refused.Job = files[0].name, jobspec.KeyLines(files[0].data)(spec.Line, refused.Key), spec.Name
			r := checkResult{MessageType: "check", Name: spec.Name, Verdict: verdictRefusedByPolicy, Reason: refused.Error(),
				Argv: hj.Argv, Mode: hj.Mode, Trail: []hooks.TrailEntry{}}
			emit(r, true)
			continue
		}
		// No id of its own yet: the fence is asked as for a job that has
		// none (check's placeholder ids would name workspaces that never
		// exist).
		fenceJob := hj
		fenceJob.ID = ""
		if err := a.Fence().CheckJob(fenceJob); err != nil {
			// As the worker does: a job whose sandbox cannot be built never
			// reaches the hooks.
			r := checkResult{MessageType: "check", Name: spec.Name, Verdict: "cannot_run", Error: files[0].at(spec, keyOf(err)) + err.Error(),
				Argv: hj.Argv, Mode: hj.Mode, Trail: []hooks.TrailEntry{}}
			emit(r, true)
			continue
		}
		res, err := chain.Decide(ctx, hooks.DecideParams{Job: hj, Extra: spec.Hooks})
		if err != nil {
			return err
		}
		if res.Trail == nil {
			res.Trail = []hooks.TrailEntry{}
		}
		r := checkResult{MessageType: "check", Name: spec.Name, Verdict: string(res.Verdict), Reason: res.Reason,
			Argv: res.Job.Argv, Mode: res.Job.Mode, Trail: res.Trail}
		if res.Verdict == hooks.VerdictAllow {
			ask := runner.Ask{Mode: sandbox.Mode(res.Job.Mode), Network: res.Job.Network, UnixSockets: res.Job.UnixSockets, Writable: res.Job.Writable}
			if spec.Workspace != "" || res.Job.Workspace != ws {
				ask.Workspace = res.Job.Workspace
			}
			if refused := a.Policy.Judge(ask); refused != nil {
				refused.Job = spec.Name
				r.Verdict, r.Reason = verdictRefusedByPolicy, refused.Error()+" (after the hooks' adjustments)"
				emit(r, true)
				continue
			}
			info, err := a.Fence().SandboxInfo(res.Job)
			if err == nil {
				fenceJob := res.Job
				fenceJob.ID = ""
				err = a.Fence().CheckJob(fenceJob)
			}
			if err != nil {
				// Allowed, but the sandbox cannot be built for it: every
				// attempt would fail before the command runs.
				r.Error = files[0].at(spec, keyOf(err)) + err.Error()
				r.Verdict = "cannot_run"
			}
			r.ConfinedArgv = info.Argv
		}
		emit(r, r.Verdict != string(hooks.VerdictAllow))
	}
	if denied > 0 {
		return &exitCodeError{code: exitFailure, err: fmt.Errorf("%d of %d job(s) would be denied or could not run", denied, len(files[0].specs))}
	}
	return nil
}

func printCheck(w io.Writer, r checkResult) {
	fmt.Fprintf(w, "job %s: %s", r.Name, r.Verdict)
	if r.Reason != "" {
		fmt.Fprintf(w, " (%s)", r.Reason)
	}
	fmt.Fprintln(w)
	for _, t := range r.Trail {
		printTrailEntry(w, trailEntry{Hook: t.Hook, Mode: t.Mode, Decision: t.Decision, Reason: t.Reason, Error: t.Error,
			Enforced: t.Enforced, Duration: t.DurationUS, Changed: t.Changed, SHA256: t.SHA256})
	}
	fmt.Fprintf(w, "  mode      %s\n  argv      %s\n", r.Mode, shellJoin(r.Argv))
	if r.ConfinedArgv != nil {
		fmt.Fprintf(w, "  confined  %s\n", shellJoin(r.ConfinedArgv))
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  error     %s\n", r.Error)
	}
}

// planAsEnqueue plans files' batches as an enqueue would (queue.PlanEnqueue
// and PlanDeps), resolving `after` in a's store when it has one open and
// in an empty queue otherwise, and returns the enqueue's refusal, if any;
// names held by live jobs are not refused.
func planAsEnqueue(ctx context.Context, a *app, files []parsedFile) error {
	ps := make([]*queue.JobEnqueueParams, len(files))
	for i, f := range files {
		ps[i] = &queue.JobEnqueueParams{Specs: f.specs, Source: string(f.data), SourcePath: f.path, SourceName: f.name}
	}
	batches, err := queue.PlanEnqueue(ps)
	if err != nil {
		return err
	}
	get := func(ref string) (queue.Job, bool, error) {
		if a.store == nil {
			return queue.Job{}, false, nil
		}
		j, err := a.store.JobGet(ctx, ref)
		if errors.Is(err, queue.ErrNotFound) {
			return queue.Job{}, false, nil
		}
		return j, err == nil, err
	}
	look := queue.EnqueueLookup{
		Resolve: func(ref string) (queue.StoredJob, bool, error) {
			j, found, err := get(ref)
			return queue.StoredJob{ID: j.ID, Name: j.Name, State: j.State}, found, err
		},
		// A name held by a queued job is the queue's state, not the
		// file's: check says what the file would do, so it does not
		// refuse that (submit does, while the job is live).
		Held: func([]string) (map[string]queue.StoredJob, error) { return nil, nil },
	}
	for _, b := range batches {
		if _, err := b.PlanDeps(look); err != nil {
			return err
		}
	}
	return nil
}

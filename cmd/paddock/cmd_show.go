package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"paddock/jobspec"
	"paddock/queue"
	"paddock/runner"
)

// ShowOptions are the flags of `paddock show`.
type ShowOptions struct {
	// Source prints the job file the job came from (the whole file, as
	// submitted) instead of the job. Reading it costs as much as the file
	// is large, so show leaves it out otherwise.
	Source bool
}

// AddFlags registers the show flags.
func (o *ShowOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.Source, "source", false, "print the job file as submitted (the whole file, shared by its batch) instead of the job; --json: a job_source object")
}

func newShowCommand(gopts *GlobalOptions) *cobra.Command {
	var opts ShowOptions
	cmd := &cobra.Command{
		Use:   "show ID|NAME",
		Short: "Show a job: spec, state, every attempt with its confined argv, hook decision trail and log paths",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runShow(cmd.Context(), cmd, opts, gopts, args[0])
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

// attemptView is an attempt as `paddock show --json` prints it.
type attemptView struct {
	Number          int             `json:"number"`
	WorkerID        string          `json:"worker_id,omitempty"`
	StartedAt       time.Time       `json:"started_at"`
	EndedAt         *time.Time      `json:"ended_at,omitempty"`
	DurationSeconds float64         `json:"duration_seconds"` // so far while it runs
	Outcome         string          `json:"outcome,omitempty"`
	ExitCode        *int            `json:"exit_code,omitempty"`
	Signal          string          `json:"signal,omitempty"`
	Reason          string          `json:"reason,omitempty"`
	ConfinedArgv    []string        `json:"confined_argv,omitempty"`
	Trail           json.RawMessage `json:"hook_trail,omitempty"`
	StdoutPath      string          `json:"stdout_path,omitempty"`
	StderrPath      string          `json:"stderr_path,omitempty"`
	// PolicySHA256 is the queue's policy the attempt was claimed under;
	// "" when none was set (the defaults applied).
	PolicySHA256 string `json:"policy_sha256"`
}

// jobView is a job as `paddock show --json` prints it.
type jobView struct {
	MessageType     string        `json:"message_type"`
	ID              string        `json:"id"`
	Name            string        `json:"name"`
	State           string        `json:"state"`
	Reason          string        `json:"reason,omitempty"`
	CreatedAt       time.Time     `json:"created_at"`
	UpdatedAt       time.Time     `json:"updated_at"`
	NotBefore       *time.Time    `json:"not_before,omitempty"`
	StartedAt       *time.Time    `json:"started_at,omitempty"`  // the newest attempt's start
	FinishedAt      *time.Time    `json:"finished_at,omitempty"` // when it reached a final state
	Waiting         string        `json:"waiting,omitempty"`     // why a queued job is not claimed (queue.Waiting)
	CancelRequested bool          `json:"cancel_requested,omitempty"`
	SourcePath      string        `json:"source_path,omitempty"`
	Spec            specView      `json:"spec"`
	AttemptCount    int           `json:"attempt_count"`
	Attempts        []attemptView `json:"attempts"`
}

// specView is a job's spec as `paddock show --json` prints it: the
// queue's Spec with its durations in seconds, under keys that say so
// (timeout_seconds, backoff_seconds, missed_grace_seconds; absent when
// 0, the default). The store keeps them as Go durations, nanoseconds,
// under timeout, backoff and missed_grace; the fields below, shallower
// than the embedded ones, keep those keys out of the output.
type specView struct {
	jobspec.Spec
	Timeout            *struct{} `json:"timeout,omitempty"`
	Backoff            *struct{} `json:"backoff,omitempty"`
	MissedGrace        *struct{} `json:"missed_grace,omitempty"`
	Delay              *struct{} `json:"delay,omitempty"`
	Jitter             *struct{} `json:"jitter,omitempty"`
	TimeoutSeconds     float64   `json:"timeout_seconds,omitempty"`
	BackoffSeconds     float64   `json:"backoff_seconds,omitempty"`
	MissedGraceSeconds float64   `json:"missed_grace_seconds,omitempty"`
	DelaySeconds       float64   `json:"delay_seconds,omitempty"`
	JitterSeconds      float64   `json:"jitter_seconds,omitempty"`
}

func specViewOf(s jobspec.Spec) specView {
	return specView{Spec: s, TimeoutSeconds: s.Timeout.Seconds(), BackoffSeconds: s.Backoff.Seconds(), MissedGraceSeconds: s.MissedGrace.Seconds(),
		DelaySeconds: s.Delay.Seconds(), JitterSeconds: s.Jitter.Seconds()}
}

func viewOf(j queue.Job) jobView {
	v := jobView{MessageType: "job", ID: j.ID, Name: j.Name, State: string(j.State), Reason: j.Reason,
		CreatedAt: j.CreatedAt, UpdatedAt: j.UpdatedAt, CancelRequested: j.CancelRequested,
		SourcePath: j.SourcePath, Spec: specViewOf(j.Spec), AttemptCount: j.AttemptCount, Attempts: []attemptView{}}
	if !j.NotBefore.IsZero() && j.State == queue.StateQueued {
		nb := j.NotBefore
		v.NotBefore = &nb
	}
	if !j.StartedAt.IsZero() {
		t := j.StartedAt
		v.StartedAt = &t
	}
	if !j.FinishedAt.IsZero() {
		t := j.FinishedAt
		v.FinishedAt = &t
	}
	for _, a := range j.Attempts {
		av := attemptView{Number: a.Number, WorkerID: a.WorkerID, StartedAt: a.StartedAt, Outcome: a.Outcome,
			ExitCode: a.ExitCode, Signal: a.Signal, Reason: a.Reason, ConfinedArgv: a.ConfinedArgv,
			Trail: a.Trail, StdoutPath: a.StdoutPath, StderrPath: a.StderrPath, PolicySHA256: a.PolicySHA256}
		if len(av.Trail) == 0 || string(av.Trail) == "null" {
			av.Trail = nil
		}
		if !a.EndedAt.IsZero() {
			e := a.EndedAt
			av.EndedAt = &e
			av.DurationSeconds = e.Sub(a.StartedAt).Seconds()
		} else if !a.StartedAt.IsZero() {
			av.DurationSeconds = time.Since(a.StartedAt).Seconds() // so far, as ls shows it
		}
		v.Attempts = append(v.Attempts, av)
	}
	return v
}

func runShow(ctx context.Context, cmd *cobra.Command, opts ShowOptions, gopts *GlobalOptions, ref string) error {
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	j, err := a.getJob(ctx, ref)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if opts.Source {
		src, err := a.store.JobSourceGet(ctx, j.ID)
		if err != nil {
			return err
		}
		if gopts.JSON {
			return writeJSON(out, map[string]string{"message_type": "job_source", "id": j.ID, "source_path": j.SourcePath, "source": src})
		}
		_, err = io.WriteString(out, src)
		return err
	}
	v := viewOf(j)
	waiting, err := waitingOf(ctx, a.store, []queue.Job{j})
	if err != nil {
		return err
	}
	v.Waiting = waiting[j.ID]
	if gopts.JSON {
		return writeJSON(out, v)
	}
	printShow(out, v)
	return nil
}

// trailEntry mirrors the fields of a hook trail entry that show prints.
type trailEntry struct {
	Hook     string   `json:"hook"`
	Mode     string   `json:"mode"`
	Decision string   `json:"decision"`
	Reason   string   `json:"reason"`
	Error    string   `json:"error"`
	Enforced bool     `json:"enforced"`
	Duration int64    `json:"duration_us"`
	Changed  []string `json:"changed"`
	SHA256   string   `json:"sha256"`
}

// printTrailEntry prints one hook decision as show and check do.
func printTrailEntry(w io.Writer, t trailEntry) {
	enf := ""
	if !t.Enforced {
		enf = " (not enforced)"
	}
	fmt.Fprintf(w, "  hook     %s [%s] %s%s  %dµs", t.Hook, t.Mode, t.Decision, enf, t.Duration)
	if t.Reason != "" {
		fmt.Fprintf(w, "  %q", t.Reason)
	}
	if t.Error != "" {
		fmt.Fprintf(w, "  error: %s", t.Error)
	}
	if len(t.Changed) > 0 {
		fmt.Fprintf(w, "  changed: %s", strings.Join(t.Changed, ","))
	}
	fmt.Fprintln(w)
}

// printSpec prints the keys of a spec that are set (command and mode
// always), one a line, in the job file's words.
func printSpec(w io.Writer, s jobspec.Spec) {
	line := func(key, value string) { fmt.Fprintf(w, "%-9s %s\n", key, value) }
	pairs := func(m map[string]string) string {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(m)) {
			kv = append(kv, shellQuote(k+"="+m[k]))
		}
		return strings.Join(kv, " ")
	}
	line("command", shellJoin(s.Command))
	line("mode", cmp.Or(s.Mode, "(config default)"))
	for _, f := range []struct {
		key, value string
	}{
		{"cwd", s.Cwd},
		{"workspace", s.Workspace},
		{"writable", shellJoin(s.Writable)},
		{"env", pairs(s.Env)},
		{"labels", pairs(s.Labels)},
		{"hooks", strings.Join(s.Hooks, ", ")},
		{"after", strings.Join(s.After, ", ")},
		{"group", s.Group},
	} {
		if f.value != "" {
			line(f.key, f.value)
		}
	}
	if s.Network != nil {
		line("network", strconv.FormatBool(*s.Network))
	}
	if s.Timeout > 0 {
		line("timeout", s.Timeout.String())
	}
	if s.Retries > 0 {
		line("retries", strconv.Itoa(s.Retries))
	}
	if s.Backoff > 0 {
		line("backoff", s.Backoff.String())
	}
	if s.Priority != 0 {
		line("priority", strconv.Itoa(s.Priority))
	}
	if !s.RunAt.IsZero() {
		line("run_at", s.RunAt.Format(time.RFC3339))
	}
	if s.Delay > 0 {
		line("delay", s.Delay.String())
	}
	if s.Jitter > 0 {
		line("jitter", s.Jitter.String())
	}
}

func printShow(w io.Writer, v jobView) {
	fmt.Fprintf(w, "job       %s  %s\n", v.ID, v.Name)
	fmt.Fprintf(w, "state     %s\n", v.State)
	if v.Reason != "" {
		fmt.Fprintf(w, "reason    %s\n", v.Reason)
	}
	if v.CancelRequested {
		fmt.Fprintf(w, "cancel    requested\n")
	}
	if v.Waiting != "" {
		fmt.Fprintf(w, "waiting   %s\n", v.Waiting)
	}
	fmt.Fprintf(w, "created   %s\n", v.CreatedAt.Format(time.RFC3339))
	if v.NotBefore != nil {
		fmt.Fprintf(w, "not before %s\n", v.NotBefore.Format(time.RFC3339))
	}
	if v.StartedAt != nil {
		fmt.Fprintf(w, "started   %s\n", v.StartedAt.Format(time.RFC3339))
	}
	if v.FinishedAt != nil {
		fmt.Fprintf(w, "finished  %s\n", v.FinishedAt.Format(time.RFC3339))
	}
	if v.SourcePath != "" {
		fmt.Fprintf(w, "file      %s\n", v.SourcePath)
	}
	printSpec(w, v.Spec.Spec)
	for _, at := range v.Attempts {
		outcome := at.Outcome
		if outcome == "" && at.EndedAt == nil {
			outcome = "running"
		}
		fmt.Fprintf(w, "\nattempt %d  %s", at.Number, outcome)
		if at.ExitCode != nil {
			fmt.Fprintf(w, "  exit=%d", *at.ExitCode)
		}
		if at.Signal != "" {
			fmt.Fprintf(w, "  signal=%s", at.Signal)
		}
		fmt.Fprintf(w, "  %.3fs  started %s", at.DurationSeconds, at.StartedAt.Format(time.RFC3339))
		if at.WorkerID != "" {
			fmt.Fprintf(w, "  by %s", at.WorkerID)
		}
		fmt.Fprintln(w)
		if at.Reason != "" {
			fmt.Fprintf(w, "  reason   %s\n", at.Reason)
		}
		fmt.Fprintf(w, "  policy   %s\n", cmp.Or(at.PolicySHA256, "defaults (no policy set)"))
		var trail []trailEntry
		if len(at.Trail) > 0 && json.Unmarshal(at.Trail, &trail) == nil {
			for _, t := range trail {
				printTrailEntry(w, t)
			}
		}
		if len(at.ConfinedArgv) > 0 {
			fmt.Fprintf(w, "  argv     %s\n", shellJoin(at.ConfinedArgv))
		}
		for _, l := range []struct{ name, path string }{{"stdout", at.StdoutPath}, {"stderr", at.StderrPath}} {
			if l.path == "" {
				continue
			}
			if _, err := os.Stat(l.path); err != nil {
				if at.WorkerID != "" && !runner.WorkerOnThisHost(at.WorkerID) {
					// Another host's file: a store shared by hosts keeps a
					// copy, which logs reads.
					fmt.Fprintf(w, "  %s   (not on this host: it ran on %s; paddock logs reads the store's copy)\n", l.name, strings.SplitN(at.WorkerID, ":", 2)[0])
					continue
				}
				fmt.Fprintf(w, "  %s   (none: nothing written)\n", l.name)
				continue
			}
			fmt.Fprintf(w, "  %s   %s\n", l.name, l.path)
		}
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"paddock/jobspec"
	"paddock/queue"
)

// SchedulesOptions are the flags of `paddock schedules`.
type SchedulesOptions struct {
	// Name filters by a shell glob on the schedule name; "" lists all.
	Name string
}

// AddFlags registers the schedules flags.
func (o *SchedulesOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Name, "name", "", "only schedules whose name matches this glob (path.Match syntax)")
}

func newSchedulesCommand(gopts *GlobalOptions) *cobra.Command {
	var opts SchedulesOptions
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "List schedules: expression, time zone, next run, last run and its state",
		Long: `List schedules, by name: the expression, the time zone, the next run
(or "paused"), the last run (the tick of the newest instance), that
instance's state, and the newest decision of the scheduler.

A job-file entry with a schedule key is a schedule; paddock submit stores
it and every worker enqueues one instance per tick, an ordinary job named
NAME-<tick> with the label schedule=NAME (paddock ls --label schedule=NAME).
See docs/job-files.md, "Schedules".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSchedules(cmd.Context(), cmd, opts, gopts)
		},
	}
	opts.AddFlags(cmd)
	cmd.AddCommand(
		newSchedulesStateCommand(gopts, "pause", "Pause a schedule: no tick is decided until it is resumed"),
		newSchedulesStateCommand(gopts, "resume", "Resume a paused schedule from its next tick (the paused ticks are not caught up)"),
		newSchedulesStateCommand(gopts, "rm", "Delete a schedule and its decision log; its instances stay as ordinary jobs"),
		newSchedulesNextCommand(gopts),
		newSchedulesLogCommand(gopts),
		newSchedulesRunCommand(gopts),
	)
	return cmd
}

// scheduleRow is one schedule as `paddock schedules` prints it.
type scheduleRow struct {
	MessageType        string  `json:"message_type"`
	Name               string  `json:"name"`
	Expression         string  `json:"expression"`
	Timezone           string  `json:"timezone"`
	Paused             bool    `json:"paused"`
	NextRun            string  `json:"next_run,omitempty"` // RFC 3339 in the schedule's zone; "" while paused
	LastRun            string  `json:"last_run,omitempty"` // tick of the newest instance
	LastJobID          string  `json:"last_job_id,omitempty"`
	LastJobState       string  `json:"last_job_state,omitempty"`
	LastDecision       string  `json:"last_decision,omitempty"`
	LastDecisionDetail string  `json:"last_decision_detail,omitempty"`
	Overlap            string  `json:"overlap"`
	Missed             string  `json:"missed"`
	MissedGraceSeconds int64   `json:"missed_grace_seconds"`
	JitterSeconds      float64 `json:"jitter_seconds,omitempty"` // the most each instance waits after its tick
	SourcePath         string  `json:"source_path,omitempty"`
}

func scheduleRowOf(s queue.Schedule, messageType string) scheduleRow {
	r := scheduleRow{MessageType: messageType, Name: s.Name, Expression: s.Spec.Schedule, Timezone: s.Location().String(),
		Paused: s.Paused, LastJobID: s.LastJobID, LastJobState: string(s.LastJobState), SourcePath: s.SourcePath,
		Overlap: s.Spec.Overlap, Missed: s.Spec.Missed, MissedGraceSeconds: int64(s.Spec.MissedGrace / time.Second), JitterSeconds: s.Spec.Jitter.Seconds()}
	if r.Overlap == "" {
		r.Overlap = jobspec.OverlapSkip
	}
	if r.Missed == "" {
		r.Missed = jobspec.MissedRunOnce
	}
	if r.MissedGraceSeconds == 0 {
		r.MissedGraceSeconds = int64(jobspec.MissedGraceDefault / time.Second)
	}
	if !s.NextRun.IsZero() {
		r.NextRun = s.NextRun.Format(time.RFC3339)
	}
	if !s.LastRun.IsZero() {
		r.LastRun = s.LastRun.Format(time.RFC3339)
	}
	if s.LastJobID != "" && r.LastJobState == "" {
		r.LastJobState = "pruned"
	}
	if d := s.LastDecision; d != nil {
		r.LastDecision, r.LastDecisionDetail = d.Decision, d.Detail
	}
	return r
}

func runSchedules(ctx context.Context, cmd *cobra.Command, opts SchedulesOptions, gopts *GlobalOptions) error {
	if err := checkNameGlob(opts.Name); err != nil { // cmd_ls.go
		return err
	}
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	list, err := a.store.ScheduleList(ctx, &queue.ScheduleListParams{NameGlob: opts.Name})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if gopts.JSON {
		for _, s := range list {
			writeJSON(out, scheduleRowOf(s, "schedule"))
		}
		return nil
	}
	rows := [][]string{{"NAME", "SCHEDULE", "TIMEZONE", "NEXT RUN", "LAST RUN", "LAST STATE", "LAST DECISION"}}
	for _, s := range list {
		r := scheduleRowOf(s, "")
		next := r.NextRun
		if r.Paused {
			next = "paused"
		}
		rows = append(rows, []string{r.Name, r.Expression, r.Timezone, next, dash(r.LastRun), dash(r.LastJobState), dash(r.LastDecision)})
	}
	printTable(out, rows)
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// scheduleError turns "no such schedule" into a usage error (exit 2).
func scheduleError(name string, err error) error {
	if errors.Is(err, queue.ErrScheduleNotFound) {
		return usagef("no schedule %q (paddock schedules lists them)", name)
	}
	return err
}

func newSchedulesStateCommand(gopts *GlobalOptions, verb, short string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSchedulesState(cmd.Context(), cmd, gopts, verb, args[0])
		},
	}
}

func runSchedulesState(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, verb, name string) error {
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	out := cmd.OutOrStdout()
	var s queue.Schedule
	switch verb {
	case "pause":
		s, err = a.store.SchedulePause(ctx, name)
	case "resume":
		s, err = a.store.ScheduleResume(ctx, name)
	case "rm":
		if err := a.store.ScheduleDelete(ctx, name); err != nil {
			return scheduleError(name, err)
		}
		if gopts.JSON {
			writeJSON(out, map[string]any{"message_type": "schedule_removed", "name": name})
		} else {
			fmt.Fprintf(out, "%s\tremoved\n", name)
		}
		return nil
	}
	if err != nil {
		return scheduleError(name, err)
	}
	r := scheduleRowOf(s, "schedule")
	if gopts.JSON {
		writeJSON(out, r)
		return nil
	}
	if r.Paused {
		fmt.Fprintf(out, "%s\tpaused\n", r.Name)
	} else {
		fmt.Fprintf(out, "%s\tnext run %s\n", r.Name, r.NextRun)
	}
	return nil
}

// SchedulesNextOptions are the flags of `paddock schedules next`.
type SchedulesNextOptions struct {
	// Count is how many runs to show, 1 to 1000. Defaults to 5.
	Count int
	// From is an RFC 3339 time; runs strictly after it are shown. "" = now.
	From string
}

// AddFlags registers the flags.
func (o *SchedulesNextOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().IntVarP(&o.Count, "count", "n", 5, "how many runs (1 to 1000)")
	cmd.Flags().StringVar(&o.From, "from", "", "show runs after this RFC 3339 time, e.g. 2026-11-01T00:00:00-04:00 (default: now)")
}

func newSchedulesNextCommand(gopts *GlobalOptions) *cobra.Command {
	var opts SchedulesNextOptions
	cmd := &cobra.Command{
		Use:   "next NAME",
		Short: "Show a schedule's upcoming runs (RFC 3339 times in its zone; --json: an array of strings)",
		Long: `Show a schedule's upcoming runs, one RFC 3339 time with its offset per
line, in the schedule's time zone, with the daylight-saving rules the
scheduler applies. With --json, one JSON array of strings.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSchedulesNext(cmd.Context(), cmd, opts, gopts, args[0])
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func runSchedulesNext(ctx context.Context, cmd *cobra.Command, opts SchedulesNextOptions, gopts *GlobalOptions, name string) error {
	if opts.Count < 1 || opts.Count > 1000 {
		return usagef("--count %d: want 1 to 1000", opts.Count)
	}
	from := time.Now()
	if opts.From != "" {
		t, err := time.Parse(time.RFC3339, opts.From)
		if err != nil {
			return usagef("--from %q: want an RFC 3339 time with an offset, e.g. 2026-11-01T00:30:00-04:00", opts.From)
		}
		from = t
	}
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	s, err := a.store.ScheduleGet(ctx, name)
	if err != nil {
		return scheduleError(name, err)
	}
	times, err := nextRuns(s, from, opts.Count)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if gopts.JSON {
		return writeJSON(out, times)
	}
	for _, t := range times {
		fmt.Fprintln(out, t)
	}
	return nil
}

// nextRuns returns the count ticks of s after from, RFC 3339 in its zone.
func nextRuns(s queue.Schedule, from time.Time, count int) ([]string, error) {
	c, err := jobspec.ParseCron(s.Spec.Schedule)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: %w", s.Name, err)
	}
	loc := s.Location()
	times := make([]string, 0, count)
	for at := from; len(times) < count; {
		at = c.Next(at, loc)
		if at.IsZero() {
			break
		}
		times = append(times, at.In(loc).Format(time.RFC3339))
	}
	return times, nil
}

// SchedulesLogOptions are the flags of `paddock schedules log`.
type SchedulesLogOptions struct {
	// Limit is how many decisions, newest first. Defaults to 20.
	Limit int
}

// AddFlags registers the flags.
func (o *SchedulesLogOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().IntVar(&o.Limit, "limit", 20, "at most N decisions, newest first")
}

func newSchedulesLogCommand(gopts *GlobalOptions) *cobra.Command {
	var opts SchedulesLogOptions
	cmd := &cobra.Command{
		Use:   "log [NAME]",
		Short: "Show the scheduler's decisions (fired, caught_up, missed, skipped_overlap, deferred), newest first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return runSchedulesLog(cmd.Context(), cmd, opts, gopts, name)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

// decisionRow is one decision as `paddock schedules log --json` prints it.
type decisionRow struct {
	MessageType string `json:"message_type"`
	Schedule    string `json:"schedule"`
	Tick        string `json:"tick"`
	Decision    string `json:"decision"`
	Count       int    `json:"count"`
	JobID       string `json:"job_id,omitempty"`
	At          string `json:"at"`
	WorkerID    string `json:"worker_id,omitempty"`
	Detail      string `json:"detail,omitempty"`
}

func runSchedulesLog(ctx context.Context, cmd *cobra.Command, opts SchedulesLogOptions, gopts *GlobalOptions, name string) error {
	if opts.Limit < 1 {
		return usagef("--limit %d: want 1 or more", opts.Limit)
	}
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	loc := map[string]*time.Location{}
	if name != "" {
		s, err := a.store.ScheduleGet(ctx, name)
		if err != nil {
			return scheduleError(name, err)
		}
		loc[name] = s.Location()
	}
	ds, err := a.store.ScheduleDecisionList(ctx, &queue.ScheduleDecisionListParams{Schedule: name, Limit: opts.Limit})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	rows := [][]string{{"AT", "SCHEDULE", "TICK", "DECISION", "JOB", "DETAIL"}}
	for _, d := range ds {
		l, ok := loc[d.Schedule]
		if !ok {
			l = time.UTC
			if s, err := a.store.ScheduleGet(ctx, d.Schedule); err == nil {
				l = s.Location()
			}
			loc[d.Schedule] = l
		}
		r := decisionRow{MessageType: "schedule_decision", Schedule: d.Schedule, Tick: d.Tick.In(l).Format(time.RFC3339), Decision: d.Decision,
			Count: d.Count, JobID: d.JobID, At: d.At.In(l).Format(time.RFC3339), WorkerID: d.WorkerID, Detail: d.Detail}
		if gopts.JSON {
			writeJSON(out, r)
			continue
		}
		rows = append(rows, []string{r.At, r.Schedule, r.Tick, r.Decision, dash(r.JobID), oneLine(r.Detail, 100)})
	}
	if !gopts.JSON {
		printTable(out, rows)
	}
	return nil
}

// reportSubmittedSchedules tells what submit did with the schedules of one
// file: a "schedule_submitted" JSON object on out under --json, else a
// line on stderr (stdout keeps one ID<TAB>NAME line per job for scripts).
func reportSubmittedSchedules(ctx context.Context, a *app, specs []jobspec.Spec, file string, out io.Writer, asJSON bool) {
	for _, sp := range specs {
		if sp.Schedule == "" {
			continue
		}
		s, err := a.store.ScheduleGet(ctx, sp.Name)
		if err != nil {
			continue
		}
		r := scheduleRowOf(s, "schedule_submitted")
		r.SourcePath = file
		if asJSON {
			writeJSON(out, r)
			continue
		}
		next := "next run " + r.NextRun
		if r.Paused {
			next = "paused"
		}
		fmt.Fprintf(os.Stderr, "paddock: schedule %s (%s, %s): %s\n", r.Name, termSafe(r.Expression), r.Timezone, next)
	}
}

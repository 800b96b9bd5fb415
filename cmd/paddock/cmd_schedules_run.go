package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"paddock/queue"
	"paddock/runner"
)

func newSchedulesRunCommand(gopts *GlobalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "run NAME",
		Short: "Enqueue one instance of a schedule now (recorded as manual; subject to its overlap)",
		Long: `Enqueue one instance of a schedule now, as a tick would, without
waiting for its next tick and without moving it. The decision is
recorded as "manual" in the schedule's log. The schedule's overlap
applies: with overlap = "skip" or "queue" and an instance still queued
or running, nothing is enqueued, "skipped_overlap" is recorded, and the
command exits 1. A paused schedule can be run this way. The instance
starts at once: the schedule's jitter does not apply.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSchedulesRun(cmd.Context(), cmd, gopts, args[0])
		},
	}
}

// scheduleRunView is what `paddock schedules run --json` prints.
type scheduleRunView struct {
	MessageType string `json:"message_type"` // "schedule_run"
	Schedule    string `json:"schedule"`
	Decision    string `json:"decision"` // manual | skipped_overlap
	Detail      string `json:"detail"`
	Tick        string `json:"tick"`             // RFC 3339, UTC
	JobID       string `json:"job_id,omitempty"` // the instance; "" when skipped
	JobName     string `json:"job_name,omitempty"`
}

func runSchedulesRun(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, name string) error {
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	res, err := a.store.ScheduleRun(ctx, &queue.ScheduleRunParams{Name: name, WorkerID: "cli"})
	if err != nil {
		return scheduleError(name, err)
	}
	v := scheduleRunView{MessageType: "schedule_run", Schedule: name, Decision: res.Decision.Decision, Detail: res.Decision.Detail,
		Tick: res.Decision.Tick.UTC().Format(time.RFC3339)}
	if res.Job != nil {
		v.JobID, v.JobName = res.Job.ID, res.Job.Name
		_ = runner.Wake(a.StateDir)
	}
	out := cmd.OutOrStdout()
	if gopts.JSON {
		writeJSON(out, v)
	} else if res.Job != nil {
		fmt.Fprintf(out, "%s\t%s\tenqueued (manual run of %s)\n", v.JobID, v.JobName, name)
	} else {
		fmt.Fprintf(out, "%s\t%s\n", name, v.Detail)
	}
	if res.Job == nil {
		return &exitCodeError{code: exitFailure}
	}
	return nil
}

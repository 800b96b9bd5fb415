package main

import (
	"context"

	"github.com/spf13/cobra"

	"paddock/queue"
)

func newCancelCommand(gopts *GlobalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID|NAME...",
		Short: "Cancel jobs: a queued job never starts; a running one is stopped by its worker",
		Long: `Cancel jobs. A queued job becomes canceled and never starts. A running
job is flagged; its worker sees the flag at its next heartbeat (lease/3,
10 s by default) and stops the job's whole process tree (SIGTERM, then
SIGKILL after kill_grace). Canceling a job that is canceled already does
nothing (exit 0); canceling one that succeeded, failed or was denied is an
error (exit 1), as is a name or id that names no job (exit 2).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCancel(cmd.Context(), cmd, gopts, args)
		},
	}
}

func runCancel(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, refs []string) error {
	return eachJob(ctx, cmd, gopts, refs, "cancel", "canceled", func(a *app, ref string) (queue.Job, error) {
		return a.store.JobCancel(ctx, ref)
	})
}

package main

import (
	"context"

	"github.com/spf13/cobra"

	"paddock/queue"
)

func newRetryCommand(gopts *GlobalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "retry ID|NAME...",
		Short: "Queue final jobs (failed, denied, canceled) to run again",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRetry(cmd.Context(), cmd, gopts, args)
		},
	}
}

func runRetry(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, refs []string) error {
	return eachJob(ctx, cmd, gopts, refs, "retry", "retried", func(a *app, ref string) (queue.Job, error) {
		return a.store.JobRetry(ctx, ref)
	})
}

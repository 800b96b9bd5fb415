package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"
)

// WaitOptions are the flags of `paddock wait`.
type WaitOptions struct {
	// Timeout gives up after this long; 0 waits forever.
	Timeout time.Duration
}

func newWaitCommand(gopts *GlobalOptions) *cobra.Command {
	var opts WaitOptions
	cmd := &cobra.Command{
		Use:   "wait ID|NAME...",
		Short: "Wait until jobs are final; exit 1 if any did not succeed",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runWait(cmd.Context(), cmd, opts, gopts, args)
		},
	}
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", 0, "give up after this long (exit 1); 0 waits forever")
	return cmd
}

func runWait(ctx context.Context, cmd *cobra.Command, opts WaitOptions, gopts *GlobalOptions, refs []string) error {
	if err := checkWaitTimeout(opts.Timeout); err != nil {
		return err
	}
	a, err := openApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	ids := make([]string, 0, len(refs))
	for _, r := range refs {
		j, err := a.getJob(ctx, r)
		if err != nil {
			return err
		}
		ids = append(ids, j.ID)
	}
	return waitJobs(ctx, a, ids, opts.Timeout, cmd.OutOrStdout(), gopts.JSON)
}

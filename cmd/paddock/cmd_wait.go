package main

import (
	"context"
	"time"

	"github.com/spf13/cobra"

	"paddock/queue"
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
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	ids, err := resolveRefs(ctx, a, refs)
	if err != nil {
		return err
	}
	return waitJobs(ctx, a, ids, opts.Timeout, cmd.OutOrStdout(), gopts.JSON)
}

// resolveRefs returns the job id of each ref, in order: the refs that are
// ids in one query (a script's `paddock wait $(cat ids)` of thousands of
// them once took a query, with the batch's source text, per ref), the
// others (names) one by one. An unknown ref is a usage error.
func resolveRefs(ctx context.Context, a *app, refs []string) ([]string, error) {
	if len(refs) == 0 {
		return nil, nil // (an empty IDs would list every job)
	}
	known, err := a.store.JobList(ctx, &queue.JobListParams{IDs: refs})
	if err != nil {
		return nil, err
	}
	isID := make(map[string]bool, len(known))
	for _, j := range known {
		isID[j.ID] = true
	}
	ids := make([]string, 0, len(refs))
	for _, r := range refs {
		if isID[r] {
			ids = append(ids, r)
			continue
		}
		j, err := a.getJob(ctx, r)
		if err != nil {
			return nil, err
		}
		ids = append(ids, j.ID)
	}
	return ids, nil
}

package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"paddock/runner"
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
	a, err := openApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	var failed int
	for _, r := range refs {
		j, err := a.store.JobRetry(ctx, r)
		if err != nil {
			failed++
			printError(gopts, fmt.Errorf("retry %s: %w", r, err))
			continue
		}
		printJobLine(cmd.OutOrStdout(), j, gopts.JSON, "retried")
	}
	_ = runner.Wake(a.stateDir)
	if failed > 0 {
		return &exitCodeError{code: exitFailure}
	}
	return nil
}

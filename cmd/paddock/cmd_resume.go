package main

import "github.com/spf13/cobra"

func newResumeCommand(gopts *GlobalOptions) *cobra.Command {
	var opts PauseOptions // cmd_pause.go
	cmd := &cobra.Command{
		Use:   "resume",
		Short: "Resume claiming jobs from the queue, or from one group (--group)",
		Long: `Undo paddock pause: workers claim jobs of the whole queue again, or with
--group NAME of that group. Resuming what is not paused changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPause(cmd.Context(), cmd, opts, gopts, false)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

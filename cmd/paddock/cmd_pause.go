package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"paddock/queue"
	"paddock/runner"
)

// PauseOptions are the flags of `paddock pause` and `paddock resume`.
type PauseOptions struct {
	// Group names one group to pause or resume; "" = the whole queue.
	Group string
}

// AddFlags registers the flags.
func (o *PauseOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.Group, "group", "", "only this group (default: the whole queue)")
}

func newPauseCommand(gopts *GlobalOptions) *cobra.Command {
	var opts PauseOptions
	cmd := &cobra.Command{
		Use:   "pause",
		Short: "Stop claiming jobs from the queue, or from one group (--group); running jobs go on",
		Long: `Stop every worker sharing the queue from claiming jobs: of the whole queue,
or with --group NAME of that group only. Running jobs go on; jobs can
still be submitted. The pause is stored in the queue; paddock resume
undoes it. A worker --drain on a paused queue says so and exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPause(cmd.Context(), cmd, opts, gopts, true)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

// pauseView is what `paddock pause --json` and `paddock resume --json` print.
type pauseView struct {
	MessageType string     `json:"message_type"` // "queue" or "group"
	Group       string     `json:"group,omitempty"`
	Paused      bool       `json:"paused"`
	PausedAt    *time.Time `json:"paused_at,omitempty"` // the whole queue only
}

func runPause(ctx context.Context, cmd *cobra.Command, opts PauseOptions, gopts *GlobalOptions, pause bool) error {
	// --group "" (an unset $GROUP) must not stop the whole queue.
	if cmd.Flags().Changed("group") && opts.Group == "" {
		return usagef("--group: empty group name (leave --group out to pause or resume the whole queue)")
	}
	a, err := openApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	defer a.warnCreated(cmd, gopts, "queue_warning")
	p := &queue.QueuePauseParams{Group: opts.Group}
	// A group is paused before its first job arrives as well (the pause
	// is stored by name), but a typo pauses nothing anyone meant: say so.
	idle := false
	if pause && opts.Group != "" && p.Check() == nil {
		gs, err := a.store.GroupList(ctx, &queue.GroupListParams{Names: []string{opts.Group}})
		if err != nil {
			return err
		}
		g := gs[0]
		idle = g.Limit == 0 && !g.Paused && g.Running == 0 && g.Queued == 0
	}
	if pause {
		err = a.store.QueuePause(ctx, p)
	} else {
		err = a.store.QueueResume(ctx, p)
	}
	if errors.Is(err, queue.ErrInvalid) {
		return usagef("--group: %v", err)
	}
	if err != nil {
		return err
	}
	if idle {
		fmt.Fprintf(cmd.ErrOrStderr(), "paddock: pause: group %s has no queued or running job and no limit; paused anyway, for the jobs that will name it (paddock resume --group %s undoes it)\n", opts.Group, opts.Group)
	}
	if !pause {
		_ = runner.Wake(a.StateDir)
	}
	v := pauseView{MessageType: "queue", Paused: pause}
	if opts.Group != "" {
		v.MessageType, v.Group = "group", opts.Group
	} else if pause {
		q, err := a.store.QueueGet(ctx)
		if err != nil {
			return err
		}
		v.PausedAt = &q.PausedAt
	}
	out := cmd.OutOrStdout()
	if gopts.JSON {
		writeJSON(out, v)
		return nil
	}
	what, state := "queue", "resumed"
	if opts.Group != "" {
		what = "group " + opts.Group
	}
	if pause {
		state = "paused: nothing new is claimed; running jobs go on"
	}
	fmt.Fprintf(out, "%s %s\n", what, state)
	return nil
}

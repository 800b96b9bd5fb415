package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"paddock/queue"
	"paddock/runner"
)

func newGroupsCommand(gopts *GlobalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "List job groups: limit, paused, running and queued jobs",
		Long: `List job groups, by name: every group with a limit or a pause, and every
group with queued or running jobs. A job joins a group with the job-file
key group = "NAME". A group's limit is stored in the queue, so every
worker and host sharing it honours it: at most LIMIT of the group's jobs
run at once (1 makes them mutually exclusive). A group without a limit
is unlimited.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGroups(cmd.Context(), cmd, gopts)
		},
	}
	cmd.AddCommand(newGroupsSetCommand(gopts), newGroupsUnsetCommand(gopts))
	return cmd
}

// groupRow is one group as `paddock groups` prints it.
type groupRow struct {
	MessageType string `json:"message_type"` // "group"
	Name        string `json:"name"`
	Limit       int    `json:"limit"` // 0 = unlimited
	Paused      bool   `json:"paused"`
	Running     int    `json:"running"`
	Queued      int    `json:"queued"`
}

func groupRowOf(g queue.Group) groupRow {
	return groupRow{MessageType: "group", Name: g.Name, Limit: g.Limit, Paused: g.Paused, Running: g.Running, Queued: g.Queued}
}

func runGroups(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions) error {
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	gs, err := a.store.GroupList(ctx, &queue.GroupListParams{})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if gopts.JSON {
		for _, g := range gs {
			writeJSON(out, groupRowOf(g))
		}
		return nil
	}
	rows := [][]string{{"GROUP", "LIMIT", "PAUSED", "RUNNING", "QUEUED"}}
	for _, g := range gs {
		limit := "-"
		if g.Limit > 0 {
			limit = strconv.Itoa(g.Limit)
		}
		paused := "no"
		if g.Paused {
			paused = "yes"
		}
		rows = append(rows, []string{g.Name, limit, paused, strconv.Itoa(g.Running), strconv.Itoa(g.Queued)})
	}
	printTable(out, rows)
	return nil
}

func newGroupsSetCommand(gopts *GlobalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "set NAME LIMIT",
		Short: "Let at most LIMIT jobs of group NAME run at once (1 = one at a time), on every worker",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 1 || n > queue.MaxGroupLimit {
				return usagef("limit %q: want a whole number from 1 to %d (paddock groups unset %s removes the limit)", args[1], queue.MaxGroupLimit, args[0])
			}
			return runGroupsSet(cmd.Context(), cmd, gopts, args[0], n)
		},
	}
}

func newGroupsUnsetCommand(gopts *GlobalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "unset NAME",
		Short: "Remove group NAME's limit: its jobs run as workers have room",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runGroupsSet(cmd.Context(), cmd, gopts, args[0], 0)
		},
	}
}

func runGroupsSet(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, name string, limit int) error {
	a, err := openApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	defer a.warnCreated(cmd, gopts, "queue_warning")
	g, err := a.store.GroupLimitSet(ctx, &queue.GroupLimitSetParams{Name: name, Limit: limit})
	if errors.Is(err, queue.ErrInvalid) {
		return usagef("%v", err)
	}
	if errors.Is(err, queue.ErrGroupNotFound) {
		return usagef("group %q has no limit to unset (paddock groups lists the groups and their limits)", name)
	}
	if err != nil {
		return err
	}
	_ = runner.Wake(a.StateDir) // a raised or removed limit frees slots
	out := cmd.OutOrStdout()
	if gopts.JSON {
		writeJSON(out, groupRowOf(g))
		return nil
	}
	if g.Limit == 0 {
		fmt.Fprintf(out, "%s\tunlimited\trunning=%d queued=%d\n", g.Name, g.Running, g.Queued)
	} else {
		fmt.Fprintf(out, "%s\tlimit %d\trunning=%d queued=%d\n", g.Name, g.Limit, g.Running, g.Queued)
	}
	return nil
}

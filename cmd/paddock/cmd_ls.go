package main

import (
	"bufio"
	"context"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"paddock/internal/suggest"
	"paddock/queue"
)

// LsOptions are the flags of `paddock ls`.
type LsOptions struct {
	States []string
	Labels []string
	Name   string
	Limit  int
}

// AddFlags registers the ls flags.
func (o *LsOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringSliceVar(&o.States, "state", nil, "only jobs in these states (repeat or comma-separate): "+statesList())
	f.StringArrayVar(&o.Labels, "label", nil, "only jobs with label K=V (repeatable; all must match)")
	f.StringVar(&o.Name, "name", "", "only jobs whose name matches this glob (path.Match syntax)")
	f.IntVar(&o.Limit, "limit", 50, "at most N jobs, newest first; 0 lists all")
}

func statesList() string {
	var s []string
	for _, st := range queue.JobStates() {
		s = append(s, string(st))
	}
	return strings.Join(s, ", ")
}

func newLsCommand(gopts *GlobalOptions) *cobra.Command {
	var opts LsOptions
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLs(cmd.Context(), cmd, opts, gopts)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func runLs(ctx context.Context, cmd *cobra.Command, opts LsOptions, gopts *GlobalOptions) error {
	p := &queue.JobListParams{NameGlob: opts.Name, Limit: opts.Limit, WithAttempts: true}
	if opts.Limit < 0 {
		return usagef("--limit %d: must be 0 (all) or more", opts.Limit)
	}
	if err := checkNameGlob(opts.Name); err != nil {
		return err
	}
	valid := map[string]bool{}
	for _, st := range queue.JobStates() {
		valid[string(st)] = true
	}
	for _, s := range opts.States {
		if !valid[s] {
			var names []string
			for _, st := range queue.JobStates() {
				names = append(names, string(st))
			}
			return usagef("--state %q: want one of %s%s", s, statesList(), suggest.DidYouMean(s, names))
		}
		p.States = append(p.States, queue.JobState(s))
	}
	if len(opts.Labels) > 0 {
		p.Labels = map[string]string{}
		for _, kv := range opts.Labels {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return usagef("--label %q: want KEY=VALUE", kv)
			}
			p.Labels[k] = v
		}
	}
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	jobs, err := a.store.JobList(ctx, p)
	if err != nil {
		return err
	}
	waiting, err := waitingOf(ctx, a.store, jobs)
	if err != nil {
		return err
	}
	// One write per 64 KiB, not per job: ls --limit 0 of 100,000 jobs.
	out := bufio.NewWriterSize(cmd.OutOrStdout(), 64<<10)
	if gopts.JSON {
		for _, j := range jobs {
			r := rowOf(j, "job")
			r.Waiting = waiting[j.ID]
			writeJSON(out, r)
		}
	} else {
		printJobTable(out, jobs, waiting)
	}
	return out.Flush()
}

// checkNameGlob refuses a malformed --name glob (an unclosed "[", a
// trailing "\"), which would otherwise match nothing and exit 0.
func checkNameGlob(glob string) error {
	if _, err := path.Match(glob, ""); err != nil {
		return usagef("--name %q: %v", glob, err)
	}
	return nil
}

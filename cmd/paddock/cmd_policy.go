package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"paddock/hooks"
	"paddock/internal/filekind"
	"paddock/queue"
	"paddock/runner"
	"paddock/sandbox"
)

func newPolicyCommand(gopts *GlobalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "policy",
		Short: "Set or show the queue's policy: ceilings, hidden and protected paths, the hook chain",
		Long: `The queue's policy binds every process that runs its jobs (worker, run,
the inbox through the worker): the widest mode a job may run in
(max_mode), whether jobs may ask for the network (allow_network), where
workspaces and writable paths may be (workspace_roots), whether jobs may
ask for Unix sockets (unix_sockets), the paths hidden from every job
(hide), the sub-paths kept read-only inside writable roots (protect), and
the hook chain ([[hook]] tables, each module pinned by sha256). A queue
with no policy set enforces the defaults; see docs/policy.md.`,
	}
	c.AddCommand(newPolicySetCommand(gopts), newPolicyShowCommand(gopts))
	return c
}

func newPolicySetCommand(gopts *GlobalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "set FILE",
		Short: "Check a policy file and make it the queue's policy",
		Long: `Check a policy file (its keys, and every hook module against its sha256)
and make it the queue's policy. Running workers that loaded the previous
policy claim no more jobs and stop (exit 2); start them again to run under
the new one. Exit status: 0 set, 2 a file that does not load.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicySet(cmd.Context(), cmd, gopts, args[0])
		},
	}
}

func newPolicyShowCommand(gopts *GlobalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Show the queue's policy, or the defaults a queue with none enforces",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPolicyShow(cmd.Context(), cmd, gopts)
		},
	}
}

func runPolicySet(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, file string) error {
	abs, err := filepath.Abs(file)
	if err != nil {
		return usagef("%s: %v", file, err)
	}
	data, err := filekind.ReadFile(abs, nil, runner.MaxConfigBytes, "a policy file")
	if err != nil {
		return usagef("policy: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		// The store keeps a policy's text and its digest: an empty one
		// would say nothing a reader could check.
		return usagef("policy %s: the file is empty: write at least one key (a queue with no policy set runs under the defaults `paddock policy show` lists)", abs)
	}
	pol, err := runner.ParsePolicy(abs, data)
	if err != nil {
		return &usageError{err}
	}
	if err := pol.CheckHooks(); err != nil {
		return &usageError{err}
	}
	// Load the chain as a worker will (compile, find each module's ABI,
	// check its settings), so that a policy no worker could run with is
	// refused here, not by every process after it is set.
	chain, err := hooks.NewChain(ctx, hooks.ChainOptions{Hooks: pol.HookConfigs()})
	if err != nil {
		if placed := pol.PlaceChainError(err); placed != err {
			return &usageError{placed}
		}
		return usagef("policy %s: %w", abs, err)
	}
	defer chain.Close(context.WithoutCancel(ctx))
	for _, h := range chain.Hooks() {
		if h.ABI == hooks.ABINone {
			return usagef("policy %s: hook %q (%s): %w", abs, h.Config.Name, h.Config.Path, hooks.ErrNoABI)
		}
	}
	a, err := openApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	defer a.warnCreated(cmd, gopts, "queue_warning")
	prev, prevErr := a.store.PolicyGet(ctx)
	set, err := a.store.PolicySet(ctx, &queue.PolicySetParams{Source: string(data), Path: abs})
	if err != nil {
		return err
	}
	if gopts.JSON {
		return writeJSON(cmd.OutOrStdout(), policyViewOf(pol, &set))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "policy set from %s (sha256 %s)\n", abs, set.SHA256)
	// A queue made just now has no worker running under the defaults.
	if errors.Is(prevErr, queue.ErrPolicyNotSet) && !a.created || prevErr == nil && prev.SHA256 != set.SHA256 {
		fmt.Fprintln(cmd.ErrOrStderr(), "paddock: the policy changed: workers running on this queue under the one before stop claiming jobs and exit; start them again to run under this one")
	}
	for _, w := range pol.Warnings() {
		fmt.Fprintf(cmd.ErrOrStderr(), "paddock: warning: %s\n", w)
	}
	return nil
}

// policyView is the policy as `paddock policy show --json` prints it.
type policyView struct {
	MessageType    string           `json:"message_type"` // "policy"
	Set            bool             `json:"set"`          // false: none set, these are the defaults
	SHA256         string           `json:"sha256,omitempty"`
	Path           string           `json:"path,omitempty"`
	SetAt          *time.Time       `json:"set_at,omitempty"`
	MaxMode        string           `json:"max_mode"`
	AllowNetwork   bool             `json:"allow_network"`
	WorkspaceRoots []string         `json:"workspace_roots"`
	UnixSockets    bool             `json:"unix_sockets"`
	Hide           []string         `json:"hide"`
	Protect        []string         `json:"protect"`
	Hooks          []policyHookView `json:"hooks"`
	Source         string           `json:"source,omitempty"`
	// Warnings: [runner.Policy.Warnings], e.g. a protect list that drops
	// the defaults.
	Warnings []string `json:"warnings,omitempty"`
}

type policyHookView struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	SHA256 string `json:"sha256"`
}

func policyViewOf(p runner.Policy, stored *queue.Policy) policyView {
	v := policyView{MessageType: "policy", MaxMode: p.MaxMode, AllowNetwork: p.AllowNetwork,
		WorkspaceRoots: append([]string{}, p.WorkspaceRoots...), UnixSockets: p.UnixSockets,
		Hide: append([]string{}, p.HideList()...), Protect: append([]string{}, p.ProtectList()...), Hooks: []policyHookView{},
		Warnings: p.Warnings()}
	for _, h := range p.Hooks {
		v.Hooks = append(v.Hooks, policyHookView{Name: h.Name, Path: h.Path, SHA256: h.SHA256})
	}
	if stored != nil {
		at := stored.SetAt
		v.Set, v.SHA256, v.Path, v.SetAt, v.Source = true, stored.SHA256, stored.Path, &at, stored.Source
	}
	return v
}

func runPolicyShow(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions) error {
	a, err := openApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	defer a.warnCreated(cmd, gopts, "queue_warning")
	stored, err := a.store.PolicyGet(ctx)
	var v policyView
	switch {
	case errors.Is(err, queue.ErrPolicyNotSet):
		v = policyViewOf(runner.DefaultPolicy(), nil)
	case err != nil:
		return err
	default:
		pol, err := runner.ParsePolicy(stored.Path, []byte(stored.Source))
		if err != nil {
			return &usageError{err}
		}
		v = policyViewOf(pol, &stored)
	}
	if gopts.JSON {
		return writeJSON(cmd.OutOrStdout(), v)
	}
	printPolicy(cmd.OutOrStdout(), v, a.Config)
	return nil
}

func printPolicy(w io.Writer, v policyView, cfg runner.Config) {
	if v.Set {
		fmt.Fprintf(w, "policy    set from %s at %s\nsha256    %s\n", v.Path, v.SetAt.Format(time.RFC3339), v.SHA256)
	} else {
		fmt.Fprintln(w, "policy    none set: this queue enforces the defaults below (paddock policy set FILE to change them)")
	}
	fmt.Fprintf(w, "max_mode  %s  (the widest mode a job may run in, after its hooks)\n", v.MaxMode)
	net := "off for every confined job: a job asking network = true is refused"
	if v.AllowNetwork {
		net = "jobs that ask for it (network = true) get it; off otherwise"
	}
	fmt.Fprintf(w, "network   %s\n", net)
	roots := "anywhere the fence does not protect; for writing, not in " + strings.Join(sandbox.SystemTrees, ", ")
	if len(v.WorkspaceRoots) > 0 {
		roots = strings.Join(v.WorkspaceRoots, ", ")
	}
	fmt.Fprintf(w, "workspace_roots  %s\n", roots)
	fmt.Fprintf(w, "unix_sockets     %s\n", map[bool]string{true: "jobs may ask for them", false: "refused"}[v.UnixSockets])
	fmt.Fprintf(w, "hide      %s\n", listOrNone(v.Hide))
	fmt.Fprintf(w, "protect   %s  (read-only inside every writable root)\n", listOrNone(v.Protect))
	for _, warn := range v.Warnings {
		fmt.Fprintf(w, "warning   %s\n", warn)
	}
	switch {
	case len(v.Hooks) > 0:
		fmt.Fprintln(w, "hooks     (every process running this queue's jobs loads these modules, byte for byte)")
		for _, h := range v.Hooks {
			fmt.Fprintf(w, "  %-16s %s  sha256 %s\n", h.Name, h.Path, h.SHA256)
		}
	case !v.Set && len(cfg.Hooks) > 0:
		fmt.Fprintf(w, "hooks     none in a policy: each process uses its own config's [[hook]] tables (%s has %d); set a policy to bind them\n", cfg.Path, len(cfg.Hooks))
	default:
		fmt.Fprintln(w, "hooks     none")
	}
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "(none)"
	}
	return strings.Join(l, ", ")
}

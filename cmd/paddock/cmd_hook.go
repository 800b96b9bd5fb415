package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"paddock/cmd/internal/compose"
	"paddock/hooks"
	"paddock/internal/filekind"
	"paddock/runner"
)

// newHookCommand returns `paddock hook`, the tools for hook authors.
func newHookCommand(gopts *GlobalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hook",
		Short: "Tools for writing and testing WebAssembly policy hooks",
	}
	cmd.AddCommand(newHookTestCommand(gopts))
	return cmd
}

// HookTestOptions are the flags of `paddock hook test`.
type HookTestOptions struct {
	// Settings is the hook's settings: a JSON object, or @FILE to read one.
	// Defaults to the request's hook.settings, else {}.
	Settings string
	// Request is a wire request (version 1) in a file, or "-" for stdin.
	// Defaults to a request built from the flags below and `-- ARGV...`.
	Request string
	// Name is the hook's name in the request and the output. Defaults to
	// the request's hook.name, else the file name without ".wasm".
	Name string
	// Timeout bounds the call. Defaults to 1s.
	Timeout time.Duration
	// MemoryMiB bounds the module's memory, in MiB. Defaults to 64.
	MemoryMiB uint64
	// MayWiden lets an adjustment widen the sandbox.
	MayWiden bool
	// Mode, Cwd, Workspace and Network fill the default request's job (and,
	// with Cases, each case's job unless the case says otherwise).
	Mode      string
	Cwd       string
	Workspace string
	Network   bool
	// Cases is a TOML file of policy cases (see cmd_hook_cases.go): each
	// is run and checked, and a pass/fail table printed. Defaults to "":
	// one request, one decision.
	Cases string
}

// AddFlags registers the options on cmd.
func (o *HookTestOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Settings, "settings", "", "hook settings as a JSON object, or @FILE (default: the request's, else {})")
	f.StringVar(&o.Request, "request", "", "wire request (version 1) from FILE, or - for stdin (default: built from -- ARGV and the job flags)")
	f.StringVar(&o.Name, "name", "", "hook name (default: the request's, else the file name without .wasm)")
	f.DurationVar(&o.Timeout, "timeout", hooks.DefaultTimeout, "time limit of the call")
	f.Uint64Var(&o.MemoryMiB, "memory-mib", hooks.DefaultMemoryBytes>>20, "memory limit of the module, in MiB")
	f.BoolVar(&o.MayWiden, "may-widen", false, "let an adjustment widen the sandbox")
	f.StringVar(&o.Mode, "mode", "workspace_write", "default request: the job's sandbox mode")
	f.StringVar(&o.Cwd, "cwd", "", "default request: the job's working directory (default: the current directory)")
	f.StringVar(&o.Workspace, "workspace", "", "default request: the job's workspace (default: --cwd)")
	f.BoolVar(&o.Network, "network", false, "default request: the job shares the host network (jobs have none unless they ask and the policy allows it)")
	f.StringVar(&o.Cases, "cases", "", "run the policy cases of a TOML file (a job and the expected decision each) and print a pass/fail table")
}

func newHookTestCommand(gopts *GlobalOptions) *cobra.Command {
	var opts HookTestOptions
	cmd := &cobra.Command{
		Use:   "test HOOK.wasm [--settings JSON|@FILE] [--request FILE|-] [-- ARGV...] | test HOOK.wasm --cases FILE",
		Short: "Run one hook on one request and print its decision, or check its policy cases",
		Long: `Run one hook on one request, without running anything else, and print
one JSON object with message_type "hook_decision": the decision, its reason,
the job as adjusted, the fields changed, the error if the hook failed, its
stderr and duration, and the module's sha256 and ABI.

The request is read from --request, or built from -- ARGV and the job flags
(the sandbox section is then empty). Settings come from --settings, else the
request.

With --cases FILE, run every case of the TOML file instead (each a job and
the decision, reason and adjusted fields expected; see
examples/hooks/README.md, "Policy cases") and print a pass/fail table, or
with --json one hook_case object per case and a hook_cases summary.

Exit status: 0 allow or adjust (--cases: every case passed), 1 deny,
including a failing hook: fail closed (--cases: a case failed), 2 usage or
load errors (bad flags, a module that does not load, settings the hook
refuses, a cases file that does not parse).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var argv []string
			if opts.Cases != "" {
				if len(args) != 1 || opts.Request != "" {
					return usagef("hook test: --cases takes one HOOK.wasm, and no --request or -- ARGV")
				}
				return runHookCases(cmd.Context(), opts, gopts, args[0], cmd.OutOrStdout())
			}
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				if dash != 1 {
					return usagef("hook test: give exactly one HOOK.wasm before --")
				}
				argv = args[dash:]
			} else if len(args) != 1 {
				return usagef("hook test: give exactly one HOOK.wasm; put the job's argv after --")
			}
			return runHookTest(cmd.Context(), opts, gopts, args[0], argv, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

// hookDecisionMessage is the output of `paddock hook test`.
type hookDecisionMessage struct {
	MessageType string     `json:"message_type"` // "hook_decision"
	Hook        string     `json:"hook"`
	ABI         string     `json:"abi"`
	SHA256      string     `json:"sha256"`
	Decision    string     `json:"decision"`
	Reason      string     `json:"reason,omitempty"`
	Error       string     `json:"error,omitempty"`
	Changed     []string   `json:"changed,omitempty"`
	Job         *hooks.Job `json:"job,omitempty"` // the job as adjusted (adjust only)
	Stderr      string     `json:"stderr,omitempty"`
	DurationUS  int64      `json:"duration_us"`
}

// runHookTest runs the hook at path on one request and writes the decision
// to stdout. A deny returns an *exitCodeError with code 1.
func runHookTest(ctx context.Context, opts HookTestOptions, gopts *GlobalOptions, path string, argv []string, stdin io.Reader, stdout io.Writer) error {
	req, err := hookTestRequest(opts, argv, stdin)
	if err != nil {
		return err
	}
	if opts.Settings != "" {
		if req.Hook.Settings, err = hookTestSettings(opts.Settings); err != nil {
			return err
		}
	}
	switch {
	case opts.Name != "":
		req.Hook.Name = opts.Name
	case req.Hook.Name == "":
		req.Hook.Name = strings.TrimSuffix(filepath.Base(path), ".wasm")
	}
	// The request's sandbox section: as given by --request, else the
	// confined argv the job would run with now.
	sandboxInfo := hookTestSandbox
	if req.Sandbox.Argv != nil || req.Sandbox.Executable != "" {
		sandboxInfo = func(hooks.Job) (hooks.SandboxInfo, error) { return req.Sandbox, nil }
	}
	chain, err := newHookTestChain(ctx, opts, gopts, path, req.Hook.Name, req.Hook.Settings, sandboxInfo)
	if err != nil {
		return err
	}
	defer chain.Close(context.WithoutCancel(ctx))
	res, err := chain.Decide(ctx, hooks.DecideParams{Job: req.Job})
	if err != nil {
		return err
	}
	info, e := chain.Hooks()[0], res.Trail[0]
	msg := hookDecisionMessage{
		MessageType: "hook_decision", Hook: e.Hook, ABI: info.ABI, SHA256: e.SHA256,
		Decision: e.Decision, Reason: e.Reason, Error: e.Error, Changed: e.Changed,
		Stderr: e.Stderr, DurationUS: e.DurationUS,
	}
	if e.Decision == hooks.DecisionAdjust && e.Error == "" {
		job := res.Job.Wire()
		msg.Job = &job
	}
	if err := writeJSON(stdout, msg); err != nil {
		return err
	}
	if res.Verdict == hooks.VerdictDeny {
		return &exitCodeError{code: exitFailure}
	}
	return nil
}

// hookTestSettings reads --settings: a JSON object, or @FILE holding one.
func hookTestSettings(flag string) (map[string]any, error) {
	raw := []byte(flag)
	if file, ok := strings.CutPrefix(flag, "@"); ok {
		var err error
		if raw, err = filekind.ReadFile(file, nil, runner.MaxConfigBytes, "a settings file"); err != nil {
			return nil, usagef("--settings: %v", err)
		}
	}
	var settings map[string]any
	if err := json.Unmarshal(raw, &settings); err != nil || settings == nil {
		return nil, usagef("--settings: not a JSON object: %s", firstNonNil(err, errors.New("null")))
	}
	return settings, nil
}

// hookTestSandbox is the request's sandbox section for `hook test`: the
// confined argv the job would run with now, as the worker computes it
// (empty when the job's paths cannot be confined here).
func hookTestSandbox(j hooks.Job) (hooks.SandboxInfo, error) {
	info, err := runner.SandboxInfo(j)
	if err != nil {
		return hooks.SandboxInfo{Grade: info.Grade, Executable: info.Executable, Argv: []string{}}, nil
	}
	return info, nil
}

// newHookTestChain checks the limit flags and loads a chain of the one
// hook at path, with the compilation cache under the state directory when
// there is one. Every error is a usage error (exit 2): bad flags, a module
// that does not load or exports neither ABI, settings the hook refuses.
func newHookTestChain(ctx context.Context, opts HookTestOptions, gopts *GlobalOptions, path, name string, settings map[string]any, sandbox func(hooks.Job) (hooks.SandboxInfo, error)) (*hooks.Chain, error) {
	if opts.MemoryMiB == 0 || opts.MemoryMiB > hooks.MaxMemoryBytes>>20 {
		return nil, usagef("--memory-mib: %d is not between 1 and %d", opts.MemoryMiB, uint64(hooks.MaxMemoryBytes>>20))
	}
	if opts.Timeout <= 0 {
		return nil, usagef("--timeout: %v is not positive", opts.Timeout)
	}
	cacheDir := ""
	if gopts.StateDir != "" {
		cacheDir = (&compose.Install{StateDir: gopts.StateDir}).HookCacheDir()
		if os.MkdirAll(cacheDir, 0o700) != nil {
			cacheDir = "" // a cache is an optimisation: run without one
		}
	}
	chain, err := hooks.NewChain(ctx, hooks.ChainOptions{
		CacheDir: cacheDir,
		Hooks: []hooks.Config{{
			Name: name, Path: path, Settings: settings,
			Timeout: opts.Timeout, MemoryBytes: opts.MemoryMiB << 20, MayWiden: opts.MayWiden,
		}},
		Sandbox: sandbox,
	})
	if err != nil {
		return nil, &usageError{err}
	}
	if chain.Hooks()[0].ABI == hooks.ABINone {
		chain.Close(context.WithoutCancel(ctx))
		return nil, &usageError{fmt.Errorf("%s: %w", path, hooks.ErrNoABI)}
	}
	return chain, nil
}

// hookTestRequest reads --request, or builds the default request from argv
// and the job flags.
func hookTestRequest(opts HookTestOptions, argv []string, stdin io.Reader) (hooks.Request, error) {
	if opts.Request != "" {
		if len(argv) > 0 {
			return hooks.Request{}, usagef("hook test: give --request or -- ARGV, not both")
		}
		var data []byte
		var err error
		data, err = filekind.ReadFile(opts.Request, stdin, hooks.MaxRequestBytes, "a request")
		if err != nil {
			return hooks.Request{}, usagef("--request: %v", err)
		}
		var req hooks.Request
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return hooks.Request{}, usagef("--request: not a version %d request: %v", hooks.WireVersion, err)
		}
		if req.Version != 0 && req.Version != hooks.WireVersion {
			return hooks.Request{}, usagef("--request: version %d, want %d", req.Version, hooks.WireVersion)
		}
		if len(req.Job.Argv) == 0 {
			return hooks.Request{}, usagef("--request: job.argv is empty")
		}
		return req, nil
	}
	if len(argv) == 0 {
		return hooks.Request{}, usagef("hook test: give --request FILE or the job's argv after --")
	}
	cwd := opts.Cwd
	if cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return hooks.Request{}, fmt.Errorf("hook test: %w", err)
		}
		cwd = wd
	}
	ws := opts.Workspace
	if ws == "" {
		ws = cwd
	}
	return hooks.Request{
		Version: hooks.WireVersion,
		Job: hooks.Job{
			ID: "test", Name: "test", Argv: argv, Env: map[string]string{}, Cwd: cwd, Workspace: ws,
			Mode: opts.Mode, Network: opts.Network, Attempt: 1, Labels: map[string]string{},
		},
	}, nil
}

func firstNonNil(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

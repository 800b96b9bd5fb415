package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"paddock/cmd/internal/compose"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"paddock/hooks"
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
	// Mode, Cwd, Workspace and Network fill the default request's job.
	Mode      string
	Cwd       string
	Workspace string
	Network   bool
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
	f.BoolVar(&o.Network, "network", true, "default request: the job shares the host network")
}

func newHookTestCommand(gopts *GlobalOptions) *cobra.Command {
	var opts HookTestOptions
	cmd := &cobra.Command{
		Use:   "test HOOK.wasm [--settings JSON|@FILE] [--request FILE|-] [-- ARGV...]",
		Short: "Run one hook on one request and print its decision",
		Long: `Run one hook on one request, without running anything else, and print
one JSON object with message_type "hook_decision": the decision, its reason,
the job as adjusted, the fields changed, the error if the hook failed, its
stderr and duration, and the module's sha256 and ABI.

The request is read from --request, or built from -- ARGV and the job flags
(the sandbox section is then empty). Settings come from --settings, else the
request.

Exit status: 0 allow or adjust, 1 deny (including a failing hook: fail
closed), 2 usage or load errors (bad flags, a module that does not load).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var argv []string
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
		raw := []byte(opts.Settings)
		if file, ok := strings.CutPrefix(opts.Settings, "@"); ok {
			if raw, err = os.ReadFile(file); err != nil {
				return usagef("--settings: %v", err)
			}
		}
		req.Hook.Settings = nil
		if err := json.Unmarshal(raw, &req.Hook.Settings); err != nil || req.Hook.Settings == nil {
			return usagef("--settings: not a JSON object: %s", firstNonNil(err, errors.New("null")))
		}
	}
	switch {
	case opts.Name != "":
		req.Hook.Name = opts.Name
	case req.Hook.Name == "":
		req.Hook.Name = strings.TrimSuffix(filepath.Base(path), ".wasm")
	}
	if opts.MemoryMiB == 0 || opts.MemoryMiB > hooks.MaxMemoryBytes>>20 {
		return usagef("--memory-mib: %d is not between 1 and %d", opts.MemoryMiB, uint64(hooks.MaxMemoryBytes>>20))
	}
	if opts.Timeout <= 0 {
		return usagef("--timeout: %v is not positive", opts.Timeout)
	}

	cacheDir := ""
	if gopts.StateDir != "" {
		cacheDir = (&compose.Install{StateDir: gopts.StateDir}).HookCacheDir()
		if os.MkdirAll(cacheDir, 0o700) != nil {
			cacheDir = "" // a cache is an optimisation: run without one
		}
	}
	// The request's sandbox section: as given by --request, else the
	// confined argv the job would run with now (as the worker computes it;
	// empty when the job's paths cannot be confined here).
	sandboxInfo := func(j hooks.Job) (hooks.SandboxInfo, error) {
		if req.Sandbox.Argv != nil || req.Sandbox.Executable != "" {
			return req.Sandbox, nil
		}
		info, err := runner.SandboxInfo(j)
		if err != nil {
			return hooks.SandboxInfo{Grade: info.Grade, Executable: info.Executable, Argv: []string{}}, nil
		}
		return info, nil
	}
	chain, err := hooks.NewChain(ctx, hooks.ChainOptions{
		CacheDir: cacheDir,
		Hooks: []hooks.Config{{
			Name: req.Hook.Name, Path: path, Settings: req.Hook.Settings,
			Timeout: opts.Timeout, MemoryBytes: opts.MemoryMiB << 20, MayWiden: opts.MayWiden,
		}},
		Sandbox: sandboxInfo,
	})
	if err != nil {
		return &usageError{err}
	}
	defer chain.Close(context.WithoutCancel(ctx))
	if chain.Hooks()[0].ABI == hooks.ABINone {
		return &usageError{fmt.Errorf("%s: %w", path, hooks.ErrNoABI)}
	}
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
		msg.Job = &res.Job
		if msg.Job.Writable == nil {
			msg.Job.Writable = []string{}
		}
	}
	if err := writeJSON(stdout, msg); err != nil {
		return err
	}
	if res.Verdict == hooks.VerdictDeny {
		return &exitCodeError{code: exitFailure}
	}
	return nil
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
		if opts.Request == "-" {
			data, err = io.ReadAll(stdin)
		} else {
			data, err = os.ReadFile(opts.Request)
		}
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

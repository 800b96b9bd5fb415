package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"paddock/hooks"
	"paddock/queue"
	"paddock/queue/sqlite"
	"paddock/runner"
	"paddock/sandbox"
)

// app is what most commands need: the loaded config, the state directory
// and an open store. Close releases the store.
type app struct {
	cfg      runner.Config
	stateDir string
	store    queue.Store
	fenced   *runner.Fence // built once by fence
}

// fence is what jobs may not write (the state directory, the config and
// hooks, and defaultPaths) and may not see (the state directory and
// defaultHidden). Built once per command.
func (a *app) fence() *runner.Fence {
	if a.fenced == nil {
		f := fenceFor(a.stateDir, a.cfg)
		a.fenced = &f
	}
	return a.fenced
}

// fenceFor is the fence of a command with this state directory and
// config.
func fenceFor(stateDir string, cfg runner.Config) runner.Fence {
	return runner.FenceFor(stateDir, cfg, defaultPaths()...).WithHidden(defaultHidden()...)
}

// loadConfig reads --config (a missing file at the default path is fine)
// and settles the state directory: --state-dir or $PADDOCK_STATE_DIR when
// given, else the config's state_dir, else the default.
func loadConfig(cmd *cobra.Command, gopts *GlobalOptions) (runner.Config, string, error) {
	explicit := cmd.Flags().Changed("config")
	cfg, err := runner.LoadConfig(gopts.ConfigPath, !explicit)
	if err != nil {
		return cfg, "", &usageError{err}
	}
	stateDir := gopts.StateDir
	if !cmd.Flags().Changed("state-dir") && os.Getenv("PADDOCK_STATE_DIR") == "" && cfg.StateDir != "" {
		stateDir = cfg.StateDir
	}
	if stateDir == "" {
		return cfg, "", usagef("no state directory: set --state-dir or $PADDOCK_STATE_DIR")
	}
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return cfg, "", usagef("--state-dir %q: %v", stateDir, err)
	}
	return cfg, abs, nil
}

// openApp loads the config and opens the store, creating the state
// directory (0700) when it is missing.
func openApp(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions) (*app, error) {
	a, err := newApp(cmd, gopts)
	if err != nil {
		return nil, err
	}
	if err := a.openStore(ctx); err != nil {
		return nil, err
	}
	return a, nil
}

// newApp loads the config and creates the state directory (0700) when it
// is missing; the store is not open yet (openStore).
func newApp(cmd *cobra.Command, gopts *GlobalOptions) (*app, error) {
	cfg, stateDir, err := loadConfig(cmd, gopts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		// Exit 1, as a queue database that cannot be opened: the flags
		// were fine, the file system refused.
		return nil, fmt.Errorf("state directory %s: %w (set --state-dir or $PADDOCK_STATE_DIR to a directory paddock can create and write)", stateDir, err)
	}
	return &app{cfg: cfg, stateDir: stateDir}, nil
}

// openStore opens the state directory's store.
func (a *app) openStore(ctx context.Context) error {
	st, err := sqlite.Open(ctx, runner.StateDir{Root: a.stateDir}.Database(), sqlite.Options{})
	if err != nil {
		return err // "sqlite: open PATH: ..."
	}
	a.store = st
	return nil
}

func (a *app) Close() error { return a.store.Close() }

// probeCachePath is the probe cache of a state directory (see
// [sandbox.ProbeCached]).
func probeCachePath(stateDir string) string {
	return runner.StateDir{Root: stateDir}.ProbeCache()
}

// probeSandbox is the start-up probe of the commands that run or show confined
// jobs (worker, run, check): memoized, and cached in the state directory.
func probeSandbox(ctx context.Context, stateDir string) (sandbox.ProbeReport, error) {
	return sandbox.ProbeCached(ctx, sandbox.ProbeCachedParams{Path: probeCachePath(stateDir)})
}

// newChain loads and compiles the config's hook chain, with the
// compilation cache under the state directory. With prewarm (the worker)
// each reactor hook makes one instance in the background at once.
func (a *app) newChain(ctx context.Context, prewarm bool) (*hooks.Chain, error) {
	ch, err := hooks.NewChain(ctx, hooks.ChainOptions{
		Hooks:       a.cfg.HookConfigs(),
		CacheDir:    runner.StateDir{Root: a.stateDir}.HookCache(),
		Sandbox:     a.fence().SandboxInfo,
		ResolvePath: sandbox.Canonical,
		Prewarm:     prewarm,
	})
	if errors.Is(err, hooks.ErrCacheDir) {
		// The state directory's fault, not the config's: exit 1, not 2.
		var why error = err
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			why = pe
		}
		return nil, fmt.Errorf("state directory %s: hook compilation cache: %w", a.stateDir, why)
	}
	if err != nil {
		// The same check without compiling says which [[hook]], by line.
		if cerr := a.cfg.CheckHooks(); cerr != nil {
			return nil, &usageError{cerr}
		}
		if a.cfg.Path != "" {
			err = fmt.Errorf("%s: %w", a.cfg.Path, err)
		}
		return nil, &usageError{err}
	}
	return ch, nil
}

// getJob resolves an id or name, turning not-found into a usage error.
func (a *app) getJob(ctx context.Context, ref string) (queue.Job, error) {
	j, err := a.store.JobGet(ctx, ref)
	if errors.Is(err, queue.ErrNotFound) {
		return j, usagef("no job %q (not an id nor a name)", ref)
	}
	return j, err
}

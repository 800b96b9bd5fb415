package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"paddock/cmd/internal/compose"
	"paddock/hooks"
	"paddock/queue"
	"paddock/runner"
)

// app is what most commands need: the installation (config and state
// directory: compose.Install builds the rest) and an open store. Close
// releases the store.
type app struct {
	*compose.Install
	store queue.Store
	// created is set when opening the queue made it: the state
	// directory held no SQLite file.
	created bool
}

// warnCreated writes, when opening a made the queue, that it did, on
// stderr (a messageType object under --json): a mistyped --state-dir
// would otherwise run or queue jobs under a fresh queue's default
// policy, not the operator's, with nothing said.
func (a *app) warnCreated(cmd *cobra.Command, gopts *GlobalOptions, messageType string) {
	if !a.created {
		return
	}
	msg := fmt.Sprintf("no queue was at %s: made a new one, under the default policy; check --state-dir (or $PADDOCK_STATE_DIR) if the queue you meant is elsewhere", a.StateDir)
	if gopts.JSON {
		writeJSON(termSafeWriter{cmd.ErrOrStderr()}, map[string]any{"message_type": messageType, "message": msg})
		return
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "paddock: warning: %s\n", termSafe(msg))
}

// loadConfig reads --config (a missing file at the default path is fine)
// and settles the state directory: --state-dir or $PADDOCK_STATE_DIR when
// given, else the config's state_dir, else the default; and the store:
// --store or $PADDOCK_STORE when given, else the config's store (kept in
// the returned Config's Store).
func loadConfig(cmd *cobra.Command, gopts *GlobalOptions) (runner.Config, string, error) {
	explicit := cmd.Flags().Changed("config")
	cfg, err := runner.LoadConfig(gopts.ConfigPath, !explicit)
	if err != nil {
		return cfg, "", &usageError{err}
	}
	if gopts.Store != "" || cmd.Flags().Changed("store") {
		if err := runner.CheckStoreURL(gopts.Store); err != nil {
			return cfg, "", usagef("--store (or $PADDOCK_STORE): %v", err)
		}
		cfg.Store = gopts.Store
	}
	stateDir := gopts.StateDir
	if !cmd.Flags().Changed("state-dir") && os.Getenv("PADDOCK_STATE_DIR") == "" && cfg.StateDir != "" {
		stateDir = cfg.StateDir
	}
	if stateDir == "" {
		if cmd.Flags().Changed("state-dir") {
			return cfg, "", usagef("--state-dir is empty: give a directory")
		}
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
	return openAppWith(ctx, cmd, gopts, false)
}

// openQueueApp is openApp for a command that reads or changes what a
// queue already holds (ls, show, logs, wait, cancel, retry, groups,
// schedules): where the queue is the state directory's SQLite file and
// that file does not exist, it refuses with a usage error (exit 2) and
// creates nothing, so that a mistyped --state-dir is not answered with
// an empty queue made for it.
func openQueueApp(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions) (*app, error) {
	return openAppWith(ctx, cmd, gopts, true)
}

// openAppWith is openApp, or, with existing, openQueueApp.
func openAppWith(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, existing bool) (*app, error) {
	cfg, stateDir, err := loadConfig(cmd, gopts)
	if err != nil {
		return nil, err
	}
	if existing && cfg.Store == "" {
		db := runner.StateDir{Root: stateDir}.Database()
		// A file given as the state directory is left to newAppAt: a
		// state directory that cannot be used (exit 1).
		if _, err := os.Stat(db); errors.Is(err, fs.ErrNotExist) {
			return nil, usagef("no queue at %s: %s does not exist (nothing was ever submitted with this state directory); check --state-dir, $PADDOCK_STATE_DIR or the config's state_dir", stateDir, db)
		}
	}
	a, err := newAppAt(cfg, stateDir)
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
	return newAppAt(cfg, stateDir)
}

// newAppAt is newApp for a config loaded already (loadConfig).
func newAppAt(cfg runner.Config, stateDir string) (*app, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		// Exit 1, as a queue database that cannot be opened: the flags
		// were fine, the file system refused.
		return nil, fmt.Errorf("state directory %s: %w (set --state-dir or $PADDOCK_STATE_DIR to a directory paddock can create and write)", stateDir, err)
	}
	return &app{Install: &compose.Install{Config: cfg, StateDir: stateDir}}, nil
}

// openStore opens the state directory's store, and says in a.created
// whether that made it (the state directory held no SQLite file).
func (a *app) openStore(ctx context.Context) error {
	if a.Config.Store == "" {
		_, err := os.Stat(runner.StateDir{Root: a.StateDir}.Database())
		a.created = errors.Is(err, fs.ErrNotExist)
	}
	st, err := a.OpenStore(ctx)
	if err != nil {
		return err // "sqlite: open PATH: ...", "postgres: ..."
	}
	a.store = st
	return nil
}

func (a *app) Close() error { return a.store.Close() }

// newChain loads the hook chain (compose.Install.Chain) and says whose
// fault a failure is: the state directory's (its compilation cache: exit
// 1) or the config's (exit 2, naming the [[hook]] table).
func (a *app) newChain(ctx context.Context, prewarm bool) (*hooks.Chain, error) {
	ch, err := a.Chain(ctx, prewarm)
	if errors.Is(err, hooks.ErrCacheDir) {
		var why error = err
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			why = pe
		}
		return nil, fmt.Errorf("state directory %s: hook compilation cache: %w", a.StateDir, why)
	}
	if err != nil {
		// The same check without compiling says which [[hook]], by line.
		if !a.Policy.IsDefault() {
			if cerr := a.Policy.CheckHooks(); cerr != nil {
				return nil, &usageError{cerr}
			}
		} else if cerr := a.Config.CheckHooks(); cerr != nil {
			return nil, &usageError{cerr}
		}
		if se := (*hooks.SettingsError)(nil); errors.As(err, &se) && err != error(se) {
			// Placed at its file and line already
			// (runner.Config.PlaceChainError).
			return nil, &usageError{err}
		}
		switch {
		case !a.Policy.IsDefault() && len(a.Policy.Hooks) > 0:
			err = fmt.Errorf("%s: %w", a.Policy.Label(), err)
		case a.Config.Path != "":
			err = fmt.Errorf("%s: %w", a.Config.Path, err)
		}
		return nil, &usageError{err}
	}
	return ch, nil
}

// loadPolicy binds the app to the queue's policy (compose.Install.
// LoadPolicy): a process whose config or modules do not match it, or a
// stored policy that does not parse here, is refused with exit 2, saying
// which and how to fix it; refused says what was not done ("nothing was
// enqueued", "not running the queue's jobs").
func (a *app) loadPolicy(ctx context.Context, refused string) error {
	err := a.LoadPolicy(ctx, a.store)
	if errors.Is(err, runner.ErrPolicyMismatch) || errors.Is(err, runner.ErrPolicy) {
		return &usageError{fmt.Errorf("%s: %w", refused, err)}
	}
	return err
}

// getJob resolves an id or name, turning not-found into a usage error.
func (a *app) getJob(ctx context.Context, ref string) (queue.Job, error) {
	j, err := a.store.JobGet(ctx, ref)
	if errors.Is(err, queue.ErrNotFound) {
		return j, usagef("no job %q (not an id nor a name)", ref)
	}
	return j, err
}

// Package compose is the composition root of paddock's commands: from a
// loaded config and a state directory it assembles what runs jobs (the
// store, the sandbox probe, the hook chain, the fence, the executor, the
// event log), so that worker, run, check and paddock-bench build them one
// way. It is the one place outside tests that picks the store driver.
//
// The state directory's layout (which file is the queue, where the caches
// live) is runner.StateDir's.
package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"paddock/hooks"
	"paddock/inbox"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/postgres"
	"paddock/queue/sqlite"
	"paddock/runner"
	"paddock/sandbox"
)

// Install is one paddock installation: a loaded config and its state
// directory. Its methods build what a command needs; they are safe for
// concurrent use (the worker builds the probe, the chain and the store
// side by side).
type Install struct {
	Config   runner.Config
	StateDir string // absolute; its layout is runner.StateDir's
	// Policy is the queue's policy, as [Install.LoadPolicy] read it. The
	// zero value enforces runner.DefaultPolicy's ceilings.
	Policy runner.Policy

	fenceOnce sync.Once
	fence     runner.Fence
}

// OpenStore opens the queue: the PostgreSQL database of Config.Store
// (migrating its schema when older; queue/postgres.ErrSchemaNewer when
// newer), else the state directory's SQLite file (created when missing).
// The caller closes it.
func (in *Install) OpenStore(ctx context.Context) (queue.Store, error) {
	if in.Config.Store != "" {
		if err := runner.CheckStoreURL(in.Config.Store); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		return postgres.Open(ctx, in.Config.Store, postgres.Options{})
	}
	return sqlite.Open(ctx, in.dir().Database(), sqlite.Options{})
}

// TryEnqueue enqueues batches, as [queue.Store.JobEnqueueAll] does, into
// an empty SQLite queue in a directory of its own under os.TempDir(),
// removed before it returns, and returns what that queue refused (an
// `after` naming no job, a name given twice): what a new queue would
// answer, asked before it is made. Errors: the store's refusal
// (wrapping [jobspec.ErrInvalid] for bad input), or one creating or
// opening the throwaway queue.
func TryEnqueue(ctx context.Context, batches []*queue.JobEnqueueParams) error {
	dir, err := os.MkdirTemp("", "paddock-try-")
	if err != nil {
		return fmt.Errorf("compose: a queue to try the jobs in: %w", err)
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, runner.StateDir{Root: dir}.Database(), sqlite.Options{})
	if err != nil {
		return fmt.Errorf("compose: a queue to try the jobs in: %w", err)
	}
	defer st.Close()
	_, err = st.JobEnqueueAll(ctx, batches)
	return err
}

// MigrateStore brings the queue's schema to this paddock's version and
// returns a line saying what it did, e.g. "postgres: schema version 1
// (was 0)". Opening a store migrates it too; this is for operators who
// migrate before starting upgraded workers.
func (in *Install) MigrateStore(ctx context.Context) (string, error) {
	st, err := in.OpenStore(ctx)
	if err != nil {
		return "", err
	}
	defer st.Close()
	switch st := st.(type) {
	case *postgres.Store: // Open migrated it
		return fmt.Sprintf("postgres %s: schema version %d (was %d)", postgres.Redact(in.Config.Store), postgres.SchemaVersion, st.FoundVersion()), nil
	default:
		return fmt.Sprintf("sqlite %s: schema version %d", in.dir().Database(), sqlite.SchemaVersion), nil
	}
}

// HasStore reports whether the queue exists already (a command that
// creates none, such as check, reads its policy only then): always for a
// PostgreSQL store, else when the state directory holds its database.
func (in *Install) HasStore() bool {
	if in.Config.Store != "" {
		return true
	}
	_, err := os.Stat(in.dir().Database())
	return err == nil
}

// LoadPolicy reads the queue's policy from st and binds in to it: from
// then on the chain is the policy's (when the queue has one), the fence
// hides and protects its paths, and executors enforce its ceilings. A
// queue with no policy yields runner.DefaultPolicy, and the config's own
// [[hook]] tables stay the chain (the way configs written before
// policies keep working until `paddock policy set`).
//
// # Errors
//
//   - runner.ErrPolicyMismatch: the config names another chain than the
//     policy's, or a module's bytes on this host do not match the
//     policy's sha256: this process must not run the queue's jobs.
//   - runner.ErrPolicy: the stored document no longer parses here.
//   - the store's errors.
//
// Call it before Fence, Chain or Executor.
func (in *Install) LoadPolicy(ctx context.Context, st queue.Store) error {
	pol, err := StoredPolicy(ctx, st)
	if err != nil {
		return err
	}
	if pol.IsDefault() {
		in.Policy = pol
		return nil
	}
	if err := pol.SameChain(in.Config); err != nil {
		return err
	}
	if err := pol.CheckHooks(); err != nil {
		return fmt.Errorf("%w: %w (install the modules the policy names, or set a policy naming these: paddock policy set FILE)", runner.ErrPolicyMismatch, err)
	}
	in.Policy = pol
	in.Config = in.Config.WithPolicyChain(pol)
	return nil
}

// StoredPolicy reads and parses the queue's policy, the default policy
// when none is set, without binding a hook chain to it. Errors are the
// store's or runner.ParsePolicy's.
func StoredPolicy(ctx context.Context, st queue.Store) (runner.Policy, error) {
	stored, err := st.PolicyGet(ctx)
	if errors.Is(err, queue.ErrPolicyNotSet) {
		return runner.DefaultPolicy(), nil
	}
	if err != nil {
		return runner.Policy{}, err
	}
	return runner.ParsePolicy(stored.Path, []byte(stored.Source))
}

// ProbeCachePath is the state directory's probe cache
// (sandbox.ProbeCached).
func (in *Install) ProbeCachePath() string { return in.dir().ProbeCache() }

// dir is the state directory's layout.
func (in *Install) dir() runner.StateDir { return runner.StateDir{Root: in.StateDir} }

// Probe is the start-up probe of the commands that run or show confined
// jobs: memoized, and cached in the state directory. The error is
// sandbox.ErrUnusable when bwrap cannot confine jobs on this host.
func (in *Install) Probe(ctx context.Context) (sandbox.ProbeReport, error) {
	return sandbox.ProbeCached(ctx, sandbox.ProbeCachedParams{Path: in.ProbeCachePath()})
}

// Fence is what jobs may not write (the state directory, the config and
// its hooks, and [DefaultPaths]) and may not see (the state directory and
// [DefaultHidden]). Built once.
func (in *Install) Fence() *runner.Fence {
	in.fenceOnce.Do(func() {
		in.fence = FenceFor(in.StateDir, in.Config).WithHidePatterns(HidePatterns(in.Policy.HideList())...).
			WithProtect(in.Policy.ProtectList()...)
	})
	return &in.fence
}

// FenceFor is the fence of a command with this state directory and
// config, as [Install.Fence] builds it; for commands that have no
// Install (paddock confine without a usable config).
func FenceFor(stateDir string, cfg runner.Config) runner.Fence {
	return runner.FenceFor(stateDir, cfg, DefaultPaths()...).WithHidden(DefaultHidden()...)
}

// HookCacheDir is the hooks' compilation cache (hooks.ChainOptions.CacheDir).
func (in *Install) HookCacheDir() string { return in.dir().HookCache() }

// Chain loads and compiles the config's hook chain, with the compilation
// cache under the state directory. With prewarm (the worker) each reactor
// hook makes one instance in the background at once. Errors are
// hooks.NewChain's, a refused settings placed at its line
// (runner.Config.PlaceChainError); the caller closes the chain.
func (in *Install) Chain(ctx context.Context, prewarm bool) (*hooks.Chain, error) {
	chain, err := hooks.NewChain(ctx, hooks.ChainOptions{
		Hooks:       in.Config.HookConfigs(),
		CacheDir:    in.HookCacheDir(),
		Sandbox:     in.Fence().SandboxInfo,
		ResolvePath: sandbox.Canonical,
		Prewarm:     prewarm,
	})
	return chain, in.Config.PlaceChainError(err)
}

// Executor is the executor of jobs with chain and the probe's result.
func (in *Install) Executor(chain *hooks.Chain, probe sandbox.ProbeReport, probeErr error) *runner.Executor {
	return &runner.Executor{Config: in.Config, StateDir: in.StateDir, Chain: chain, Probe: probe, ProbeErr: probeErr,
		ProbeCache: in.ProbeCachePath(), Fence: in.Fence(), Policy: in.Policy}
}

// EventsPath is the state directory's event log.
func (in *Install) EventsPath() string { return in.dir().EventLog() }

// Events opens the event log for appending. The caller closes it.
func (in *Install) Events() (*runner.EventLog, error) { return runner.OpenEventLog(in.EventsPath(), 0) }

// Inbox is the state directory's inbox, feeding store.
func (in *Install) Inbox(store queue.Store) (*inbox.Inbox, error) {
	return inbox.New(inbox.Options{Dir: in.dir().Inbox(), Store: store, Check: in.CheckSpecs})
}

// CheckSpecs refuses the jobs of one file (named file, text source) that
// the queue's policy refuses (runner.ErrRefusedByPolicy, naming file,
// line, key and ceiling) or that ask for a hook the chain lacks. Submit,
// run and the inbox call it before enqueueing.
func (in *Install) CheckSpecs(file string, source []byte, specs []jobspec.Spec) error {
	if err := in.Policy.JudgeSpecs(file, source, specs, in.Config.DefaultMode); err != nil {
		return err
	}
	return in.Config.CheckHookNames(file, source, specs)
}

// HidePatterns makes a policy's hide list (runner.Policy.HideList)
// absolute: "~/" becomes the user's home; relative entries are dropped.
// The fence expands the globs when jobs start (runner.Fence.
// WithHidePatterns), so secrets created after the process started are
// hidden too.
func HidePatterns(list []string) []string {
	home, _ := os.UserHomeDir()
	var out []string
	for _, e := range list {
		if e = runner.ExpandHome(e, home); filepath.IsAbs(e) {
			out = append(out, e)
		}
	}
	return out
}

// DefaultStateDir is the state directory of a paddock given no
// --state-dir: $PADDOCK_STATE_DIR, else $XDG_STATE_HOME/paddock, else
// ~/.local/state/paddock.
func DefaultStateDir() string {
	if d := os.Getenv("PADDOCK_STATE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "paddock")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "paddock")
	}
	return filepath.Join(os.TempDir(), "paddock-state")
}

// DefaultConfigPath is the config of a paddock given no --config:
// $XDG_CONFIG_HOME/paddock/config.toml, else
// ~/.config/paddock/config.toml; "" when there is no home.
func DefaultConfigPath() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "paddock", "config.toml")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".config", "paddock", "config.toml")
	}
	return ""
}

// DefaultPaths are the paths kept out of every job's reach
// (runner.Executor.Fence) beyond the worker's own state and config: the
// state directories and the config a plain `paddock` (no flags) would use
// here, the paddock binary, and every place on $PATH where a `bwrap` would
// be found first (the probe looks bwrap up on $PATH at each start: a job
// that could write one there would have it run on the host), with the
// libraries its loader maps.
func DefaultPaths() []string {
	ps := []string{DefaultStateDir(), DefaultConfigPath()}
	if exe, err := os.Executable(); err == nil {
		ps = append(ps, exe) // the binary itself, links resolved
	}
	if typed, err := exec.LookPath(os.Args[0]); err == nil {
		ps = append(ps, typed) // and the name that was run (a link on $PATH, say)
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if !filepath.IsAbs(d) {
			continue // exec.LookPath refuses relative entries
		}
		p := filepath.Join(d, "bwrap")
		ps = append(ps, p)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			// What exec.LookPath finds: later entries are never reached.
			// The libraries its loader maps run as bwrap does, on the
			// host: protected like bwrap.
			ps = append(ps, sandbox.LoadedFiles(p)...)
			break
		}
	}
	ps = append(ps, DefaultHidden()...)
	// The default config's state_dir, which a plain paddock would use even
	// when this one was given --state-dir or another --config.
	if c, err := runner.LoadConfig(DefaultConfigPath(), true); err == nil && c.StateDir != "" {
		ps = append(ps, c.StateDir)
	}
	return ps
}

// DefaultHidden are the directories hidden from every job besides the
// state directory in use: the state directories a plain `paddock` would
// use here and the default config's directory, which are paddock's own
// (another queue's database could otherwise be read or locked by a job).
func DefaultHidden() []string {
	ps := []string{DefaultStateDir()}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		ps = append(ps, filepath.Join(d, "paddock"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		ps = append(ps, filepath.Join(home, ".local", "state", "paddock"))
	}
	if c := DefaultConfigPath(); c != "" {
		ps = append(ps, filepath.Dir(c))
	}
	return ps
}

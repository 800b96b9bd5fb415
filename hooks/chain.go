package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"golang.org/x/sys/unix"
)

// ChainOptions configure [NewChain].
type ChainOptions struct {
	// Hooks run in this order. May be empty: the chain then allows every
	// job (and denies any job that names an optional hook).
	Hooks []Config
	// CacheDir is wazero's on-disk compilation cache (the CLI uses
	// <state-dir>/cache/wazero); created if missing. It is sealed: a
	// manifest (CacheDir + ".seal") lists each entry's inode, size and
	// times under an HMAC whose key is CacheDir + ".key" (0600), and an
	// entry it does not list as it is now is removed and compiled again,
	// never run. Defaults to "" (an
	// in-memory cache shared by the chain's hooks, lost on Close).
	CacheDir string
	// Sandbox computes the request's "sandbox" section for a job as it
	// stands: the confined argv as it would run now. It is called before
	// each hook whose job differs from the last one computed (so once per
	// decision when no hook adjusts), possibly from many goroutines at
	// once. An error denies the job (the trail entry's Error says
	// "sandbox: ..."), whatever the hook's mode or on_error. Defaults to nil
	// (an empty section: grade "", executable "", argv []).
	Sandbox func(Job) (SandboxInfo, error)
	// ResolvePath, when not nil, resolves a path as the sandbox will
	// (absolute, every symlink followed); an adjustment by a hook without
	// may_widen is then judged on resolved paths: each writable root it
	// sets must resolve to a directory within one of the job's writable
	// roots as they resolve now, so that a narrowing to "root/out", where
	// the job made out a symlink elsewhere, is a widening. A path that
	// does not resolve is refused the same way. Called from many
	// goroutines at once. Defaults to nil (paths compared as text).
	ResolvePath func(string) (string, error)
	// MaxIdleInstances bounds how many idle instances each reactor hook
	// keeps for reuse; more are closed when returned. Defaults to
	// runtime.GOMAXPROCS(0) when 0. Each idle instance holds its linear
	// memory (up to the hook's MemoryBytes).
	MaxIdleInstances int
	// Prewarm makes one instance of each reactor hook in the background
	// once the chain is loaded (its _initialize, about 10 ms of CPU for
	// a Go module), so that the first decision does not pay for it; a
	// decision that comes first waits for it rather than making a second
	// one. An instance that fails to start is dropped: decisions then
	// make their own, and fail as they would have. A reactor that checked
	// its settings at load already has its instance. The worker sets it.
	Prewarm bool
}

// Chain is a loaded, compiled chain of hooks. Make one with [NewChain] and
// release it with [Chain.Close]. Decide is safe for concurrent use.
type Chain struct {
	hooks   []*hook
	byName  map[string]*hook
	cache   wazero.CompilationCache
	sandbox func(Job) (SandboxInfo, error)
	resolve func(string) (string, error)

	mu     sync.RWMutex // held for reading by Decide, for writing by Close
	closed bool
}

// NewChain reads, checks and compiles every hook of o (through the
// compilation cache), detects its ABI, then asks each hook once to check
// its settings: a reactor exporting paddock_validate_settings is
// instantiated for it (the instance is kept for the first decision), a
// command module is run once on the settings request. Nothing else is
// instantiated until the first decision.
//
// # Errors
//
// Each error names the hook at fault and wraps [ErrConfig] (a bad field, a
// duplicate name, settings not encodable as JSON), [ErrCacheDir] (a cache
// dir that cannot be created or written), [ErrSHA256Mismatch], [ErrLoad] (unreadable, invalid or
// non-WASI module, initial memory above the limit, tables too large), or
// [ErrSettings] (the hook refused its settings when asked once at load:
// see examples/hooks/README.md, "Checking settings at load"). A module that exports
// neither ABI is not an error here: it loads with ABI [ABINone] and denies
// every job (see [ErrNoABI]).
func NewChain(ctx context.Context, o ChainOptions) (_ *Chain, err error) {
	var seal *cacheSeal
	c := &Chain{byName: map[string]*hook{}, sandbox: o.Sandbox, resolve: o.ResolvePath}
	if o.CacheDir != "" {
		// Made and checked here, not left to wazero: its error would be
		// text only, and a directory it cannot write it skips silently,
		// compiling again on every start. Both are *fs.PathError.
		if err := os.MkdirAll(o.CacheDir, 0o700); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCacheDir, err)
		}
		if err := unix.Access(o.CacheDir, unix.W_OK); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCacheDir, &fs.PathError{Op: "write", Path: o.CacheDir, Err: err})
		}
		// Entries the seal does not vouch for are removed before wazero
		// reads any (see cacheseal.go).
		if seal, _, err = openCacheSeal(o.CacheDir); err != nil {
			return nil, fmt.Errorf("%w: sealing %s: %w", ErrCacheDir, o.CacheDir, err)
		}
		if c.cache, err = wazero.NewCompilationCacheWithDir(o.CacheDir); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCacheDir, err)
		}
	} else {
		c.cache = wazero.NewCompilationCache()
	}
	defer func() {
		if err != nil {
			_ = c.Close(context.WithoutCancel(ctx))
		}
	}()
	maxIdle := o.MaxIdleInstances
	if maxIdle <= 0 {
		maxIdle = runtime.GOMAXPROCS(0)
	}
	// Check every config first, then load (read, hash, compile) the hooks
	// before the first bad config concurrently: compiling, or
	// deserializing from the cache, is CPU-bound and per module, so a
	// chain of three starts in about the time of its slowest hook on a
	// multi-core host. The error returned is the first in chain order, as
	// if the hooks were loaded one by one.
	errs := make([]error, len(o.Hooks))
	cfgs := make([]Config, 0, len(o.Hooks))
	names := map[string]bool{}
	for i, hc := range o.Hooks {
		cfg, err := hc.withDefaults()
		if err == nil && names[cfg.Name] {
			err = fmt.Errorf("%w: hook %q: name: used twice", ErrConfig, cfg.Name)
		}
		if err != nil {
			errs[i] = err
			break
		}
		names[cfg.Name] = true
		cfgs = append(cfgs, cfg)
	}
	loaded := make([]*hook, len(cfgs))
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			loaded[i], errs[i] = loadHook(ctx, cfg, c.cache, maxIdle)
		}()
	}
	wg.Wait()
	for i, h := range loaded { // every loaded hook is closed by Close on error
		if h != nil {
			c.hooks = append(c.hooks, h)
			c.byName[cfgs[i].Name] = h
		}
	}
	if err := firstNonNil(errs); err != nil {
		return nil, err
	}
	if seal != nil {
		// A manifest that cannot be written only costs the next start a
		// compile: every entry it does not list is removed then.
		_ = seal.record()
	}
	// Each hook checks its settings once (see hook.checkSettings), all at
	// once: a refusal stops the load, in chain order.
	for i, h := range c.hooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = h.checkSettings(ctx)
		}()
	}
	wg.Wait()
	if err := firstNonNil(errs[:len(c.hooks)]); err != nil {
		return nil, err
	}
	if o.Prewarm {
		for _, h := range c.hooks {
			if h.abi == ABIReactor && len(h.idle) == 0 {
				h.prewarm(context.WithoutCancel(ctx))
			}
		}
	}
	return c, nil
}

// firstNonNil returns the first non-nil error of errs, or nil.
func firstNonNil(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Close releases every hook's runtime and instances, then the compilation
// cache (the on-disk cache stays on disk). It waits for decisions in
// progress; Decide after Close returns an error. Calling Close twice is safe.
func (c *Chain) Close(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for _, h := range c.hooks {
		errs = append(errs, h.close(ctx))
	}
	if c.cache != nil {
		errs = append(errs, c.cache.Close(ctx))
	}
	return errors.Join(errs...)
}

// HookInfo describes one loaded hook.
type HookInfo struct {
	// Config is the hook's configuration with defaults filled in.
	Config Config
	// SHA256 is the hex digest of the module file.
	SHA256 string
	// ABI is [ABICommand], [ABIReactor] or [ABINone].
	ABI string
	// ValidatesSettings is true when the module checked its settings at
	// load (and so accepted them): a reactor exporting
	// paddock_validate_settings, or a command module that answered the
	// settings request.
	ValidatesSettings bool
}

// Hooks describes the chain's hooks in order.
func (c *Chain) Hooks() []HookInfo {
	out := make([]HookInfo, len(c.hooks))
	for i, h := range c.hooks {
		out[i] = HookInfo{Config: h.cfg, SHA256: h.sha256, ABI: h.abi, ValidatesSettings: h.validates}
	}
	return out
}

// DecideParams are the inputs of one decision.
type DecideParams struct {
	// Job is the job to decide on. It is not modified.
	Job Job
	// Extra names the optional hooks the job asked for (a job's
	// `hooks = [...]` list). A name that is not a hook of the chain denies
	// the job. Naming a non-optional hook is allowed and changes nothing.
	Extra []string
}

// Verdict is the chain's final answer.
type Verdict string

// Verdicts.
const (
	// VerdictAllow: run Result.Job.
	VerdictAllow Verdict = "allow"
	// VerdictDeny: do not run the job; Result.Reason says why.
	VerdictDeny Verdict = "deny"
)

// TrailEntry records one hook's part in a decision. The caller keeps the
// trail with the attempt. Field names are the JSON names.
type TrailEntry struct {
	// Hook is the hook's name (or, for an unknown name in Extra, that name).
	Hook string `json:"hook"`
	// SHA256 is the hex digest of the hook's module ("" for an unknown name).
	SHA256 string `json:"sha256"`
	// Mode is the hook's mode, "enforce" or "monitor".
	Mode string `json:"mode"`
	// Decision is what the hook said: "allow", "adjust" or "deny". When the
	// hook failed (Error set) it is "deny", or "allow" for a hook with
	// on_error = "allow".
	Decision string `json:"decision"`
	// Reason is the hook's reason (deny, adjust), or for a failure the
	// failure itself.
	Reason string `json:"reason,omitempty"`
	// Error says how the hook failed: it starts with the message of one of
	// the call sentinels (for example "hooks: timed out: ..."). "" when the
	// hook returned a valid decision that applied cleanly.
	Error string `json:"error,omitempty"`
	// Enforced is true when the decision was applied: false in monitor mode.
	Enforced bool `json:"enforced"`
	// DurationUS is the hook's wall-clock time in microseconds, request
	// encoding and decision parsing included.
	DurationUS int64 `json:"duration_us"`
	// Stderr is the first [MaxStderrBytes] of the hook's stderr (and, for a
	// reactor, its stdout) during this call.
	Stderr string `json:"stderr,omitempty"`
	// Changed lists the job fields an adjust carried, in wire order
	// (argv, env, cwd, mode, network, writable, timeout_s).
	Changed []string `json:"changed,omitempty"`
}

// Result is the outcome of [Chain.Decide].
type Result struct {
	// Verdict is VerdictAllow or VerdictDeny.
	Verdict Verdict
	// Reason is, for a deny, "hook NAME: REASON"; "" for an allow.
	Reason string
	// Job is the job after every enforced adjust (a copy of the input when
	// none); meaningful for an allow.
	Job Job
	// Trail has one entry per hook that ran (optional hooks not asked for
	// are skipped), in order, ending at the deciding deny if any.
	Trail []TrailEntry
}

// Decide runs the chain on p.Job: each hook in order sees the job as the
// previous enforced hooks left it; the first enforced deny ends the chain.
// Safe for concurrent use; each call uses its own instances.
//
// A hook's failure is never an error: it becomes a deny (or, with on_error
// "allow", an allow of the job unchanged), recorded in the trail. Decide
// returns an error only when the chain itself could not run: ctx ended (the
// error satisfies errors.Is(err, ctx.Err())), or the chain is closed.
func (c *Chain) Decide(ctx context.Context, p DecideParams) (Result, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return Result{}, errors.New("hooks: chain is closed")
	}
	res := Result{Verdict: VerdictAllow, Job: p.Job.Clone()}
	wanted := make(map[string]bool, len(p.Extra))
	for _, name := range p.Extra {
		if _, ok := c.byName[name]; !ok {
			msg := fmt.Sprintf("the job asks for hook %q, which is not configured", name)
			res.Trail = append(res.Trail, TrailEntry{Hook: name, Mode: ModeEnforce, Decision: DecisionDeny, Reason: msg, Error: "hooks: unknown hook", Enforced: true})
			return deny(res, name, msg), nil
		}
		wanted[name] = true
	}

	var sb SandboxInfo
	var sbJob *Job // the job sb was computed for
	for _, h := range c.hooks {
		if h.cfg.Optional && !wanted[h.cfg.Name] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("hooks: interrupted: %w", err)
		}
		start := time.Now()
		e := TrailEntry{Hook: h.cfg.Name, SHA256: h.sha256, Mode: h.cfg.Mode}
		if c.sandbox != nil && (sbJob == nil || !jobEqual(*sbJob, res.Job)) {
			var err error
			if sb, err = c.sandbox(res.Job.Clone()); err != nil {
				e.Decision, e.Error, e.Enforced = DecisionDeny, "sandbox: "+err.Error(), true
				e.Reason = "the job cannot be confined: " + err.Error()
				e.DurationUS = time.Since(start).Microseconds()
				res.Trail = append(res.Trail, e)
				return deny(res, h.cfg.Name, e.Reason), nil
			}
			j := res.Job.Clone()
			sbJob = &j
		}
		d, newJob, stderr, reqLen, err := h.decide(ctx, res.Job, sb)
		if err == nil && d.Decision == DecisionAdjust && !h.cfg.MayWiden {
			err = narrowedOnResolvedPaths(res.Job, newJob, c.resolve)
		}
		if err != nil && ctx.Err() != nil {
			return Result{}, fmt.Errorf("hooks: interrupted: %w", ctx.Err())
		}
		e.Stderr = stderr
		e.Enforced = h.cfg.Mode == ModeEnforce
		switch {
		case errors.Is(err, ErrRequestTooLarge):
			// Never sent: whatever the hook's mode or on_error, the job
			// does not pass a hook that could not see it.
			e.Decision, e.Error, e.Reason, e.Enforced = DecisionDeny, err.Error(), err.Error(), true
		case err != nil:
			e.Error = err.Error()
			e.Reason = err.Error()
			e.Decision = DecisionDeny
			if h.cfg.OnError == OnErrorAllow {
				if reqLen <= OnErrorAllowMaxRequestBytes {
					e.Decision = DecisionAllow
				} else {
					// The job's own size may be the cause: fail closed.
					e.Reason = fmt.Sprintf("%s (on_error = %q does not apply: the request is %d bytes, more than %d)", e.Reason, OnErrorAllow, reqLen, OnErrorAllowMaxRequestBytes)
				}
			}
		default:
			e.Decision, e.Reason = d.Decision, d.Reason
			if d.Decision == DecisionAdjust {
				e.Changed = adjustedFields(d.Job)
			}
		}
		e.DurationUS = time.Since(start).Microseconds()
		res.Trail = append(res.Trail, e)
		if !e.Enforced {
			continue
		}
		switch e.Decision {
		case DecisionDeny:
			return deny(res, h.cfg.Name, e.Reason), nil
		case DecisionAdjust:
			res.Job = newJob
		}
	}
	return res, nil
}

func deny(res Result, hook, reason string) Result {
	res.Verdict = VerdictDeny
	res.Reason = fmt.Sprintf("hook %s: %s", hook, reason)
	return res
}

// decide calls h once on job and validates the decision; for an adjust it
// also returns the adjusted job. reqLen is the request's size in bytes. A
// request over MaxRequestBytes is not sent: the error wraps
// ErrRequestTooLarge.
func (h *hook) decide(ctx context.Context, job Job, sb SandboxInfo) (d Decision, newJob Job, stderr string, reqLen int, err error) {
	sb = sb.wire()
	req, err := json.Marshal(wireRequest{
		Version: WireVersion,
		Hook:    wireRequestHook{Name: h.cfg.Name, Settings: h.settings},
		Job:     job.Wire(),
		Sandbox: sb,
	})
	if err != nil {
		return Decision{}, Job{}, "", 0, fmt.Errorf("%w: encoding the request: %w", ErrBadDecision, err)
	}
	if len(req) > MaxRequestBytes {
		return Decision{}, Job{}, "", len(req), fmt.Errorf("%w: the request is %d bytes, more than the %d a hook is sent", ErrRequestTooLarge, len(req), MaxRequestBytes)
	}
	out, stderr, err := h.call(ctx, req)
	if err != nil {
		return Decision{}, Job{}, stderr, len(req), err
	}
	if d, err = ParseDecision(out); err != nil {
		return Decision{}, Job{}, stderr, len(req), err
	}
	if d.Decision != DecisionAdjust {
		return d, job, stderr, len(req), nil
	}
	if newJob, _, err = ApplyAdjustment(job, d.Job, h.cfg.MayWiden); err != nil {
		return Decision{}, Job{}, stderr, len(req), err
	}
	return d, newJob, stderr, len(req), nil
}

// adjustedFields lists the wire names a carries, in wire order.
func adjustedFields(a *Adjustment) []string {
	var out []string
	has := map[string]bool{
		"argv": a.Argv != nil, "env": a.Env != nil, "cwd": a.Cwd != nil, "mode": a.Mode != nil,
		"network": a.Network != nil, "unix_sockets": a.UnixSockets != nil, "writable": a.Writable != nil,
		"protect": a.Protect != nil, "hide": a.Hide != nil, "timeout_s": a.TimeoutS != nil,
	}
	for _, f := range adjustableFields {
		if has[f] {
			out = append(out, f)
		}
	}
	return out
}

// jobEqual reports whether a and b are the same job (nil and empty
// collections are equal).
func jobEqual(a, b Job) bool {
	eqMap := func(x, y map[string]string) bool {
		if len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || w != v {
				return false
			}
		}
		return true
	}
	return a.ID == b.ID && a.Name == b.Name && slices.Equal(a.Argv, b.Argv) && eqMap(a.Env, b.Env) &&
		a.Cwd == b.Cwd && a.Workspace == b.Workspace && a.Mode == b.Mode && a.Network == b.Network && a.UnixSockets == b.UnixSockets &&
		slices.Equal(a.Writable, b.Writable) && slices.Equal(a.Protect, b.Protect) && slices.Equal(a.Hide, b.Hide) && a.TimeoutS == b.TimeoutS && a.Attempt == b.Attempt &&
		eqMap(a.Labels, b.Labels)
}

package hooks

import (
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"time"
)

// Defaults and limits. They are constants: a [Config] field left at its zero
// value takes the default.
const (
	// WireVersion is the version of the request/decision wire format sent in
	// every request's "version" field.
	WireVersion = 1
	// DefaultTimeout is the default [Config.Timeout]: the wall-clock budget of
	// one call (instantiation and run for a command hook; one decide call for
	// a reactor).
	DefaultTimeout = time.Second
	// DefaultMemoryBytes is the default [Config.MemoryBytes]: 64 MiB.
	DefaultMemoryBytes = 64 << 20
	// MaxMemoryBytes is the largest [Config.MemoryBytes]: 4 GiB, the whole
	// 32-bit address space.
	MaxMemoryBytes = 4 << 30
	// MaxOutputBytes caps a hook's stdout (command ABI) or returned decision
	// (reactor ABI): 1 MiB. Writing more denies the job and interrupts the
	// module at once; nothing beyond the cap is buffered.
	MaxOutputBytes = 1 << 20
	// MaxStderrBytes is how much of a hook's stderr is kept for the trail:
	// the first 4 KiB. The rest is counted and dropped.
	MaxStderrBytes = 4 << 10
	// MaxRequestBytes caps the request sent to a hook: 16 MiB. A job whose
	// request would be larger is denied without calling the hook, whatever
	// the hook's mode or on_error ([ErrRequestTooLarge]). Jobs within the
	// queue's limits stay far below it.
	MaxRequestBytes = 16 << 20
	// OnErrorAllowMaxRequestBytes is the largest request for which a
	// failing hook with OnError "allow" lets the job go on: 64 KiB, thirty
	// times a typical request. Past it the failure may be the job's own
	// doing (a request built to exhaust the hook's memory or time), so it
	// denies.
	OnErrorAllowMaxRequestBytes = 64 << 10
	// pageBytes is the WebAssembly page size.
	pageBytes = 65536
)

// Hook modes ([Config.Mode], [TrailEntry.Mode]).
const (
	// ModeEnforce runs the hook and applies its decision. The default.
	ModeEnforce = "enforce"
	// ModeMonitor runs the hook and records its decision in the trail, but
	// never applies it: an adjust is not applied, a deny does not deny, and
	// the next hook sees the job unchanged.
	ModeMonitor = "monitor"
)

// What a failing hook means ([Config.OnError]).
const (
	// OnErrorDeny turns a hook failure (trap, timeout, bad output, ...) into
	// a deny. The default: fail closed.
	OnErrorDeny = "deny"
	// OnErrorAllow turns a hook failure into an allow of the job unchanged,
	// for requests of at most [OnErrorAllowMaxRequestBytes]; a larger
	// request's failure denies. The failure is still recorded in the trail.
	OnErrorAllow = "allow"
)

// Config is one hook as configured. The zero value of each optional field
// takes the documented default. A Config is read once by [NewChain] and not
// retained by reference (maps and slices are copied or encoded at load).
type Config struct {
	// Name identifies the hook in the trail and in a job's hooks list.
	// Required, unique within a chain, no NUL bytes.
	Name string
	// Path is the .wasm file. Required. Read once at load.
	Path string
	// SHA256 is the expected hex SHA-256 of the file (case-insensitive).
	// When set, a module whose digest differs is refused with
	// [ErrSHA256Mismatch]. Defaults to "" (not checked; the digest is still
	// computed and recorded in the trail).
	SHA256 string
	// Settings is the hook's TOML table from the config, sent as JSON in
	// every request's hook.settings. Must be encodable as JSON. nil is sent
	// as {}.
	Settings map[string]any
	// Timeout bounds one call. Defaults to [DefaultTimeout] (1s) when 0.
	Timeout time.Duration
	// MemoryBytes bounds the module's linear memory, rounded up to whole
	// 64 KiB pages. Defaults to [DefaultMemoryBytes] (64 MiB) when 0; at most
	// [MaxMemoryBytes].
	MemoryBytes uint64
	// Mode is [ModeEnforce] (the default when "") or [ModeMonitor].
	Mode string
	// OnError is [OnErrorDeny] (the default when "") or [OnErrorAllow].
	OnError string
	// MayWiden lets the hook's adjustments widen the sandbox (a wider mode,
	// network false to true, more writable roots). Defaults to false: such
	// an adjustment is a failure ([ErrWiden]).
	MayWiden bool
	// Optional hooks run only for jobs that name them in
	// [DecideParams.Extra] (a job's `hooks = [...]` list). Defaults to false:
	// the hook runs for every job.
	Optional bool
}

// Check does what [NewChain] does with c short of compiling its module:
// it checks the fields (an error wrapping [ErrConfig]), reads the module
// file ([ErrLoad]) and compares its digest with SHA256
// ([ErrSHA256Mismatch]). For commands that take the config without
// running hooks (paddock submit), so that a config the worker will refuse
// is refused there too. It reads the file once; safe for concurrent use.
func (c Config) Check() error {
	cfg, err := c.withDefaults()
	if err != nil {
		return err
	}
	_, _, err = readModule(cfg)
	return err
}

// withDefaults returns a copy of c with defaults filled in, or an error
// wrapping ErrConfig that names the hook and the field.
func (c Config) withDefaults() (Config, error) {
	bad := func(field, format string, args ...any) (Config, error) {
		return Config{}, &ConfigError{Hook: c.Name, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if c.Name == "" {
		return bad("name", "required")
	}
	if strings.ContainsRune(c.Name, 0) {
		return bad("name", "contains a NUL byte")
	}
	if c.Path == "" {
		return bad("path", "required")
	}
	if c.SHA256 != "" {
		b, err := hex.DecodeString(c.SHA256)
		if err != nil || len(b) != 32 {
			return bad("sha256", "%q is not 64 hex digits (a placeholder? `sha256sum %s` gives the module's)", c.SHA256, c.Path)
		}
		c.SHA256 = strings.ToLower(c.SHA256)
	}
	switch {
	case c.Timeout == 0:
		c.Timeout = DefaultTimeout
	case c.Timeout < 0:
		return bad("timeout", "%v is negative", c.Timeout)
	}
	switch {
	case c.MemoryBytes == 0:
		c.MemoryBytes = DefaultMemoryBytes
	case c.MemoryBytes > MaxMemoryBytes:
		return bad("memory", "%d bytes is above the maximum of %d (4 GiB)", c.MemoryBytes, uint64(MaxMemoryBytes))
	}
	c.MemoryBytes = (c.MemoryBytes + pageBytes - 1) / pageBytes * pageBytes
	switch c.Mode {
	case "":
		c.Mode = ModeEnforce
	case ModeEnforce, ModeMonitor:
	default:
		return bad("mode", "%q is not one of %q, %q", c.Mode, ModeEnforce, ModeMonitor)
	}
	switch c.OnError {
	case "":
		c.OnError = OnErrorDeny
	case OnErrorDeny, OnErrorAllow:
	default:
		return bad("on_error", "%q is not one of %q, %q", c.OnError, OnErrorDeny, OnErrorAllow)
	}
	if c.MemoryBytes/pageBytes > math.MaxUint32 {
		return bad("memory", "too large")
	}
	return c, nil
}

package hooks

import (
	"errors"
	"strconv"
)

// Sentinel errors. Load errors (from [NewChain]) wrap ErrConfig, ErrLoad,
// ErrSHA256Mismatch, ErrCacheDir or ErrSettings. A hook's failure during a
// decision is never returned as an error: it becomes a deny (or an allow,
// with OnError "allow") whose [TrailEntry.Error] text starts with the
// message of one of ErrNoABI,
// ErrTimeout, ErrTrap, ErrExit, ErrMemory, ErrCallStack, ErrOutputTooLarge,
// ErrRequestTooLarge, ErrBadDecision or ErrWiden.
// [ParseDecision] and [ApplyAdjustment] return errors wrapping ErrBadDecision
// and ErrWiden, so callers can tell them apart with [errors.Is].
var (
	// ErrConfig means a [Config] or [ChainOptions] field is invalid; the
	// message names the hook and the field.
	ErrConfig = errors.New("hooks: invalid config")
	// ErrCacheDir means [ChainOptions.CacheDir] cannot be created or
	// written: the file system's fault, not the config's. The error also
	// wraps the *fs.PathError that says why.
	ErrCacheDir = errors.New("hooks: compilation cache directory unusable")
	// ErrLoad means a module could not be read, compiled or validated
	// (unreadable file, not WebAssembly, imports other than
	// wasi_snapshot_preview1, initial memory above the hook's limit).
	ErrLoad = errors.New("hooks: cannot load module")
	// ErrTooLarge means a module is past one of the compile limits
	// ([MaxFunctions], [MaxFunctionInstructions], [MaxFunctionLocals],
	// [MaxNesting], [MaxFunctionBlocks], [MaxFunctionValues],
	// [MaxModuleCost]), or its tables start with more than 2^20 elements
	// or it has more than 65,536 globals (kept outside the memory limit).
	// It is refused at load, before anything is compiled; the error also
	// wraps ErrLoad and names the hook, the function and the limit.
	ErrTooLarge = errors.New("hooks: module too large to compile")
	// ErrSettings means a hook refused its settings when [NewChain] asked
	// it (a reactor's paddock_validate_settings, or a command module's
	// answer to the settings request), or failed while a reactor checked
	// them; the message names the hook and carries the hook's own message.
	ErrSettings = errors.New("hooks: settings refused")
	// ErrSHA256Mismatch means the module's SHA-256 differs from
	// [Config.SHA256]; the module is refused before it is compiled.
	ErrSHA256Mismatch = errors.New("hooks: module sha256 mismatch")
	// ErrNoABI means the module exports neither "_start" (command ABI) nor
	// both "paddock_alloc" and "paddock_decide" (reactor ABI); every
	// decision through such a hook fails with it.
	ErrNoABI = errors.New("hooks: module exports neither the command ABI (_start) nor the reactor ABI (paddock_alloc, paddock_decide)")

	// ErrTimeout means a call ran past [Config.Timeout] and was interrupted.
	ErrTimeout = errors.New("hooks: timed out")
	// ErrTrap means the module trapped (unreachable, out-of-bounds access,
	// stack exhaustion, ...), or could not be instantiated.
	ErrTrap = errors.New("hooks: trap")
	// ErrExit means a command-ABI module exited with a non-zero status, or a
	// reactor called proc_exit.
	ErrExit = errors.New("hooks: non-zero exit")
	// ErrMemory means the module tried to grow its memory past
	// [Config.MemoryBytes] and then failed.
	ErrMemory = errors.New("hooks: memory limit exceeded")
	// ErrCallStack means a call nested deeper than [MaxCallStackBytes] of
	// estimated frames and was stopped there (wazero keeps the call stack
	// in host memory, outside [Config.MemoryBytes]).
	ErrCallStack = errors.New("hooks: call stack limit exceeded")
	// ErrOutputTooLarge means the module wrote more than [MaxOutputBytes] of
	// stdout, or returned a decision longer than that; the call is cut short.
	ErrOutputTooLarge = errors.New("hooks: output too large")
	// ErrRequestTooLarge means the job's request would be larger than
	// [MaxRequestBytes]; it is not sent, and the job is denied whatever
	// the hook's mode or on_error.
	ErrRequestTooLarge = errors.New("hooks: request too large")
	// ErrBadDecision means the output is not exactly one valid decision
	// (invalid JSON, trailing data, an unknown decision or field, a missing
	// reason, an invalid adjustment value).
	ErrBadDecision = errors.New("hooks: invalid decision")
	// ErrWiden means an adjustment widens the sandbox (mode, network,
	// writable roots) and the hook's [Config.MayWiden] is false.
	ErrWiden = errors.New("hooks: adjustment widens the sandbox")
)

// SettingsError is a hook's refusal of its settings ([ErrSettings]),
// as [NewChain] reports it: its text is "hooks: settings refused: hook
// NAME: MSG", where Msg is the hook's own message (or what went wrong
// while it checked them), so that a caller can point at the line of the
// hook's settings.
type SettingsError struct {
	Hook, Msg string
}

func (e *SettingsError) Error() string {
	return ErrSettings.Error() + ": hook " + strconv.Quote(e.Hook) + ": " + e.Msg
}

// Unwrap returns [ErrSettings].
func (e *SettingsError) Unwrap() error { return ErrSettings }

// ConfigError is a [Config] field that is invalid, as [Config.Check] and
// [NewChain] report it: it wraps [ErrConfig], and its text is
// "hooks: invalid config: hook NAME: FIELD: MSG". Field is the TOML key
// ("name", "path", "sha256", "timeout", "memory", "mode", "on_error",
// "settings"), so that a caller can point at its line.
type ConfigError struct {
	Hook, Field, Msg string
}

func (e *ConfigError) Error() string {
	return ErrConfig.Error() + ": hook " + strconv.Quote(e.Hook) + ": " + e.Field + ": " + e.Msg
}

// Unwrap returns [ErrConfig].
func (e *ConfigError) Unwrap() error { return ErrConfig }

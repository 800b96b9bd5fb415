package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"paddock/hooks"
	"paddock/internal/filekind"
	"paddock/internal/suggest"
	"paddock/internal/tomlfile"
	"paddock/jobspec"
	"paddock/sandbox"
)

// Defaults for [Config]; each is what an unset key means.
const (
	// DefaultMode is the sandbox mode of a job whose file names none.
	DefaultMode = sandbox.ModeWorkspaceWrite
	// DefaultLogMaxBytes caps each of an attempt's stdout and stderr logs (16 MiB).
	DefaultLogMaxBytes int64 = 16 << 20
	// DefaultRetention is how long finished jobs are kept before pruning (7 days).
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultLease is how long a claim stays valid without a heartbeat.
	DefaultLease = 30 * time.Second
	// DefaultKillGrace is the time between SIGTERM and SIGKILL when a job
	// times out or is canceled.
	DefaultKillGrace = 5 * time.Second
	// DefaultShutdownGrace is how long a stopping worker lets running jobs
	// finish before it stops them and leaves them for recovery.
	DefaultShutdownGrace = 30 * time.Second
	// DefaultHookTimeout and DefaultHookMemoryBytes apply to a [[hook]]
	// without timeout or memory (1 s, 64 MiB).
	DefaultHookTimeout           = time.Second
	DefaultHookMemoryBytes int64 = 64 << 20
)

// DefaultEnvPassthrough lists the worker's environment variables a job
// inherits when they are set; everything else comes from the job's env table.
var DefaultEnvPassthrough = []string{"PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM"}

// Config is the paddock config file (TOML, snake_case keys). The zero value
// plus [Config.WithDefaults] is a working configuration.
type Config struct {
	// StateDir overrides the state directory when neither --state-dir nor
	// $PADDOCK_STATE_DIR is given. Relative paths resolve against the
	// config file's directory. Defaults to "" (the CLI default).
	StateDir string `toml:"state_dir"`
	// Store is the queue's database when it is not the state directory's
	// SQLite file: a PostgreSQL URL ("postgres://..." or
	// "postgresql://...", see [CheckStoreURL]) shared by workers on
	// several hosts. --store and $PADDOCK_STORE override it. Defaults to
	// "": the SQLite file in the state directory.
	Store string `toml:"store"`
	// Concurrency is how many jobs a worker runs at once. Defaults to the
	// number of CPUs.
	Concurrency int `toml:"concurrency"`
	// DefaultMode is the mode of jobs that name none. Defaults to
	// "workspace_write".
	DefaultMode string `toml:"default_mode"`
	// DefaultTimeout bounds jobs that set no timeout (Go duration). Defaults
	// to "0s": no limit.
	DefaultTimeout Duration `toml:"default_timeout"`
	// LogMaxBytes caps each attempt's stdout and stderr log in bytes; past
	// it the head and the tail are kept with a marker between. Defaults to
	// 16 MiB.
	LogMaxBytes int64 `toml:"log_max_bytes"`
	// Retention is how long finished jobs (and their logs and workspaces)
	// are kept; the worker prunes older ones hourly. Defaults to 168h; "0s"
	// keeps everything.
	Retention *Duration `toml:"retention"`
	// Lease is how long a claim lives without a heartbeat; heartbeats go
	// out every Lease/3. Defaults to 30s.
	Lease Duration `toml:"lease"`
	// KillGrace is the pause between SIGTERM and SIGKILL. Defaults to 5s.
	KillGrace Duration `toml:"kill_grace"`
	// ShutdownGrace is how long running jobs may finish after the worker
	// is asked to stop. Defaults to 30s.
	ShutdownGrace Duration `toml:"shutdown_grace"`
	// EnvPassthrough names the worker environment variables jobs inherit.
	// Defaults to [DefaultEnvPassthrough].
	EnvPassthrough []string `toml:"env_passthrough"`
	// Hooks is the hook chain, in order ([[hook]] tables).
	Hooks []HookConfig `toml:"hook"`

	// Path is the file the config was read from, or the default path that
	// was looked at and is missing ("" when none). Not a key.
	Path string `toml:"-"`

	// hookLines[i] are the lines of Hooks[i]'s keys in the file at Path
	// (at chainPath when set), by key, its [[hook]] header's under "";
	// absent when unknown ([hookLinesOf]).
	hookLines []map[string]int
	// chainPath is the file the [[hook]] tables came from when it is not
	// Path: the queue's policy's ([Config.WithPolicyChain]).
	chainPath string
}

// ChainSource names the file the chain's [[hook]] tables came from, for
// messages: the policy's file when the queue's policy names the chain
// ([Config.WithPolicyChain]), else Path ("" when none).
func (c Config) ChainSource() string {
	if c.chainPath != "" {
		return c.chainPath
	}
	return c.Path
}

// hookAt names Hooks[i]'s key (its [[hook]] header when key is "" or
// not in the file) for a message: "PATH:LINE" when the config came from
// a file, "PATH" when the line is unknown, "" otherwise.
func (c Config) hookAt(i int, key string) string {
	path := c.ChainSource()
	switch {
	case path == "":
		return ""
	case i >= len(c.hookLines):
		return path
	case c.hookLines[i][key] > 0:
		return path + ":" + strconv.Itoa(c.hookLines[i][key])
	case c.hookLines[i][""] > 0:
		return path + ":" + strconv.Itoa(c.hookLines[i][""])
	}
	return path
}

// hookLinesOf returns the lines of the (i+1)th [[hook]] table of kl: its
// header's under "", each key's under the key.
func hookLinesOf(kl tomlfile.Lines, i int) map[string]int {
	m := map[string]int{"": kl["hook."+strconv.Itoa(i)]}
	for _, k := range hookKeys {
		if l := kl["hook."+strconv.Itoa(i)+"."+k]; l > 0 {
			m[k] = l
		}
	}
	return m
}

// CheckHooks checks every [[hook]] as a worker would load it, short of
// compiling its module: its fields, its module file, and the file's
// digest against sha256 ([hooks.Config.Check]). Each error is prefixed
// with the config file and the line of the hook's [[hook]] table. It
// reads every module once; commands that run no hook (paddock submit)
// call it so that a config a worker would refuse is refused there too.
func (c Config) CheckHooks() error {
	if problems := c.hookProblems(); len(problems) > 0 {
		return fmt.Errorf("%w:\n  %s", ErrConfig, strings.Join(problems, "\n  "))
	}
	return nil
}

// hookProblems are CheckHooks' problems, each with its [[hook]] table's
// place.
func (c Config) hookProblems() []string {
	var problems []string
	for i, h := range c.HookConfigs() {
		err := h.Check()
		if err == nil {
			continue
		}
		// Each problem at the line of the key at fault, in the words
		// of the file: the package's prefix says nothing to its reader.
		key, msg := "", err.Error()
		var ce *hooks.ConfigError
		switch {
		case errors.As(err, &ce):
			key, msg = ce.Field, fmt.Sprintf("hook %q: %s: %s", ce.Hook, ce.Field, ce.Msg)
		case errors.Is(err, hooks.ErrSHA256Mismatch):
			key = "sha256"
		case errors.Is(err, hooks.ErrLoad):
			key = "path"
		}
		at := c.hookAt(i, key)
		if at != "" {
			at += ": "
		}
		problems = append(problems, at+msg)
	}
	return problems
}

// PlaceChainError puts an error of [hooks.NewChain] on the chain's
// [[hook]] tables: a hook's refusal of its settings
// ([hooks.SettingsError]) becomes "FILE:LINE: hook NAME: settings
// refused: MSG", at the line of that hook's settings key (its table's
// header when it has none), still wrapping err. Any other error, or one
// naming no hook of c, is returned as it is.
func (c Config) PlaceChainError(err error) error {
	var se *hooks.SettingsError
	if !errors.As(err, &se) {
		return err
	}
	i := slices.IndexFunc(c.Hooks, func(h HookConfig) bool { return h.Name == se.Hook })
	if i < 0 {
		return err
	}
	at := c.hookAt(i, "settings")
	if at == "" {
		return err
	}
	return &placedError{msg: fmt.Sprintf("%s: hook %q: settings refused: %s", at, se.Hook, se.Msg), err: err}
}

// placedError is an error reworded with its place in a file, wrapping
// the original.
type placedError struct {
	msg string
	err error
}

func (e *placedError) Error() string { return e.msg }
func (e *placedError) Unwrap() error { return e.err }

// HookConfig is one [[hook]] table. Relative paths resolve against the
// config file's directory.
type HookConfig struct {
	Name     string         `toml:"name"`
	Path     string         `toml:"path"`
	SHA256   string         `toml:"sha256"`
	Settings map[string]any `toml:"settings"`
	// Timeout per decision. Defaults to 1s.
	Timeout Duration `toml:"timeout"`
	// Memory limit: bytes as an integer or a string with a unit ("64MiB").
	// Defaults to 64 MiB.
	Memory ByteSize `toml:"memory"`
	// Mode is "enforce" (default) or "monitor".
	Mode string `toml:"mode"`
	// OnError is "deny" (default) or "allow".
	OnError string `toml:"on_error"`
	// MayWiden lets the hook's adjustments widen the sandbox. Defaults to false.
	MayWiden bool `toml:"may_widen"`
	// Optional hooks run only for jobs that list them in `hooks`. Defaults to false.
	Optional bool `toml:"optional"`
}

// Duration is a time.Duration written as a Go duration string ("90s", "1h30m").
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string; negative durations are refused.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("want a Go duration such as \"30s\" or \"1h\": %w", err)
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", b)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// ByteSize is a size in bytes, written as an integer or as a string with a
// binary or decimal unit: "64MiB", "512KiB", "1GB", "1048576".
type ByteSize int64

// UnmarshalText parses a size string such as "64MiB" (see ParseByteSize).
// A TOML integer is decoded as a number of bytes without calling it;
// LoadConfig refuses a negative one.
func (b *ByteSize) UnmarshalText(text []byte) error {
	n, err := ParseByteSize(string(text))
	if err != nil {
		return err
	}
	*b = ByteSize(n)
	return nil
}

// ParseByteSize parses "64MiB", "10 MB", "4096" (bytes) and the like.
// Units: B, KB, MB, GB (powers of 1000) and KiB, MiB, GiB (powers of 1024).
func ParseByteSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	num, unit := strings.TrimSpace(t[:i]), strings.TrimSpace(t[i:])
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a non-negative integer with an optional unit (B, KiB, MiB, GiB, KB, MB, GB)", s)
	}
	mult := map[string]int64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
	m, ok := mult[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (want B, KiB, MiB, GiB, KB, MB or GB)", s, unit)
	}
	return n * m, nil
}

// configKeys and hookKeys are the keys of the config and of a [[hook]]
// table, for did-you-mean hints.
var (
	configKeys = []string{"state_dir", "store", "concurrency", "default_mode", "default_timeout", "log_max_bytes", "retention", "lease", "kill_grace", "shutdown_grace", "env_passthrough", "hook"}
	hookKeys   = []string{"name", "path", "sha256", "settings", "timeout", "memory", "mode", "on_error", "may_widen", "optional"}
)

// ErrConfig marks every error LoadConfig returns for a bad config file.
var ErrConfig = errors.New("runner: bad config")

// LoadConfig reads the config file at path. A missing file is not an error
// when missingOK is true (the default path); it yields the defaults. Unknown
// keys, wrong types and bad values are errors that name the file, the line
// when known, and the key; they wrap [ErrConfig].
// MaxConfigBytes is the largest config, policy or hook cases file paddock
// reads: 16 MiB, far above any real one. A device such as /dev/zero is
// refused unread.
const MaxConfigBytes = 16 << 20

func LoadConfig(path string, missingOK bool) (Config, error) {
	var c Config
	if path == "" {
		return c.WithDefaults(), nil
	}
	data, err := filekind.ReadFile(path, nil, MaxConfigBytes, "a config file")
	if err != nil {
		if missingOK && errors.Is(err, fs.ErrNotExist) {
			c.Path = path // read by the next start if created: the fence keeps jobs off it
			return c.WithDefaults(), nil
		}
		return c, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	var problems []string
	data = tomlfile.TrimBOM(data) // a UTF-8 byte-order mark, as editors write
	// A value of a type its key does not take is said in the reference's
	// words, before the decoder would (a duration given as a number would
	// reach Duration.UnmarshalText as "5").
	kl := tomlfile.Locate(data, true)
	if where := misTyped(data, kl); where != "" {
		return c, fmt.Errorf("%w: %s:%s", ErrConfig, path, where)
	}
	md, err := tomlfile.Decode(data, &c, configTypeWords)
	if err != nil {
		var te *tomlfile.Error
		if errors.As(err, &te) && te.Line > 0 {
			return c, fmt.Errorf("%w: %s:%d: %s", ErrConfig, path, te.Line, strings.TrimPrefix(te.Error(), fmt.Sprintf("line %d: ", te.Line)))
		}
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	// Unknown keys (settings tables are maps: free-form, sent to the hook
	// as JSON, never reported here). The decoder lists each occurrence, in
	// file order; the scan places them.
	seen := map[string]int{} // key -> occurrences placed so far
	for _, k := range outermost(md.Undecoded()) {
		if len(k) > 2 && k[0] == "hook" && k[1] == "settings" {
			continue // inside a settings table: the hook's to judge
		}
		cands, last := configKeys, k[len(k)-1]
		if len(k) > 1 && k[0] == "hook" {
			cands = hookKeys
		}
		line := undecodedLine(kl, k, seen[k.String()])
		seen[k.String()]++
		problems = append(problems, fmt.Sprintf("%s:%d: unknown key %q%s", path, line, k.String(), suggest.DidYouMean(last, cands)))
	}
	c.Path = path
	for i := range c.Hooks {
		c.hookLines = append(c.hookLines, hookLinesOf(kl, i))
	}
	dir := filepath.Dir(path)
	if c.StateDir != "" && !filepath.IsAbs(c.StateDir) {
		c.StateDir = filepath.Join(dir, c.StateDir)
	}
	for i := range c.Hooks {
		if c.Hooks[i].Path != "" && !filepath.IsAbs(c.Hooks[i].Path) {
			c.Hooks[i].Path = filepath.Join(dir, c.Hooks[i].Path)
		}
	}
	c = c.WithDefaults()
	for _, p := range c.validate() {
		// Problems of top-level keys start with the key: give its line;
		// those of a [[hook]] table, the table's.
		if p.hook >= 0 {
			problems = append(problems, c.hookAt(p.hook, p.key)+": "+p.msg)
			continue
		}
		key, _, _ := strings.Cut(p.msg, ":")
		if l := kl[key]; l > 0 {
			problems = append(problems, fmt.Sprintf("%s:%d: %s", path, l, p.msg))
			continue
		}
		problems = append(problems, path+": "+p.msg)
	}
	if len(problems) > 0 {
		return c, fmt.Errorf("%w:\n  %s", ErrConfig, strings.Join(orderByLine(path, problems), "\n  "))
	}
	return c, nil
}

// WithDefaults returns a copy of c with every unset field at its default.
func (c Config) WithDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = runtime.NumCPU()
	}
	if c.DefaultMode == "" {
		c.DefaultMode = string(DefaultMode)
	}
	if c.LogMaxBytes == 0 {
		c.LogMaxBytes = DefaultLogMaxBytes
	}
	if c.Retention == nil {
		c.Retention = &Duration{DefaultRetention}
	}
	if c.Lease.Duration == 0 {
		c.Lease.Duration = DefaultLease
	}
	if c.KillGrace.Duration == 0 {
		c.KillGrace.Duration = DefaultKillGrace
	}
	if c.ShutdownGrace.Duration == 0 {
		c.ShutdownGrace.Duration = DefaultShutdownGrace
	}
	if c.EnvPassthrough == nil {
		c.EnvPassthrough = append([]string(nil), DefaultEnvPassthrough...)
	}
	hs := make([]HookConfig, len(c.Hooks))
	for i, h := range c.Hooks {
		if h.Timeout.Duration == 0 {
			h.Timeout.Duration = DefaultHookTimeout
		}
		if h.Memory == 0 {
			h.Memory = ByteSize(DefaultHookMemoryBytes)
		}
		if h.Mode == "" {
			h.Mode = "enforce"
		}
		if h.OnError == "" {
			h.OnError = "deny"
		}
		hs[i] = h
	}
	c.Hooks = hs
	return c
}

// problem is one thing wrong with a config: msg starts with the key at
// fault; hook is the index of the [[hook]] table it is in, or -1.
type problem struct {
	hook int
	key  string // the [[hook]] table's key at fault, when hook >= 0
	msg  string
}

// validate lists every problem of a defaulted config, each naming its key.
func (c Config) validate() []problem {
	var ps []problem
	top := func(format string, args ...any) { ps = append(ps, problem{-1, "", fmt.Sprintf(format, args...)}) }
	if c.Concurrency < 0 {
		top("concurrency: must be 0 (the number of CPUs) or more, got %d", c.Concurrency)
	}
	if _, err := sandbox.ParseMode(c.DefaultMode); err != nil {
		top("default_mode: %v%s", err, modeHint(c.DefaultMode))
	}
	if c.LogMaxBytes < 4096 {
		top("log_max_bytes: must be at least 4096, got %d", c.LogMaxBytes)
	}
	if err := CheckStoreURL(c.Store); err != nil {
		top("store: %v", err)
	}
	if c.Lease.Duration < time.Second {
		top("lease: must be at least 1s, got %s", c.Lease.Duration)
	}
	seen := map[string]bool{}
	for i, h := range c.Hooks {
		where := fmt.Sprintf("hook %d", i+1)
		if h.Name != "" {
			where = fmt.Sprintf("hook %q", h.Name)
		}
		bad := func(format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			key, _, _ := strings.Cut(msg, ":")
			ps = append(ps, problem{i, key, where + ": " + msg})
		}
		switch {
		case h.Name == "":
			bad("name: required")
		case seen[h.Name]:
			bad("name: used by an earlier hook")
		}
		seen[h.Name] = true
		if h.Path == "" {
			bad("path: required")
		}
		if h.Mode != "enforce" && h.Mode != "monitor" {
			bad("mode: want \"enforce\" or \"monitor\", got %q", h.Mode)
		}
		if h.OnError != "deny" && h.OnError != "allow" {
			bad("on_error: want \"deny\" or \"allow\", got %q", h.OnError)
		}
	}
	return ps
}

// CheckHookNames refuses jobs that ask (in `hooks`) for a hook this config
// does not define: the chain would deny them at every attempt, so submit,
// run and the inbox refuse them up front. The error lists every such job
// as "file:line: job "name": hooks: unknown hook ...", one per line; the
// line is that of the job's (or [defaults]') hooks key when source, the
// file's text, lets queue.KeyLines place it, else the job's first line.
func (c Config) CheckHookNames(file string, source []byte, specs []jobspec.Spec) error {
	known := map[string]bool{}
	var names []string
	for _, h := range c.Hooks {
		known[h.Name] = true
		names = append(names, h.Name)
	}
	configured := "none are configured"
	if len(names) > 0 {
		configured = "configured: " + strings.Join(names, ", ")
	}
	if c.chainPath != "" {
		configured += ", in the chain of the queue's policy, " + c.chainPath
	}
	var problems []string
	var at func(int, string) int
	for _, sp := range specs {
		for _, h := range sp.Hooks {
			if !known[h] {
				if at == nil {
					at = jobspec.KeyLines(source)
				}
				problems = append(problems, fmt.Sprintf("%s:%d: job %q: hooks: unknown hook %q (%s)", file, at(sp.Line, "hooks"), sp.Name, h, configured))
			}
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "\n"))
	}
	return nil
}

// WithPolicyChain returns a copy of c whose chain is p's: messages about
// a hook name p's file and the hook's line there ([Config.ChainSource]),
// not c's file.
func (c Config) WithPolicyChain(p Policy) Config {
	c.Hooks, c.hookLines, c.chainPath = slices.Clone(p.Hooks), slices.Clone(p.hookLines), p.Path
	if c.chainPath == "" {
		c.chainPath = "the queue's policy"
	}
	return c
}

// HookConfigs converts the [[hook]] tables to the hooks package's form.
func (c Config) HookConfigs() []hooks.Config {
	out := make([]hooks.Config, len(c.Hooks))
	for i, h := range c.Hooks {
		out[i] = hooks.Config{
			Name:        h.Name,
			Path:        h.Path,
			SHA256:      h.SHA256,
			Settings:    h.Settings,
			Timeout:     h.Timeout.Duration,
			MemoryBytes: uint64(h.Memory),
			Mode:        h.Mode,
			OnError:     h.OnError,
			MayWiden:    h.MayWiden,
			Optional:    h.Optional,
		}
	}
	return out
}

// misTyped finds the first duration key whose value is not a string, a
// hook memory that is neither an integer nor a string, or hook settings
// that are not a table, and returns "LINE: KEY: expected ..., got a TOML
// TYPE"; "" when there is none (or data is not TOML: the decoder says
// so). kl places the keys.
func misTyped(data []byte, kl tomlfile.Lines) string {
	var m map[string]any
	if _, err := tomlfile.Decode(data, &m, nil); err != nil {
		return ""
	}
	durations := []string{"default_timeout", "retention", "lease", "kill_grace", "shutdown_grace"}
	check := func(table map[string]any, key, path, dotted string, ok func(any) bool, want string) string {
		v, present := table[key]
		if !present || ok(v) {
			return ""
		}
		return fmt.Sprintf("%d: %s: expected %s, got a TOML %s", kl.Lookup(path), dotted, want, tomlfile.TypeName(v))
	}
	isString := func(v any) bool { _, ok := v.(string); return ok }
	isTable := func(v any) bool { _, ok := v.(map[string]any); return ok }
	isSize := func(v any) bool {
		switch v.(type) {
		case string, int64:
			return true
		}
		return false
	}
	for _, k := range durations {
		if w := check(m, k, k, k, isString, `a duration string such as "30s"`); w != "" {
			return w
		}
	}
	hooks, _ := m["hook"].([]map[string]any) // [[hook]] tables
	for i, t := range hooks {
		at := "hook." + strconv.Itoa(i) + "."
		if w := check(t, "timeout", at+"timeout", "hook.timeout", isString, `a duration string such as "30s"`); w != "" {
			return w
		}
		if w := check(t, "memory", at+"memory", "hook.memory", isSize, `a size (bytes, or a string such as "64MiB")`); w != "" {
			return w
		}
		if w := check(t, "settings", at+"settings", "hook.settings", isTable, "a table"); w != "" {
			return w
		}
	}
	return ""
}

// configTypeWords names, in the reference's words, the types the
// decoder names when a value does not fit its key.
var configTypeWords = map[string]string{
	"integer": "an integer", "string": "a string", "boolean": "a boolean", "float": "a number",
	"slice": "an array", "map": "a table",
}

// outermost returns the keys of ks that no other key of ks contains: an
// unknown table is one mistake, not one more for each key inside it
// (hook.setings, not also hook.setings.deny).
func outermost(ks []toml.Key) []toml.Key {
	var out []toml.Key
	for _, k := range ks {
		inside := slices.ContainsFunc(ks, func(o toml.Key) bool {
			return len(o) < len(k) && slices.Equal(o, k[:len(o)])
		})
		if !inside {
			out = append(out, k)
		}
	}
	return out
}

// undecodedLine is the line of the n-th occurrence (0-based) of the
// unknown key k: top-level keys and [[hook]] keys ("hook", "0", key) are
// placed; 0 when the scan cannot tell.
func undecodedLine(kl tomlfile.Lines, k toml.Key, n int) int {
	if len(k) >= 2 && k[0] == "hook" {
		rest := strings.Join(k[1:], ".")
		for i := 0; ; i++ {
			head := "hook." + strconv.Itoa(i)
			if _, ok := kl[head]; !ok {
				return 0
			}
			if l, ok := kl[head+"."+rest]; ok {
				if n == 0 {
					return l
				}
				n--
			}
		}
	}
	return kl.Lookup(k.String())
}

// CheckStoreURL refuses a store location paddock cannot open: anything
// but "" (the state directory's SQLite file) or a PostgreSQL URL, whose
// scheme is postgres or postgresql (libpq's URI form,
// https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNSTRING-URIS).
// The message never repeats the URL (it may hold a password).
func CheckStoreURL(store string) error {
	if store == "" {
		return nil
	}
	u, err := url.Parse(store)
	if err != nil {
		return errors.New("not a URL: expected postgres://USER@HOST/DATABASE (or postgresql://)")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return fmt.Errorf("unsupported scheme %q: expected postgres://USER@HOST/DATABASE (or postgresql://); leave it unset for the state directory's SQLite file", u.Scheme)
	}
	return nil
}

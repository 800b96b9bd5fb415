package runner

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/hooks"
	"paddock/jobspec"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

func TestLoadConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := LoadConfig(filepath.Join(t.TempDir(), "absent.toml"), true)
	require.NoError(t, err)
	require.Equal(t, runtime.NumCPU(), c.Concurrency)
	require.Equal(t, "workspace_write", c.DefaultMode)
	require.Equal(t, DefaultLogMaxBytes, c.LogMaxBytes)
	require.Equal(t, DefaultLease, c.Lease.Duration)
	require.Equal(t, DefaultRetention, c.Retention.Duration)
	require.Equal(t, DefaultEnvPassthrough, c.EnvPassthrough)

	_, err = LoadConfig(filepath.Join(t.TempDir(), "absent.toml"), false)
	require.ErrorIs(t, err, ErrConfig, "an explicit config that is missing is an error")
}

func TestLoadConfigFull(t *testing.T) {
	t.Parallel()
	p := writeConfig(t, `
state_dir = "state"
concurrency = 3
default_mode = "read_only"
default_timeout = "90s"
log_max_bytes = 65536
retention = "0s"
lease = "10s"
env_passthrough = ["PATH"]

[[hook]]
name = "deny"
path = "hooks/deny.wasm"
timeout = "250ms"
memory = "32MiB"
mode = "monitor"
[hook.settings]
deny = ["curl"]
nested = { a = 1 }
`)
	c, err := LoadConfig(p, false)
	require.NoError(t, err)
	dir := filepath.Dir(p)
	require.Equal(t, filepath.Join(dir, "state"), c.StateDir)
	require.Equal(t, 3, c.Concurrency)
	require.Equal(t, 90*time.Second, c.DefaultTimeout.Duration)
	require.Equal(t, time.Duration(0), c.Retention.Duration, "0s keeps everything")
	require.Len(t, c.Hooks, 1)
	h := c.HookConfigs()[0]
	require.Equal(t, filepath.Join(dir, "hooks/deny.wasm"), h.Path)
	require.Equal(t, uint64(32<<20), h.MemoryBytes)
	require.Equal(t, 250*time.Millisecond, h.Timeout)
	require.Equal(t, "monitor", h.Mode)
	require.Equal(t, "deny", h.OnError)
	require.Equal(t, []any{"curl"}, h.Settings["deny"])
}

func TestLoadConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		want       []string
	}{
		{"unknown key with line", "concurrency = 1\nconcurency = 2\n", []string{":2: unknown key \"concurency\" (did you mean \"concurrency\"?)"}},
		{"wrong type", "concurrency = \"two\"\n", []string{":1: concurrency: expected an integer, got a TOML string"}},
		{"wrong type in hook", "[[hook]]\nname = \"h\"\npath = \"x\"\nmay_widen = \"yes\"\n", []string{":4: hook.may_widen: expected a boolean, got a TOML string"}},
		{"negative memory", "[[hook]]\nname = \"h\"\npath = \"x\"\nmemory = -5\n", []string{":4: hook.memory: size \"-5\": want a non-negative integer"}},
		{"bad mode", "lease = \"5s\"\ndefault_mode = \"yolo\"\n", []string{":2: default_mode", "yolo"}},
		{"bad duration", "lease = \"soon\"\n", []string{"Go duration"}},
		{"negative duration", "kill_grace = \"-1s\"\n", []string{"negative"}},
		{"bad memory unit", "[[hook]]\nname = \"h\"\npath = \"h.wasm\"\nmemory = \"12 parsecs\"\n", []string{"unknown unit"}},
		{"hook without path and duplicate", "[[hook]]\nname = \"h\"\n[[hook]]\nname = \"h\"\npath = \"x\"\n", []string{"hook \"h\": path: required", "used by an earlier hook"}},
		{"hook bad on_error", "[[hook]]\nname = \"h\"\npath = \"x\"\non_error = \"shrug\"\n", []string{"on_error"}},
		{"unknown hook key", "[[hook]]\nname = \"h\"\npath = \"x\"\nmay_widden = true\n", []string{":4: unknown key \"hook.may_widden\" (did you mean \"may_widen\"?)"}},
		{"syntax", "concurrency = = 1\n", []string{":1:"}},
		{"duration as an integer", "concurrency = 1\nlease = 5\n", []string{":2: lease: expected a duration string such as \"30s\", got a TOML integer"}},
		{"hook timeout as an integer", "[[hook]]\nname = \"h\"\npath = \"x\"\ntimeout = 3\n", []string{":4: hook.timeout: expected a duration string"}},
		{"memory as a float", "[[hook]]\nname = \"h\"\npath = \"x\"\nmemory = 1.5\n", []string{":4: hook.memory: expected a size", "got a TOML float"}},
		{"settings not a table", "[[hook]]\nname = \"h\"\npath = \"x\"\nsettings = 5\n", []string{"hook.settings: expected a table, got a TOML integer"}},
		{"store of another kind", "concurrency = 1\nstore = \"mysql://u:secret@db/q\"\n", []string{":2: store: unsupported scheme \"mysql\": expected postgres://"}},
		{"store not a URL", "store = \"postgres://[::1\"\n", []string{":1: store: not a URL"}},
		{"byte-order mark kept lines", "\xef\xbb\xbfconcurrency = 1\nconcurency = 2\n", []string{":2: unknown key \"concurency\""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := writeConfig(t, tt.text)
			_, err := LoadConfig(p, false)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrConfig))
			require.Contains(t, err.Error(), p, "the error names the file")
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseByteSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "64MiB": 64 << 20, "1 GiB": 1 << 30, "10KB": 10000, "3B": 3} {
		got, err := ParseByteSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "MiB", "-1", "1.5MiB", "7 furlongs"} {
		_, err := ParseByteSize(in)
		require.Error(t, err, in)
	}
}

// The did-you-mean candidates are every key the config structs decode.
func TestConfigKeysMatchStructs(t *testing.T) {
	t.Parallel()
	tags := func(v any) []string {
		var out []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			if tag := rt.Field(i).Tag.Get("toml"); tag != "" && tag != "-" {
				out = append(out, tag)
			}
		}
		return out
	}
	require.ElementsMatch(t, tags(Config{}), configKeys)
	require.ElementsMatch(t, tags(HookConfig{}), hookKeys)
}

func TestCheckHookNames(t *testing.T) {
	t.Parallel()
	c := Config{Hooks: []HookConfig{{Name: "deny"}, {Name: "audit"}}}
	require.NoError(t, c.CheckHookNames("f.toml", nil, []jobspec.Spec{{Name: "a", Hooks: []string{"audit"}}, {Name: "b"}}))
	err := c.CheckHookNames("f.toml", nil, []jobspec.Spec{{Name: "a", Line: 3, Hooks: []string{"audti", "deny"}}, {Name: "b", Line: 9, Hooks: []string{"x"}}})
	require.EqualError(t, err, `f.toml:3: job "a": hooks: unknown hook "audti" (configured: deny, audit)`+"\n"+
		`f.toml:9: job "b": hooks: unknown hook "x" (configured: deny, audit)`)
	require.ErrorContains(t, Config{}.CheckHookNames("g.toml", nil, []jobspec.Spec{{Hooks: []string{"x"}}}), "none are configured")
	// With the file's text, the line is the hooks key's.
	src := "[[job]]\nname = \"a\"\ncommand = \"true\"\nhooks = [\"audti\"]\n"
	specs, err := jobspec.Parse("h.toml", []byte(src), "/srv")
	require.NoError(t, err)
	require.EqualError(t, c.CheckHookNames("h.toml", []byte(src), specs), `h.toml:4: job "a": hooks: unknown hook "audti" (configured: deny, audit)`)
}

// A PostgreSQL URL is a store; "" is the state directory's SQLite file;
// messages never repeat the URL (it may hold a password).
func TestCheckStoreURL(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "postgres://u@db/q", "postgresql://u:pw@db:5433/q?sslmode=verify-full", "postgres://u@/q?host=/run/postgresql"} {
		require.NoError(t, CheckStoreURL(ok), ok)
	}
	for _, bad := range []string{"mysql://u:hunter2@db/q", "/var/lib/paddock/q.db", "host=db password=hunter2"} {
		err := CheckStoreURL(bad)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "hunter2")
	}
	p := writeConfig(t, "store = \"postgres://u@db/q\"\n")
	c, err := LoadConfig(p, false)
	require.NoError(t, err)
	require.Equal(t, "postgres://u@db/q", c.Store)
}

// TestPlaceChainError: a hook's refusal of its settings is reported at
// the line of that hook's settings key (its header without one), in the
// file's words, still wrapping hooks.ErrSettings; other errors pass.
func TestPlaceChainError(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "c.toml")
	require.NoError(t, os.WriteFile(p, []byte("[[hook]]\nname = \"a\"\npath = \"/a.wasm\"\n\n[[hook]]\nname = \"b\"\npath = \"/b.wasm\"\nsettings = { x = 1 }\n"), 0o644))
	c, err := LoadConfig(p, false)
	require.NoError(t, err)
	for hook, want := range map[string]string{
		"b": p + `:8: hook "b": settings refused: x: no`,
		"a": p + `:1: hook "a": settings refused: x: no`,
	} {
		err := c.PlaceChainError(&hooks.SettingsError{Hook: hook, Msg: "x: no"})
		require.EqualError(t, err, want)
		require.ErrorIs(t, err, hooks.ErrSettings)
	}
	other := errors.New("other")
	require.Same(t, other, c.PlaceChainError(other))
	unknown := &hooks.SettingsError{Hook: "zz", Msg: "m"}
	require.Same(t, unknown, c.PlaceChainError(unknown).(*hooks.SettingsError))
	require.NoError(t, c.PlaceChainError(nil))
}

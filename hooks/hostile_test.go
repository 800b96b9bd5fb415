package hooks

import (
	"bufio"
	"context"
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// procStatusKiB reads a "Vm...:  N kB" field of /proc/self/status, or -1.
func procStatusKiB(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// peakRSSGrowthMiB runs f and returns how far the process's peak resident
// set rose above its resident set before f, in MiB (-1 when unknown: no
// /proc or no clear_refs).
func peakRSSGrowthMiB(f func()) float64 {
	runtime.GC()
	debug.FreeOSMemory()
	before := procStatusKiB("VmRSS")
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil || before < 0 {
		f()
		return -1
	}
	f()
	return float64(procStatusKiB("VmHWM")-before) / 1024
}

func TestHostileModules(t *testing.T) {
	const timeout = DefaultTimeout
	const slack = time.Second // 2 shared cores: scheduling, instantiation
	const memory = 24 << 20
	const maxGrowthMiB = 100 // memory bomb: 24 MiB of linear memory, copied while growing, plus the Go heap

	cases := []struct {
		do      string
		want    error
		contain string
		only    string // "command" or "reactor" when the case applies to one ABI
	}{
		{do: "loop", want: ErrTimeout, contain: "did not finish within 1s"},
		{do: "sleep", want: ErrTimeout},
		{do: "membomb", want: ErrMemory, contain: "grew past its memory limit of 24 MiB"},
		{do: "trap", want: ErrTrap, contain: "out of bounds memory access"},
		{do: "stdout", want: ErrOutputTooLarge, contain: "more than 1048576 bytes of stdout"},
		{do: "huge", want: ErrOutputTooLarge},
		{do: "badjson", want: ErrBadDecision, contain: "not a JSON object"},
		{do: "unknown", want: ErrBadDecision, contain: `unknown decision "maybe"`},
		{do: "unknownfield", want: ErrBadDecision, contain: `unknown field "color"`},
		{do: "two", want: ErrBadDecision, contain: "trailing data"},
		{do: "noreason", want: ErrBadDecision, contain: "deny without a reason"},
		{do: "widen", want: ErrWiden, contain: "mode workspace_write -> danger_full_access"},
		{do: "emptyargv", want: ErrBadDecision, contain: "argv is empty"},
		{do: "relargv", want: ErrBadDecision, contain: "relative path"},
		{do: "exit1", want: ErrExit, contain: "exited with status 1"},
		{do: "panic", want: ErrExit, contain: "exited with status 2", only: ABICommand},
		{do: "panic", want: ErrTrap, contain: "unreachable", only: ABIReactor}, // Go aborts a panicking wasmexport
		{do: "badptr", want: ErrTrap, contain: "outside memory", only: ABIReactor},
		{do: "badptr", want: ErrBadDecision, only: ABICommand},
	}
	for _, abi := range []string{ABICommand, ABIReactor} {
		t.Run(abi, func(t *testing.T) {
			mod := "hostile"
			if abi == ABIReactor {
				mod = "hostile-reactor"
			}
			c := newTestChain(t, ChainOptions{Hooks: []Config{{
				Name: "hostile", Path: wasmPath(t, mod), Timeout: timeout, MemoryBytes: memory,
			}}})
			require.Equal(t, abi, c.Hooks()[0].ABI)
			for _, tc := range cases {
				if tc.only != "" && tc.only != abi {
					continue
				}
				t.Run(tc.do, func(t *testing.T) {
					var res Result
					var took time.Duration
					growth := peakRSSGrowthMiB(func() { res, took = decide(t, c, testJob(tc.do)) })
					t.Logf("%s/%s: %v, peak RSS +%.1f MiB: %s", abi, tc.do, took.Round(time.Millisecond), growth, res.Reason)
					require.Equal(t, VerdictDeny, res.Verdict)
					require.Len(t, res.Trail, 1)
					e := res.Trail[0]
					require.Equal(t, DecisionDeny, e.Decision)
					require.True(t, e.Enforced)
					require.True(t, strings.HasPrefix(e.Error, tc.want.Error()), "error %q should start with %q", e.Error, tc.want)
					require.Contains(t, e.Error, tc.contain)
					require.Contains(t, res.Reason, "hook hostile: ")
					require.Less(t, took, timeout+slack)
					require.Less(t, growth, float64(maxGrowthMiB))

					// The next job is decided normally.
					res, _ = decide(t, c, testJob("allow"))
					require.Equal(t, VerdictAllow, res.Verdict, res.Reason)
					require.Empty(t, res.Trail[0].Error)
				})
			}
		})
	}
}

func TestHostileStderrIsKeptCapped(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "h", Path: wasmPath(t, "hostile")}}})
	res, _ := decide(t, c, testJob("stderr"))
	require.Equal(t, VerdictAllow, res.Verdict)
	require.Equal(t, "hostile: note on stderr\n", res.Trail[0].Stderr)

	res, _ = decide(t, c, testJob("panic"))
	require.Equal(t, VerdictDeny, res.Verdict)
	require.Contains(t, res.Trail[0].Stderr, "panic: hostile: panic")
	require.LessOrEqual(t, len(res.Trail[0].Stderr), MaxStderrBytes+64)
}

func TestTrapFromNonGoModule(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "trap", Path: wasmPath(t, "trap")}}})
	res, _ := decide(t, c, testJob(""))
	require.Equal(t, VerdictDeny, res.Verdict)
	require.True(t, strings.HasPrefix(res.Trail[0].Error, ErrTrap.Error()), res.Trail[0].Error)
	require.Contains(t, res.Trail[0].Error, "unreachable")
}

func TestNeitherABIDeniesEveryJob(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "noabi", Path: wasmPath(t, "noabi")}}})
	require.Equal(t, ABINone, c.Hooks()[0].ABI, "it loads, marked so a caller can warn")
	for range 2 { // and keeps denying: the chain is not broken by it
		res, _ := decide(t, c, testJob(""))
		require.Equal(t, VerdictDeny, res.Verdict)
		require.Len(t, res.Trail, 1)
		require.Equal(t, "noabi", res.Trail[0].Hook)
		require.True(t, strings.HasPrefix(res.Trail[0].Error, ErrNoABI.Error()), res.Trail[0].Error)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notWasm := dir + "/not.wasm"
	require.NoError(t, os.WriteFile(notWasm, []byte("hello"), 0o644))
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"missing file", Config{Name: "x", Path: dir + "/nope.wasm"}, ErrLoad},
		{"not wasm", Config{Name: "x", Path: notWasm}, ErrLoad},
		{"no name", Config{Path: notWasm}, ErrConfig},
		{"bad mode", Config{Name: "x", Path: notWasm, Mode: "loud"}, ErrConfig},
		{"bad on_error", Config{Name: "x", Path: notWasm, OnError: "shrug"}, ErrConfig},
		{"bad sha256", Config{Name: "x", Path: notWasm, SHA256: "abc"}, ErrConfig},
		{"memory too big", Config{Name: "x", Path: notWasm, MemoryBytes: 8 << 30}, ErrConfig},
		{"bad settings", Config{Name: "x", Path: wasmPath(t, "trap"), Settings: map[string]any{"f": func() {}}}, ErrConfig},
		{"initial memory above limit", Config{Name: "x", Path: wasmPath(t, "minimal"), MemoryBytes: 64 << 10}, ErrLoad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewChain(context.Background(), ChainOptions{Hooks: []Config{tc.cfg}})
			require.ErrorIs(t, err, tc.want)
			require.True(t, errors.Is(err, tc.want))
		})
	}
}

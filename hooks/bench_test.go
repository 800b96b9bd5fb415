package hooks

import (
	"context"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// benchJob is a realistic job: a git command in a workspace.
func benchJob() Job {
	return Job{
		ID: "01J9ZQ3V8M4K", Name: "nightly-report", Argv: []string{"git", "-C", "/srv/work/repo", "log", "--oneline", "-n", "20"},
		Env: map[string]string{"LANG": "C.UTF-8", "TZ": "UTC"}, Cwd: "/srv/work/repo", Workspace: "/srv/work",
		Mode: "workspace_write", Network: true, Writable: []string{"/srv/cache"}, TimeoutS: 300, Attempt: 1,
		Labels: map[string]string{"team": "infra"},
	}
}

// benchDecide runs one-hook decisions and reports the median and p99 of
// single decisions besides the mean (ns/op), and the process's CPU time per
// decision (user+system; less sensitive than wall time to other load on a
// shared machine, but it includes wazero's and the GC's background work).
func benchDecide(b *testing.B, cfg Config) {
	c := newTestChain(b, ChainOptions{Hooks: []Config{cfg}})
	ctx := context.Background()
	p := DecideParams{Job: benchJob()}
	res, err := c.Decide(ctx, p) // warm: first instance, first call
	require.NoError(b, err)
	require.Empty(b, res.Trail[0].Error)
	durations := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if _, err := c.Decide(ctx, p); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(start))
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu-µs/op")
	slices.Sort(durations)
	b.ReportMetric(float64(durations[len(durations)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(durations[len(durations)*99/100].Nanoseconds())/1e3, "p99-µs")
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkDecideReactorTighten(b *testing.B) {
	benchDecide(b, Config{Name: "tighten", Path: wasmPath(b, "tighten"), Settings: map[string]any{"dry_run": []string{"rsync"}}})
}

func BenchmarkDecideReactorMinimal(b *testing.B) {
	benchDecide(b, Config{Name: "minimal-reactor", Path: wasmPath(b, "minimal-reactor")})
}

func BenchmarkDecideCommandDenylist(b *testing.B) {
	benchDecide(b, Config{Name: "denylist", Path: wasmPath(b, "denylist"), Settings: map[string]any{"deny": []string{"curl", "wget"}}})
}

func BenchmarkDecideCommandMinimal(b *testing.B) {
	benchDecide(b, Config{Name: "minimal", Path: wasmPath(b, "minimal")})
}

// BenchmarkCompile measures NewChain for the tighten module (read, sha256,
// compile): with no cache, and with a warm on-disk cache (a restart).
func BenchmarkCompile(b *testing.B) {
	path := wasmPath(b, "tighten")
	ctx := context.Background()
	b.Run("no-cache", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c, err := NewChain(ctx, ChainOptions{Hooks: []Config{{Name: "t", Path: path}}})
			require.NoError(b, err)
			require.NoError(b, c.Close(ctx))
		}
	})
	b.Run("disk-cache-warm", func(b *testing.B) {
		dir := b.TempDir()
		c, err := NewChain(ctx, ChainOptions{CacheDir: dir, Hooks: []Config{{Name: "t", Path: path}}})
		require.NoError(b, err)
		require.NoError(b, c.Close(ctx))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c, err := NewChain(ctx, ChainOptions{CacheDir: dir, Hooks: []Config{{Name: "t", Path: path}}})
			require.NoError(b, err)
			require.NoError(b, c.Close(ctx))
		}
	})
}

// BenchmarkStart measures what a worker start spends on the tighten hook
// with a warm on-disk cache: NewChain, then the first decision (which
// instantiates the reactor and runs _initialize), then Close. It reports
// the process's CPU time per start besides the wall time.
func BenchmarkStart(b *testing.B) {
	path := wasmPath(b, "tighten")
	ctx := context.Background()
	dir := b.TempDir()
	o := ChainOptions{CacheDir: dir, Hooks: []Config{{Name: "t", Path: path}}}
	c, err := NewChain(ctx, o)
	require.NoError(b, err)
	require.NoError(b, c.Close(ctx))
	p := DecideParams{Job: benchJob()}
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := NewChain(ctx, o)
		require.NoError(b, err)
		res, err := c.Decide(ctx, p)
		require.NoError(b, err)
		require.Empty(b, res.Trail[0].Error)
		require.NoError(b, c.Close(ctx))
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/1e6/float64(b.N), "cpu-ms/op")
}

// BenchmarkMemoryGrowth decides with testdata/wat/grow-touch, a command
// hook that grows its memory to 64 MiB in 1 MiB steps and touches every
// page, and reports how far the process's peak resident set rose during
// the first decision (peak-rss-MiB; at most about 63, the memory grown,
// when growth costs no more than that: less when a pooled mapping already
// holds pages) and the decision's time.
func BenchmarkMemoryGrowth(b *testing.B) {
	c := newTestChain(b, ChainOptions{Hooks: []Config{{Name: "grow", Path: wasmPath(b, "wat/grow-touch"), MemoryBytes: 64 << 20}}})
	var res Result
	growth := peakRSSGrowthMiB(func() { res, _ = decide(b, c, testJob("")) })
	require.Equal(b, VerdictAllow, res.Verdict, res.Reason)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if res, _ = decide(b, c, testJob("")); res.Verdict != VerdictAllow {
			b.Fatal(res.Reason)
		}
	}
	b.ReportMetric(growth, "peak-rss-MiB")
}

// BenchmarkMeter is the load-time rewrite of the largest example hook.
func BenchmarkMeter(b *testing.B) {
	wasm, err := os.ReadFile(wasmPath(b, "denylist"))
	require.NoError(b, err)
	b.SetBytes(int64(len(wasm)))
	for b.Loop() {
		_, err := meter(wasm, DefaultMemoryBytes/pageBytes)
		require.NoError(b, err)
	}
}

package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// countingBwrap writes a bwrap wrapper into a fresh directory: it counts
// its runs (one line each in the returned counter file) and execs the real
// bwrap.
func countingBwrap(t *testing.T, real string) (exe, counter string) {
	t.Helper()
	dir := t.TempDir()
	exe = filepath.Join(dir, "bwrap")
	counter = filepath.Join(dir, "runs")
	// bwrap --version (run for every cache key) builds no sandbox: not counted.
	script := "#!/bin/sh\n[ \"$1\" = --version ] || echo run >> '" + counter + "'\nexec '" + real + "' \"$@\"\n"
	require.NoError(t, os.WriteFile(exe, []byte(script), 0o755))
	return exe, counter
}

func runs(t *testing.T, counter string) int {
	t.Helper()
	b, err := os.ReadFile(counter)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "run\n")
}

// TestProbeCache: a usable probe is written to the cache and read back
// without running bwrap; a changed bwrap, a corrupt or forged file, an old
// one, or a grade cap the cached report exceeds each cause a fresh probe;
// a failed probe removes the file.
func TestProbeCache(t *testing.T) {
	rep := requireBwrap(t)
	ctx := context.Background()
	type testBundle struct {
		exe, counter, path string
		p                  ProbeCachedParams
	}
	setup := func(t *testing.T) testBundle {
		t.Helper()
		exe, counter := countingBwrap(t, rep.Executable)
		path := filepath.Join(t.TempDir(), "cache", ProbeCacheFile)
		return testBundle{exe: exe, counter: counter, path: path, p: ProbeCachedParams{Path: path, Executable: exe}}
	}
	// probe runs the cache path and returns the report and how many times
	// bwrap ran for it.
	probe := func(t *testing.T, b testBundle) (ProbeReport, int) {
		t.Helper()
		before := runs(t, b.counter)
		r, err := probeThroughCache(ctx, b.p)
		require.NoError(t, err)
		return r, runs(t, b.counter) - before
	}
	// fresh reports whether a probe ran (and did not come from the cache).
	fresh := func(t *testing.T, b testBundle) bool {
		t.Helper()
		r, n := probe(t, b)
		require.Equal(t, n == 0, r.Cached, "a cached report runs no bwrap; a fresh one does")
		return !r.Cached
	}
	readEntry := func(t *testing.T, path string) map[string]any {
		t.Helper()
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		return m
	}
	writeEntry := func(t *testing.T, path string, m map[string]any) {
		t.Helper()
		b, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o600))
	}

	t.Run("hit", func(t *testing.T) {
		b := setup(t)
		first, n := probe(t, b)
		require.Positive(t, n)
		require.False(t, first.Cached)
		fi, err := os.Stat(b.path)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		second, n := probe(t, b)
		require.Zero(t, n, "a valid cache runs no bwrap")
		require.True(t, second.Cached)
		require.Equal(t, first.Discovery(), second.Discovery())
		require.Equal(t, first.Version, second.Version)
		require.Equal(t, first.Grade, rep.Grade)
	})

	t.Run("refresh", func(t *testing.T) {
		b := setup(t)
		require.True(t, fresh(t, b))
		b.p.Refresh = true
		require.True(t, fresh(t, b))
		b.p.Refresh = false
		require.False(t, fresh(t, b))
	})

	t.Run("bwrap changed", func(t *testing.T) {
		b := setup(t)
		require.True(t, fresh(t, b))
		require.False(t, fresh(t, b))
		// Same content, new mtime: a reinstall.
		later := time.Now().Add(time.Minute)
		require.NoError(t, os.Chtimes(b.exe, later, later))
		require.True(t, fresh(t, b))
		require.False(t, fresh(t, b))
		// New content of another size: an upgrade.
		data, err := os.ReadFile(b.exe)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(b.exe, append(data, "# upgraded\n"...), 0o755))
		require.True(t, fresh(t, b))
		// A mode change (chmod moves ctime too).
		require.NoError(t, os.Chmod(b.exe, 0o750))
		require.True(t, fresh(t, b))
		require.False(t, fresh(t, b))
		// Another bwrap at another path.
		other, _ := countingBwrap(t, rep.Executable)
		b.p.Executable = other
		r, err := probeThroughCache(ctx, b.p)
		require.NoError(t, err)
		require.False(t, r.Cached)
		require.Equal(t, other, r.Executable)
	})

	t.Run("corrupt", func(t *testing.T) {
		for name, content := range map[string]string{
			"garbage":   "not json at all\x00\xff",
			"truncated": `{"format":1,"key":{"executable":`,
			"empty":     "",
			"extra key": `{"format":1,"surprise":true}`,
		} {
			t.Run(name, func(t *testing.T) {
				b := setup(t)
				require.True(t, fresh(t, b))
				require.NoError(t, os.WriteFile(b.path, []byte(content), 0o600))
				require.True(t, fresh(t, b), "a corrupt cache is ignored")
				require.False(t, fresh(t, b), "and rewritten")
			})
		}
	})

	t.Run("forged or stale", func(t *testing.T) {
		cases := map[string]func(m map[string]any){
			"old format":           func(m map[string]any) { m["format"] = 0 },
			"too old":              func(m map[string]any) { m["probed_at"] = time.Now().Add(-ProbeCacheMaxAgeDefault - time.Minute) },
			"from the future":      func(m map[string]any) { m["probed_at"] = time.Now().Add(time.Hour) },
			"other kernel":         func(m map[string]any) { m["key"].(map[string]any)["kernel"] = "0.0.1" },
			"other boot":           func(m map[string]any) { m["key"].(map[string]any)["boot_id"] = "x" },
			"other user namespace": func(m map[string]any) { m["key"].(map[string]any)["namespaces"].(map[string]any)["user"] = "user:[1]" },
			"sysctl changed": func(m map[string]any) {
				m["key"].(map[string]any)["sysctls"].(map[string]any)["max_user_namespaces"] = "0"
			},
			"other uid":             func(m map[string]any) { m["key"].(map[string]any)["euid"] = 4242 },
			"unusable grade":        func(m map[string]any) { m["report"].(map[string]any)["grade"] = "unusable" },
			"unknown grade":         func(m map[string]any) { m["report"].(map[string]any)["grade"] = "ultra" },
			"other executable":      func(m map[string]any) { m["report"].(map[string]any)["executable"] = "/tmp/evil/bwrap" },
			"userns not disabled":   func(m map[string]any) { m["report"].(map[string]any)["disable_userns"] = false },
			"setuid not as on disk": func(m map[string]any) { m["report"].(map[string]any)["setuid"] = true },
			"error recorded":        func(m map[string]any) { m["report"].(map[string]any)["error"] = "x" },
			// A report that says bwrap is too old for --disable-userns.
			"older version claimed": func(m map[string]any) {
				m["report"].(map[string]any)["version"] = "0.7.0"
				m["report"].(map[string]any)["disable_userns"] = false
			},
			"older version in key and report": func(m map[string]any) {
				m["key"].(map[string]any)["version"] = "0.7.0"
				m["report"].(map[string]any)["version"] = "0.7.0"
				m["report"].(map[string]any)["disable_userns"] = false
			},
		}
		for name, edit := range cases {
			t.Run(name, func(t *testing.T) {
				b := setup(t)
				require.True(t, fresh(t, b))
				m := readEntry(t, b.path)
				edit(m)
				writeEntry(t, b.path, m)
				require.True(t, fresh(t, b))
			})
		}
	})

	t.Run("unsafe file", func(t *testing.T) {
		b := setup(t)
		require.True(t, fresh(t, b))
		require.NoError(t, os.Chmod(b.path, 0o622))
		require.True(t, fresh(t, b), "a file others can write is not trusted")
		require.False(t, fresh(t, b))
		target := b.path + ".real"
		require.NoError(t, os.Rename(b.path, target))
		require.NoError(t, os.Symlink(target, b.path))
		require.True(t, fresh(t, b), "a symlink is not trusted")
	})

	t.Run("force grade", func(t *testing.T) {
		if rep.Grade != GradeFull {
			// CI runs as root, where the full grade is always there.
			unavailable(t, "the host is at the %s grade, not full: nothing to lower", rep.Grade)
		}
		b := setup(t)
		require.True(t, fresh(t, b))
		t.Setenv(ForceGradeEnv, "partial")
		r, n := probe(t, b)
		require.Positive(t, n, "a full report is not used under a partial cap")
		require.Equal(t, GradePartial, r.Grade)
		r, n = probe(t, b)
		require.Zero(t, n)
		require.Equal(t, GradePartial, r.Grade)
		// A forged file that claims full under the cap is not used.
		m := readEntry(t, b.path)
		m["report"].(map[string]any)["grade"] = "full"
		writeEntry(t, b.path, m)
		r, n = probe(t, b)
		require.Positive(t, n)
		require.Equal(t, GradePartial, r.Grade)
		t.Setenv(ForceGradeEnv, "bogus")
		_, err := probeThroughCache(ctx, b.p)
		require.ErrorIs(t, err, ErrUnusable, "an invalid cap fails closed, cache or not")
		t.Setenv(ForceGradeEnv, "")
		r, n = probe(t, b)
		require.Positive(t, n, "a partial report is not used without the cap")
		require.Equal(t, GradeFull, r.Grade)
	})

	t.Run("failed probe removes the cache", func(t *testing.T) {
		b := setup(t)
		require.True(t, fresh(t, b))
		require.NoError(t, os.WriteFile(b.exe, []byte("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap 0.8.0'; exit 0; fi\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"), 0o755))
		_, err := probeThroughCache(ctx, b.p)
		require.ErrorIs(t, err, ErrUnusable)
		_, err = os.Stat(b.path)
		require.ErrorIs(t, err, os.ErrNotExist)
	})

	t.Run("invalidate", func(t *testing.T) {
		b := setup(t)
		require.True(t, fresh(t, b))
		require.NoError(t, InvalidateProbeCache(b.path))
		require.NoError(t, InvalidateProbeCache(b.path), "a missing file is fine")
		require.True(t, fresh(t, b))
	})
}

// TestProbeCacheInterrupted: a probe whose context ends (Ctrl-C on
// `paddock probe`) reports the interruption, not an unusable bwrap, and
// leaves the cache file as it was (it once removed it).
func TestProbeCacheInterrupted(t *testing.T) {
	rep := requireBwrap(t)
	path := filepath.Join(t.TempDir(), "cache", ProbeCacheFile)
	p := ProbeCachedParams{Path: path, Executable: rep.Executable, Refresh: true}
	_, err := probeThroughCache(context.Background(), p)
	require.NoError(t, err)
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	for _, delay := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(context.Background(), delay)
		_, err := probeThroughCache(ctx, p)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "after %s", delay)
		require.NotErrorIs(t, err, ErrUnusable, "after %s", delay)
		after, rerr := os.ReadFile(path)
		require.NoError(t, rerr, "after %s: the cache was removed", delay)
		require.Equal(t, before, after)
	}
}

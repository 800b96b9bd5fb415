package hooks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func hostileHook(t *testing.T, name string, settings map[string]any) Config {
	return Config{Name: name, Path: wasmPath(t, "hostile-reactor"), Settings: settings}
}

func TestChainOrderAndAdjustSeenByNext(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{
		hostileHook(t, "a", map[string]any{"do": "append", "tag": "A"}),
		{Name: "b", Path: wasmPath(t, "hostile"), Settings: map[string]any{"do": "append", "tag": "B"}}, // command ABI in the middle
		hostileHook(t, "ro", map[string]any{"do": "readonly"}),
		hostileHook(t, "echo", map[string]any{"do": "echo"}),
	}})
	j := testJob("")
	j.Labels = nil
	res, _ := decide(t, c, j)
	require.Equal(t, VerdictDeny, res.Verdict)
	require.Equal(t, "hook echo: argv=echo hello A B mode=read_only", res.Reason)
	require.Len(t, res.Trail, 4)
	for i, name := range []string{"a", "b", "ro", "echo"} {
		require.Equal(t, name, res.Trail[i].Hook)
		require.True(t, res.Trail[i].Enforced)
		require.Len(t, res.Trail[i].SHA256, 64)
	}
	require.Equal(t, []string{"argv"}, res.Trail[0].Changed)
	require.Equal(t, []string{"mode"}, res.Trail[2].Changed)
	require.Equal(t, DecisionAdjust, res.Trail[1].Decision)
	require.Equal(t, "append B", res.Trail[1].Reason)
	require.Equal(t, []string{"echo", "hello"}, j.Argv, "the caller's job is not modified")
}

func TestChainFirstDenyWins(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{
		hostileHook(t, "first", map[string]any{"do": "deny", "reason": "first says no"}),
		hostileHook(t, "second", map[string]any{"do": "deny", "reason": "second says no"}),
	}})
	res, _ := decide(t, c, Job{Argv: []string{"true"}})
	require.Equal(t, VerdictDeny, res.Verdict)
	require.Equal(t, "hook first: first says no", res.Reason)
	require.Len(t, res.Trail, 1)
}

func TestChainMonitorRecordedNotEnforced(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{
		{Name: "watch-deny", Path: wasmPath(t, "hostile-reactor"), Mode: ModeMonitor, Settings: map[string]any{"do": "deny", "reason": "would deny"}},
		{Name: "watch-adjust", Path: wasmPath(t, "hostile"), Mode: ModeMonitor, Settings: map[string]any{"do": "append", "tag": "X"}},
		{Name: "watch-broken", Path: wasmPath(t, "hostile-reactor"), Mode: ModeMonitor, Settings: map[string]any{"do": "badjson"}},
		hostileHook(t, "allow", nil),
	}})
	res, _ := decide(t, c, Job{Argv: []string{"make"}, Mode: "workspace_write"})
	require.Equal(t, VerdictAllow, res.Verdict)
	require.Equal(t, []string{"make"}, res.Job.Argv)
	require.Len(t, res.Trail, 4)
	require.Equal(t, DecisionDeny, res.Trail[0].Decision)
	require.Equal(t, "would deny", res.Trail[0].Reason)
	require.False(t, res.Trail[0].Enforced)
	require.Equal(t, DecisionAdjust, res.Trail[1].Decision)
	require.False(t, res.Trail[1].Enforced)
	require.Equal(t, DecisionDeny, res.Trail[2].Decision)
	require.True(t, strings.HasPrefix(res.Trail[2].Error, ErrBadDecision.Error()))
	require.False(t, res.Trail[2].Enforced)
	require.Equal(t, ModeMonitor, res.Trail[2].Mode)
	require.True(t, res.Trail[3].Enforced)
}

func TestChainOnErrorAllow(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{
		{Name: "flaky", Path: wasmPath(t, "hostile"), OnError: OnErrorAllow, Settings: map[string]any{"do": "exit1"}},
		hostileHook(t, "next", map[string]any{"do": "append", "tag": "ran"}),
	}})
	res, _ := decide(t, c, Job{Argv: []string{"x"}, Mode: "read_only"})
	require.Equal(t, VerdictAllow, res.Verdict)
	require.Equal(t, DecisionAllow, res.Trail[0].Decision)
	require.Contains(t, res.Trail[0].Error, "exited with status 1")
	require.Equal(t, []string{"x", "ran"}, res.Job.Argv)
}

func TestChainMayWiden(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "w", Path: wasmPath(t, "hostile-reactor"), MayWiden: true, Settings: map[string]any{"do": "widen"}}}})
	res, _ := decide(t, c, testJob(""))
	require.Equal(t, VerdictAllow, res.Verdict)
	require.Equal(t, "danger_full_access", res.Job.Mode)
}

func TestChainOptionalHooks(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{
		{Name: "opt", Path: wasmPath(t, "hostile-reactor"), Optional: true, Settings: map[string]any{"do": "deny", "reason": "opted in"}},
		hostileHook(t, "always", nil),
	}})
	j := Job{Argv: []string{"x"}}
	res, _ := decide(t, c, j)
	require.Equal(t, VerdictAllow, res.Verdict)
	require.Len(t, res.Trail, 1)
	require.Equal(t, "always", res.Trail[0].Hook)

	res, _ = decide(t, c, j, "opt")
	require.Equal(t, VerdictDeny, res.Verdict)
	require.Equal(t, "hook opt: opted in", res.Reason)

	res, _ = decide(t, c, j, "always") // naming a non-optional hook changes nothing
	require.Equal(t, VerdictAllow, res.Verdict)

	res, _ = decide(t, c, j, "nope")
	require.Equal(t, VerdictDeny, res.Verdict)
	require.Contains(t, res.Reason, `asks for hook "nope", which is not configured`)
	require.Equal(t, "nope", res.Trail[0].Hook)
}

func TestChainSandboxSection(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls int
	sandbox := func(j Job) (SandboxInfo, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		if j.Argv[0] == "unconfinable" {
			return SandboxInfo{}, errors.New("cwd is outside the workspace")
		}
		return SandboxInfo{Grade: "full", Executable: "/usr/bin/bwrap", Argv: append([]string{"bwrap", "--", j.Argv[0]}, j.Argv[1:]...)}, nil
	}
	c := newTestChain(t, ChainOptions{Sandbox: sandbox, Hooks: []Config{
		hostileHook(t, "same", nil),
		hostileHook(t, "set", map[string]any{"do": "setargv", "argv": []string{"/bin/true", "1"}}),
		hostileHook(t, "show", map[string]any{"do": "sandbox"}),
	}})
	res, _ := decide(t, c, Job{Argv: []string{"false"}})
	require.Equal(t, "hook show: sandbox=bwrap -- /bin/true 1", res.Reason)
	require.Equal(t, 2, calls, "recomputed only after the adjust")

	res, _ = decide(t, c, Job{Argv: []string{"unconfinable"}})
	require.Equal(t, VerdictDeny, res.Verdict)
	require.Contains(t, res.Reason, "hook same: the job cannot be confined: cwd is outside the workspace")
	require.Equal(t, "sandbox: cwd is outside the workspace", res.Trail[0].Error)
}

func TestChainSHA256(t *testing.T) {
	t.Parallel()
	path := wasmPath(t, "minimal")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])

	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "m", Path: path, SHA256: strings.ToUpper(good)}}})
	require.Equal(t, good, c.Hooks()[0].SHA256)
	res, _ := decide(t, c, testJob(""))
	require.Equal(t, good, res.Trail[0].SHA256)

	bad := strings.Repeat("0", 64)
	_, err = NewChain(context.Background(), ChainOptions{Hooks: []Config{{Name: "m", Path: path, SHA256: bad}}})
	require.ErrorIs(t, err, ErrSHA256Mismatch)
	require.Contains(t, err.Error(), good)
	require.Contains(t, err.Error(), `hook "m"`)
}

func TestChainErrors(t *testing.T) {
	t.Parallel()
	_, err := NewChain(context.Background(), ChainOptions{Hooks: []Config{
		{Name: "m", Path: wasmPath(t, "minimal")}, {Name: "m", Path: wasmPath(t, "minimal")},
	}})
	require.ErrorIs(t, err, ErrConfig)
	require.Contains(t, err.Error(), "used twice")

	c, err := NewChain(context.Background(), ChainOptions{Hooks: []Config{{Name: "m", Path: wasmPath(t, "minimal")}}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Decide(ctx, DecideParams{Job: testJob("")})
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, c.Close(context.Background()))
	require.NoError(t, c.Close(context.Background()))
	_, err = c.Decide(context.Background(), DecideParams{Job: testJob("")})
	require.Error(t, err)
}

func TestChainEmpty(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{})
	res, _ := decide(t, c, testJob(""))
	require.Equal(t, VerdictAllow, res.Verdict)
	require.Empty(t, res.Trail)
}

func TestChainCompilationCacheDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/cache/wazero"
	for i := 0; i < 2; i++ {
		c := newTestChain(t, ChainOptions{CacheDir: dir, Hooks: []Config{{Name: "t", Path: wasmPath(t, "tighten")}}})
		res, _ := decide(t, c, Job{Argv: []string{"git", "log"}, Mode: "workspace_write"})
		require.Equal(t, "read_only", res.Job.Mode)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.NotEmpty(t, entries)
}

// TestChainConcurrent decides from many goroutines at once through one chain
// mixing both ABIs; run it with -race.
func TestChainConcurrent(t *testing.T) {
	t.Parallel()
	// Generous timeouts: this test is about races, and -race on 2 shared
	// cores slows a command-ABI call from milliseconds to seconds.
	const timeout = 60 * time.Second
	c := newTestChain(t, ChainOptions{MaxIdleInstances: 2, Hooks: []Config{
		{Name: "deny", Path: wasmPath(t, "denylist"), Timeout: timeout, Settings: map[string]any{"deny": []string{"curl"}}},
		{Name: "tighten", Path: wasmPath(t, "tighten"), Timeout: timeout, Settings: map[string]any{"dry_run": []string{"rsync"}}},
		{Name: "echo", Path: wasmPath(t, "hostile-reactor"), Timeout: timeout, Settings: map[string]any{"do": "echo"}, Optional: true},
	}})
	const goroutines, each = 8, 6
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*each)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				tag := fmt.Sprintf("g%d-%d", g, i)
				var j Job
				var extra []string
				var want string
				switch i % 3 {
				case 0:
					j, want = Job{Argv: []string{"sudo", "curl", tag}, Mode: "workspace_write"}, `hook deny: program "curl" is on the deny list via sudo`
				case 1:
					j, want = Job{Argv: []string{"rsync", tag}, Mode: "workspace_write"}, "hook echo: argv=rsync --dry-run "+tag+" mode=workspace_write"
					extra = []string{"echo"}
				case 2:
					j, want = Job{Argv: []string{"git", "log", tag}, Mode: "workspace_write"}, ""
				}
				res, err := c.Decide(context.Background(), DecideParams{Job: j, Extra: extra})
				if err != nil {
					errs <- err
					continue
				}
				if res.Reason != want {
					errs <- fmt.Errorf("%s: reason %q, want %q", tag, res.Reason, want)
				}
				if i%3 == 2 && (res.Verdict != VerdictAllow || res.Job.Mode != "read_only" || res.Job.Argv[2] != tag) {
					errs <- fmt.Errorf("%s: got %+v", tag, res)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestPrewarm: with Prewarm a reactor hook has one idle instance before
// any decision, and the first decision uses it (no second instance is
// made: the pool still holds exactly one afterwards); without it the pool
// starts empty. Closing a chain while its instance is being made waits
// for it.
func TestPrewarm(t *testing.T) {
	t.Parallel()
	// A reactor that checks its settings already has its instance, made
	// for the check: nothing to prewarm.
	checked := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "tighten", Path: wasmPath(t, "tighten")}}, Prewarm: true})
	require.Nil(t, checked.byName["tighten"].warming)
	require.Len(t, checked.byName["tighten"].idle, 1)

	cfg := Config{Name: "tighten", Path: wasmPath(t, "minimal-reactor")}
	c := newTestChain(t, ChainOptions{Hooks: []Config{cfg}, Prewarm: true, MaxIdleInstances: 4})
	h := c.byName["tighten"]
	select {
	case <-h.warming:
	case <-time.After(30 * time.Second):
		t.Fatal("prewarm never finished")
	}
	require.Len(t, h.idle, 1)
	res, err := c.Decide(context.Background(), DecideParams{Job: testJob("")})
	require.NoError(t, err)
	require.Equal(t, VerdictAllow, res.Verdict)
	require.Len(t, h.idle, 1, "the first decision took the prewarmed instance and gave it back")

	cold := newTestChain(t, ChainOptions{Hooks: []Config{cfg}})
	require.Nil(t, cold.byName["tighten"].warming)
	require.Empty(t, cold.byName["tighten"].idle)

	quick, err := NewChain(context.Background(), ChainOptions{Hooks: []Config{cfg}, Prewarm: true})
	require.NoError(t, err)
	require.NoError(t, quick.Close(context.Background()))
	select {
	case <-quick.byName["tighten"].warming:
	default:
		t.Fatal("Close returned while the instance was still being made")
	}
}

// A cache directory that cannot be made is ErrCacheDir, with the
// file system's *fs.PathError, not ErrConfig: the config is fine.
func TestNewChainCacheDirUnusable(t *testing.T) {
	file := t.TempDir() + "/file"
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err := NewChain(context.Background(), ChainOptions{CacheDir: file + "/cache"})
	require.ErrorIs(t, err, ErrCacheDir)
	require.NotErrorIs(t, err, ErrConfig)
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, file, pe.Path)
}

// TestOnErrorAllowNotForLargeRequests: a job cannot make a hook fail by its
// size and slip through on_error = "allow": past
// OnErrorAllowMaxRequestBytes a failure denies, and a request past
// MaxRequestBytes is never sent and denies whatever the mode.
func TestOnErrorAllowNotForLargeRequests(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{
		{Name: "flaky", Path: wasmPath(t, "hostile"), OnError: OnErrorAllow},
	}})
	job := testJob("exit1")
	res, _ := decide(t, c, job)
	require.Equal(t, VerdictAllow, res.Verdict, "a small request: on_error applies")

	job.Labels["pad"] = strings.Repeat("x", OnErrorAllowMaxRequestBytes)
	res, _ = decide(t, c, job)
	require.Equal(t, VerdictDeny, res.Verdict)
	require.Contains(t, res.Trail[0].Error, "exited with status 1")
	require.Contains(t, res.Reason, `(on_error = "allow" does not apply: the request is `)

	c = newTestChain(t, ChainOptions{Hooks: []Config{
		{Name: "watch", Path: wasmPath(t, "hostile"), OnError: OnErrorAllow, Mode: ModeMonitor},
	}})
	job = testJob("allow")
	job.Labels["pad"] = strings.Repeat("x", MaxRequestBytes)
	res, _ = decide(t, c, job)
	require.Equal(t, VerdictDeny, res.Verdict)
	require.True(t, res.Trail[0].Enforced)
	require.True(t, strings.HasPrefix(res.Trail[0].Error, ErrRequestTooLarge.Error()), res.Trail[0].Error)
	require.Contains(t, res.Reason, "more than the 16777216 a hook is sent")
}

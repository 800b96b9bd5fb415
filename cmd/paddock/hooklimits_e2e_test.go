package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/hooks"
	"paddock/internal/e2etest"
)

// A worker whose hooks recurse 100 million calls deep on some jobs denies
// each of them for the call-stack limit within twice the hooks' timeout,
// runs the next job, and stops on SIGTERM.
func TestE2EWorkerDeepHooksDenied(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	b := e2etest.Setup(t, e2etest.DefaultConfig+fmt.Sprintf(`
[[hook]]
name = "deep-command"
path = %q
timeout = "1s"
optional = true

[[hook]]
name = "deep-reactor"
path = %q
timeout = "1s"
`, hostileWat(t, "deep-command"), hostileWat(t, "deep-reactor")))
	ids := b.Submit(b.WriteJob("jobs.toml", `
[defaults]
mode = "read_only"

[[job]]
name = "deep-command"
command = ["echo", "~deep"]
hooks = ["deep-command"]
priority = 3

[[job]]
name = "deep-reactor"
command = ["echo", "~deep"]
priority = 2

[[job]]
name = "next"
command = ["echo", "ran"]
priority = 1
`))
	w := b.StartWorker("--concurrency", "1")
	b.WaitState(ids[2], 60*time.Second, "succeeded")
	for i, hook := range []string{"deep-command", "deep-reactor"} {
		j := b.Show(ids[i])
		require.Equal(t, "denied", j.State, j.Reason)
		require.Contains(t, j.Reason, "hook "+hook+": hooks: call stack limit exceeded: calls nested deeper than 8 MiB of stack")
		var trail []hooks.TrailEntry
		require.NoError(t, json.Unmarshal(j.Attempts[0].Trail, &trail))
		e := trail[len(trail)-1]
		require.Equal(t, hook, e.Hook)
		took := time.Duration(e.DurationUS) * time.Microsecond
		t.Logf("%s: denied after %v", hook, took)
		require.Less(t, took, 2*timeout, "denied later than twice the timeout")
	}
	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	state, err := w.Process.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, state.ExitCode(), "a graceful stop exits 0")
}

// maxRSSMiB runs paddock with args and returns its exit code and peak
// resident set (getrusage's ru_maxrss) in MiB.
func maxRSSMiB(t *testing.T, b *e2etest.Bundle, args ...string) (int, float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2etest.CommandTimeout)
	defer cancel()
	c := b.Cmd(ctx, args...)
	out, err := c.CombinedOutput()
	code := 0
	if err != nil {
		code = c.ProcessState.ExitCode()
		require.NotEqual(t, -1, code, "%v: %s", err, out)
	}
	return code, float64(c.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024
}

// `paddock hook test` on a module recursing 100 million calls deep (with
// wazero alone: about 180 MB of peak RSS, for a process that otherwise
// peaks under 20 MB) denies it with a peak RSS at most 32 MiB above the
// same module's on a plain job.
func TestE2EHookTestDeepStackRSS(t *testing.T) {
	t.Parallel()
	const maxExtraMiB = 32
	b := e2etest.Setup(t, "")
	for _, mod := range []string{"deep-command", "deep-reactor"} {
		path := hostileWat(t, mod)
		code, plain := maxRSSMiB(t, b, "hook", "test", path, "--", "echo", "plain")
		require.Equal(t, 0, code)
		code, deep := maxRSSMiB(t, b, "hook", "test", path, "--", "echo", "~deep")
		require.Equal(t, 1, code, "denied")
		t.Logf("%s: peak RSS %.1f MiB plain, %.1f MiB deep", mod, plain, deep)
		require.Less(t, deep-plain, float64(maxExtraMiB))
	}
}

// A module past a compile limit (here 3,000 nested blocks, over
// MaxNesting) is refused uncompiled by check, run, hook test and worker,
// each exiting 2 with the hook's name and the limit; the queued job waits.
func TestE2ETooLargeModuleRefused(t *testing.T) {
	t.Parallel()
	var wat strings.Builder
	wat.WriteString("(module (func (export \"_start\")\n")
	wat.WriteString(strings.Repeat("block\n", 3000))
	wat.WriteString(strings.Repeat("end\n", 3000))
	wat.WriteString("))\n")
	watPath := filepath.Join(t.TempDir(), "nest.wat")
	require.NoError(t, os.WriteFile(watPath, []byte(wat.String()), 0o600))
	mod := e2etest.Wat(t, watPath)

	b := e2etest.Setup(t, e2etest.DefaultConfig+fmt.Sprintf("[[hook]]\nname = \"nest\"\npath = %q\n", mod))
	job := b.WriteJob("one.toml", "name = \"waits\"\nmode = \"read_only\"\ncommand = [\"echo\", \"hi\"]\n")
	ids := b.Submit(job)
	for _, args := range [][]string{
		{"check", job},
		{"run", job},
		{"hook", "test", mod, "--", "echo", "hi"},
		{"worker", "--drain"},
	} {
		out, errOut, code := b.Run(args...)
		require.Equal(t, 2, code, "%s: %s%s", args[0], out, errOut)
		require.Contains(t, out+errOut, `"nest"`, args[0])
		require.Contains(t, out+errOut, "too large to compile: function 0 has blocks nested more than 2048 deep", args[0])
	}
	require.Equal(t, "queued", b.Show(ids[0]).State, "the job waits")
}

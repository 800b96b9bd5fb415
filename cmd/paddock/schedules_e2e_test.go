package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The schedules end-to-end test keeps its own small harness (a binary
// built once for it) so that it does not depend on the shared e2e helpers.

var (
	schedBinOnce sync.Once
	schedBin     string
	schedBinErr  error
)

// schedulesBinary builds paddock once for this test binary, into a
// temporary directory that is left to the OS (a few MB in os.TempDir).
func schedulesBinary(t *testing.T) string {
	t.Helper()
	schedBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "paddock-sched-e2e-")
		if err != nil {
			schedBinErr = err
			return
		}
		schedBin = filepath.Join(dir, "paddock")
		if out, err := exec.Command("go", "build", "-o", schedBin, ".").CombinedOutput(); err != nil {
			schedBinErr = fmt.Errorf("build paddock: %v\n%s", err, out)
		}
	})
	require.NoError(t, schedBinErr)
	return schedBin
}

type schedE2E struct {
	t                  *testing.T
	bin, state, config string
	dir                string
}

func (b *schedE2E) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, b.bin, append([]string{"--state-dir", b.state, "--config", b.config}, args...)...)
	c.Env = append(os.Environ(), "PADDOCK_STATE_DIR=")
	return c
}

// run runs paddock and returns stdout, stderr and the exit code.
func (b *schedE2E) run(args ...string) (string, string, int) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := b.cmd(ctx, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(b.t, err)
	}
	return out.String(), errb.String(), code
}

func (b *schedE2E) startWorker() *exec.Cmd {
	b.t.Helper()
	c := b.cmd(context.Background(), "worker", "--concurrency", "2")
	logf, err := os.OpenFile(filepath.Join(b.dir, "worker.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(b.t, err)
	c.Stdout, c.Stderr = logf, logf
	require.NoError(b.t, c.Start())
	b.t.Cleanup(func() {
		_ = c.Process.Kill()
		_, _ = c.Process.Wait()
		logf.Close()
		if b.t.Failed() {
			log, _ := os.ReadFile(filepath.Join(b.dir, "worker.log"))
			b.t.Logf("worker log:\n%s", log)
		}
	})
	return c
}

type schedInstance struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	State string `json:"state"`
}

// instances lists the schedule's instances (paddock ls --label schedule=NAME).
func (b *schedE2E) instances(name string) []schedInstance {
	b.t.Helper()
	out, errOut, code := b.run("ls", "--json", "--limit", "0", "--label", "schedule="+name)
	require.Equal(b.t, 0, code, errOut)
	var list []schedInstance
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var j schedInstance
		require.NoError(b.t, json.Unmarshal([]byte(line), &j))
		list = append(list, j)
	}
	return list
}

type schedDecision struct {
	Tick     string `json:"tick"`
	Decision string `json:"decision"`
	Count    int    `json:"count"`
	JobID    string `json:"job_id"`
}

func (b *schedE2E) decisions(name string) []schedDecision {
	b.t.Helper()
	out, errOut, code := b.run("schedules", "log", name, "--json", "--limit", "1000")
	require.Equal(b.t, 0, code, errOut)
	var list []schedDecision
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var d schedDecision
		require.NoError(b.t, json.Unmarshal([]byte(line), &d))
		list = append(list, d)
	}
	return list
}

func unfinished(list []schedInstance) int {
	n := 0
	for _, j := range list {
		if j.State == "queued" || j.State == "running" {
			n++
		}
	}
	return n
}

// TestE2EScheduleEvery2s: a "@every 2s" schedule under a real worker makes
// instances that run confined; pausing stops them; a worker killed and
// restarted after missing ticks catches up exactly once. About 20 s.
func TestE2EScheduleEvery2s(t *testing.T) {
	t.Parallel()
	requireBwrapCmd(t)
	dir := t.TempDir()
	b := &schedE2E{t: t, bin: schedulesBinary(t), state: filepath.Join(dir, "state"), config: filepath.Join(dir, "config.toml"), dir: dir}
	require.NoError(t, os.WriteFile(b.config, []byte("lease = \"3s\"\nkill_grace = \"1s\"\nshutdown_grace = \"2s\"\n"), 0o600))
	job := filepath.Join(dir, "tick.toml")
	require.NoError(t, os.WriteFile(job, []byte(`
name = "tick"
schedule = "@every 2s"
mode = "workspace_write"
command = 'echo "tick=$PADDOCK_SCHEDULE_TICK"; if touch /usr/paddock-sched-escape 2>/dev/null; then echo escaped; else echo fenced; fi; echo in > inside.txt && cat inside.txt'
`), 0o600))
	t.Cleanup(func() { _ = os.Remove("/usr/paddock-sched-escape") })

	out, errOut, code := b.run("submit", job)
	require.Equal(t, 0, code, errOut)
	require.Empty(t, strings.TrimSpace(out), "a schedule is not a job: no id line")
	require.Contains(t, errOut, "schedule tick (@every 2s, UTC): next run")
	out, errOut, code = b.run("run", job)
	require.Equal(t, 2, code, "paddock run refuses a schedule: %s", out)
	require.Contains(t, errOut, "has a schedule")

	// Phase 1: instances run, confined.
	w := b.startWorker()
	deadline := time.Now().Add(15 * time.Second)
	var done []schedInstance
	for {
		done = nil
		for _, j := range b.instances("tick") {
			if j.State == "succeeded" {
				done = append(done, j)
			}
		}
		if len(done) >= 2 {
			break
		}
		require.False(t, time.Now().After(deadline), "no two succeeded instances in 15s: %+v", b.instances("tick"))
		time.Sleep(200 * time.Millisecond)
	}
	for _, j := range done {
		require.True(t, strings.HasPrefix(j.Name, "tick-"), j.Name)
		logs, errOut, code := b.run("logs", j.ID)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, logs, "fenced\nin\n", "the instance ran inside the write fence")
		require.NotContains(t, logs, "escaped")
		var show struct {
			Attempts []struct {
				ConfinedArgv []string `json:"confined_argv"`
			} `json:"attempts"`
		}
		out, errOut, code := b.run("show", "--json", j.ID)
		require.Equal(t, 0, code, errOut)
		require.NoError(t, json.Unmarshal([]byte(strings.Split(strings.TrimSpace(out), "\n")[0]), &show))
		require.NotEmpty(t, show.Attempts)
		require.Equal(t, "bwrap", filepath.Base(show.Attempts[0].ConfinedArgv[0]))
	}
	_, err := os.Stat("/usr/paddock-sched-escape")
	require.True(t, os.IsNotExist(err), "nothing was written outside the fence")

	// Phase 2: pausing stops them.
	_, errOut, code = b.run("schedules", "pause", "tick")
	require.Equal(t, 0, code, errOut)
	deadline = time.Now().Add(10 * time.Second)
	for unfinished(b.instances("tick")) > 0 {
		require.False(t, time.Now().After(deadline), "instances still running 10s after pause")
		time.Sleep(100 * time.Millisecond)
	}
	paused := len(b.instances("tick"))
	time.Sleep(4500 * time.Millisecond) // two ticks and more
	require.Len(t, b.instances("tick"), paused, "no instance while paused")
	out, _, _ = b.run("schedules")
	require.Regexp(t, `tick\s+@every 2s\s+UTC\s+paused`, out)

	// Phase 3: kill the worker, resume, miss a few ticks, restart: exactly
	// one catch-up instance for the outage.
	require.NoError(t, w.Process.Signal(syscall.SIGKILL))
	_, _ = w.Process.Wait()
	killed := time.Now()
	_, errOut, code = b.run("schedules", "resume", "tick")
	require.Equal(t, 0, code, errOut)
	time.Sleep(5 * time.Second) // ticks pass with no worker
	before := len(b.instances("tick"))
	require.Equal(t, paused, before)
	restart := time.Now()
	b.startWorker()
	deadline = time.Now().Add(10 * time.Second)
	var caught []schedDecision
	for {
		caught = nil
		for _, d := range b.decisions("tick") {
			if d.Decision == "caught_up" {
				caught = append(caught, d)
			}
		}
		if len(caught) > 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "no catch-up run after the restart: %+v", b.decisions("tick"))
		time.Sleep(100 * time.Millisecond)
	}
	require.Len(t, caught, 1, "one catch-up run for the outage")
	require.NotEmpty(t, caught[0].JobID)
	// The catch-up's tick is the newest one due when the restarted worker
	// first looked, which may fall just after `restart` (the worker takes
	// a moment to start): so count the outage's other instances by tick,
	// between the kill and the restart, and there must be none.
	var missed []schedDecision
	burst := 0
	for _, d := range b.decisions("tick") {
		tick, err := time.Parse(time.RFC3339, d.Tick)
		require.NoError(t, err)
		switch {
		case d.Decision == "missed":
			missed = append(missed, d)
		case d.Decision == "fired" && tick.After(killed) && !tick.After(restart):
			burst++
		}
	}
	require.Len(t, missed, 1, "one record for the outage")
	require.GreaterOrEqual(t, missed[0].Count, 1)
	require.Zero(t, burst, "never a burst after an outage: the catch-up is the outage's only instance")
	deadline = time.Now().Add(10 * time.Second)
	for {
		out, errOut, code := b.run("show", "--json", caught[0].JobID)
		require.Equal(t, 0, code, errOut)
		if strings.Contains(out, `"state":"succeeded"`) {
			break
		}
		require.False(t, time.Now().After(deadline), "the catch-up instance did not succeed: %s", out)
		time.Sleep(200 * time.Millisecond)
	}
	out, errOut, code = b.run("schedules", "next", "tick", "--count", "3", "--json", "--from", "2026-01-01T00:00:01Z")
	require.Equal(t, 0, code, errOut)
	var next []string
	require.NoError(t, json.Unmarshal([]byte(out), &next))
	require.Equal(t, []string{"2026-01-01T00:00:02Z", "2026-01-01T00:00:04Z", "2026-01-01T00:00:06Z"}, next)
}

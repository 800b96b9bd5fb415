package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
)

type schedInstance struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	State string `json:"state"`
}

// instances lists the schedule's instances (paddock ls --label schedule=NAME).
func instances(b *e2etest.Bundle, name string) []schedInstance {
	b.T.Helper()
	out, errOut, code := b.Run("ls", "--json", "--limit", "0", "--label", "schedule="+name)
	require.Equal(b.T, 0, code, errOut)
	var list []schedInstance
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var j schedInstance
		require.NoError(b.T, json.Unmarshal([]byte(line), &j))
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

func decisions(b *e2etest.Bundle, name string) []schedDecision {
	b.T.Helper()
	out, errOut, code := b.Run("schedules", "log", name, "--json", "--limit", "1000")
	require.Equal(b.T, 0, code, errOut)
	var list []schedDecision
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var d schedDecision
		require.NoError(b.T, json.Unmarshal([]byte(line), &d))
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
	b := e2etest.Setup(t, "lease = \"3s\"\nkill_grace = \"1s\"\nshutdown_grace = \"2s\"\n")
	job := b.WriteJob("tick.toml", `
name = "tick"
schedule = "@every 2s"
mode = "workspace_write"
command = 'echo "tick=$PADDOCK_SCHEDULE_TICK"; if touch /usr/paddock-sched-escape 2>/dev/null; then echo escaped; else echo fenced; fi; echo in > inside.txt && cat inside.txt'
`)
	t.Cleanup(func() { _ = os.Remove("/usr/paddock-sched-escape") })

	out, errOut, code := b.Run("submit", job)
	require.Equal(t, 0, code, errOut)
	require.Empty(t, strings.TrimSpace(out), "a schedule is not a job: no id line")
	require.Contains(t, errOut, "schedule tick (@every 2s, UTC): next run")
	out, errOut, code = b.Run("run", job)
	require.Equal(t, 2, code, "paddock run refuses a schedule: %s", out)
	require.Contains(t, errOut, "has a schedule")

	// Phase 1: instances run, confined.
	w := b.StartWorker("--concurrency", "2")
	deadline := time.Now().Add(15 * time.Second)
	var done []schedInstance
	for {
		done = nil
		for _, j := range instances(b, "tick") {
			if j.State == "succeeded" {
				done = append(done, j)
			}
		}
		if len(done) >= 2 {
			break
		}
		require.False(t, time.Now().After(deadline), "no two succeeded instances in 15s: %+v", instances(b, "tick"))
		time.Sleep(200 * time.Millisecond)
	}
	for _, j := range done {
		require.True(t, strings.HasPrefix(j.Name, "tick-"), j.Name)
		logs, errOut, code := b.Run("logs", j.ID)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, logs, "fenced\nin\n", "the instance ran inside the write fence")
		require.NotContains(t, logs, "escaped")
		var show struct {
			Attempts []struct {
				ConfinedArgv []string `json:"confined_argv"`
			} `json:"attempts"`
		}
		out, errOut, code := b.Run("show", "--json", j.ID)
		require.Equal(t, 0, code, errOut)
		require.NoError(t, json.Unmarshal([]byte(strings.Split(strings.TrimSpace(out), "\n")[0]), &show))
		require.NotEmpty(t, show.Attempts)
		require.Equal(t, "bwrap", filepath.Base(show.Attempts[0].ConfinedArgv[0]))
	}
	_, err := os.Stat("/usr/paddock-sched-escape")
	require.True(t, os.IsNotExist(err), "nothing was written outside the fence")

	// Phase 2: pausing stops them.
	_, errOut, code = b.Run("schedules", "pause", "tick")
	require.Equal(t, 0, code, errOut)
	deadline = time.Now().Add(10 * time.Second)
	for unfinished(instances(b, "tick")) > 0 {
		require.False(t, time.Now().After(deadline), "instances still running 10s after pause")
		time.Sleep(100 * time.Millisecond)
	}
	paused := len(instances(b, "tick"))
	time.Sleep(4500 * time.Millisecond) // two ticks and more
	require.Len(t, instances(b, "tick"), paused, "no instance while paused")
	out, _, _ = b.Run("schedules")
	require.Regexp(t, `tick\s+@every 2s\s+UTC\s+paused`, out)

	// Phase 3: kill the worker, resume, miss a few ticks, restart: exactly
	// one catch-up instance for the outage.
	require.NoError(t, w.Process.Signal(syscall.SIGKILL))
	_, _ = w.Process.Wait()
	killed := time.Now()
	_, errOut, code = b.Run("schedules", "resume", "tick")
	require.Equal(t, 0, code, errOut)
	time.Sleep(5 * time.Second) // ticks pass with no worker
	before := len(instances(b, "tick"))
	require.Equal(t, paused, before)
	restart := time.Now()
	b.StartWorker("--concurrency", "2")
	deadline = time.Now().Add(10 * time.Second)
	var caught []schedDecision
	for {
		caught = nil
		for _, d := range decisions(b, "tick") {
			if d.Decision == "caught_up" {
				caught = append(caught, d)
			}
		}
		if len(caught) > 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "no catch-up run after the restart: %+v", decisions(b, "tick"))
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
	for _, d := range decisions(b, "tick") {
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
		out, errOut, code := b.Run("show", "--json", caught[0].JobID)
		require.Equal(t, 0, code, errOut)
		if strings.Contains(out, `"state":"succeeded"`) {
			break
		}
		require.False(t, time.Now().After(deadline), "the catch-up instance did not succeed: %s", out)
		time.Sleep(200 * time.Millisecond)
	}
	out, errOut, code = b.Run("schedules", "next", "tick", "--count", "3", "--json", "--from", "2026-01-01T00:00:01Z")
	require.Equal(t, 0, code, errOut)
	var next []string
	require.NoError(t, json.Unmarshal([]byte(out), &next))
	require.Equal(t, []string{"2026-01-01T00:00:02Z", "2026-01-01T00:00:04Z", "2026-01-01T00:00:06Z"}, next)
}

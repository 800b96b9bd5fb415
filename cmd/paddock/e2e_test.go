package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
	"paddock/sandbox/launch"
)

// End-to-end tests: they build the real paddock binary once and drive it as
// a user would, with real bwrap, a real SQLite file and real processes.

func TestMain(m *testing.M) {
	// The in-process runner of some tests binds this test binary into
	// confined jobs as their launcher.
	launch.Dispatch()
	code := m.Run()
	e2etest.Cleanup()
	if examplesDir != "" {
		_ = os.RemoveAll(examplesDir)
	}
	os.Exit(code)
}

// setupE2E is one isolated paddock installation (internal/e2etest holds the
// helpers these tests share with the reliability suites).
func setupE2E(t *testing.T, config string) *e2etest.Bundle {
	t.Helper()
	return e2etest.Setup(t, config)
}

func TestE2ESubmitWorkerLsShowLogs(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	ws := t.TempDir()
	job := b.WriteJob("jobs.toml", fmt.Sprintf(`
[defaults]
workspace = %q
labels = { suite = "e2e" }

[[job]]
name = "hello"
mode = "read_only"
command = ["echo", "hello from the fence"]

[[job]]
name = "writer"
mode = "workspace_write"
command = "echo written > out.txt && cat out.txt"
after = ["hello"]

[[job]]
name = "escaper"
mode = "workspace_write"
command = "echo x > /etc/paddock-e2e-escape"

[[job]]
name = "fails"
mode = "read_only"
command = "exit 3"
`, ws))
	ids := b.Submit(job)
	require.Len(t, ids, 4)

	_, errOut, code := b.Run("worker", "--drain", "--concurrency", "2")
	require.Equal(t, 1, code, "drain must exit 1 when a job failed: %s", errOut)

	hello := b.Show("hello")
	require.Equal(t, "succeeded", hello.State)
	require.NotEmpty(t, hello.Attempts[0].ConfinedArgv)
	require.Contains(t, hello.Attempts[0].ConfinedArgv, "--ro-bind")
	out, _, code := b.Run("logs", "hello")
	require.Equal(t, 0, code)
	require.Equal(t, "hello from the fence\n", out)

	require.Equal(t, "succeeded", b.Show("writer").State)
	data, err := os.ReadFile(filepath.Join(ws, "out.txt"))
	require.NoError(t, err)
	require.Equal(t, "written\n", string(data))

	esc := b.Show("escaper")
	require.Equal(t, "failed", esc.State)
	require.NoFileExists(t, "/etc/paddock-e2e-escape")
	require.Contains(t, esc.Attempts[0].Reason, "fence")

	fails := b.Show("fails")
	require.Equal(t, "failed", fails.State)
	require.Equal(t, 3, *fails.Attempts[0].ExitCode)

	out, _, code = b.Run("ls", "--label", "suite=e2e", "--state", "succeeded")
	require.Equal(t, 0, code)
	require.Contains(t, out, "hello")
	require.Contains(t, out, "writer")
	require.NotContains(t, out, "escaper")

	out, _, code = b.Run("--json", "ls", "--limit", "0")
	require.Equal(t, 0, code)
	require.Equal(t, 4, strings.Count(out, `"message_type":"job"`))

	// The event log has a started and a finished line per job.
	events, err := os.ReadFile(filepath.Join(b.State, "events.jsonl"))
	require.NoError(t, err)
	require.Equal(t, 4, strings.Count(string(events), `"type":"started"`))
	require.Equal(t, 4, strings.Count(string(events), `"type":"finished"`))
}

func TestE2ECancelRunningJobLeavesNoProcess(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	marker := fmt.Sprintf("paddock-cancel-%d", time.Now().UnixNano())
	job := b.WriteJob("sleep.toml", fmt.Sprintf(`
name = "sleeper"
mode = "workspace_write"
command = "sleep 300 & (setsid sleep 301 &) ; echo %s; sleep 302"
`, marker))
	// The marker is in the shell's own command line; each sleep is its child.
	ids := b.Submit(job)
	b.StartWorker("--concurrency", "1")
	b.WaitState(ids[0], time.Minute, "running")
	deadline := time.Now().Add(20 * time.Second)
	for len(e2etest.ProcessesWith(marker)) == 0 {
		require.False(t, time.Now().After(deadline), "job never started")
		time.Sleep(50 * time.Millisecond)
	}
	_, errOut, code := b.Run("cancel", ids[0])
	require.Equal(t, 0, code, errOut)
	s := b.WaitState(ids[0], 30*time.Second, "canceled")
	require.Equal(t, "canceled", s.Attempts[len(s.Attempts)-1].Outcome)
	e2etest.RequireNoProcess(t, marker)
	e2etest.RequireNoProcess(t, "sleep 301")
}

func TestE2ETimeoutKillsSetsidDaemon(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	marker := fmt.Sprintf("paddock-daemon-%d", time.Now().UnixNano())
	job := b.WriteJob("daemon.toml", fmt.Sprintf(`
name = "daemonizer"
mode = "workspace_write"
timeout = "1s"
command = ["/bin/sh", "-c", "setsid /bin/sh -c 'sleep 600; : %s' </dev/null >/dev/null 2>&1 & sleep 600"]
`, marker))
	ids := b.Submit(job)
	_, _, code := b.Run("worker", "--drain")
	require.Equal(t, 1, code)
	s := b.Show(ids[0])
	require.Equal(t, "failed", s.State)
	require.Equal(t, "timeout", s.Attempts[0].Outcome)
	e2etest.RequireNoProcess(t, marker)
}

func TestE2EHugeOutputIsCappedAndWorkerMemoryBounded(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "log_max_bytes = 1048576\nlease = \"5s\"\n")
	job := b.WriteJob("huge.toml", `
name = "two-gib"
mode = "read_only"
command = "head -c 2147483648 /dev/zero | tr '\\0' x; echo; echo the-end"
timeout = "5m"
`)
	ids := b.Submit(job)
	w := b.StartWorker("--concurrency", "1", "--drain")
	// Sample the worker's peak RSS (VmHWM) until it exits.
	var peakKiB int
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(200 * time.Millisecond):
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.Process.Pid)); err == nil {
				for _, line := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(line, "VmHWM:") {
						f := strings.Fields(line)
						if n, err := strconv.Atoi(f[1]); err == nil && n > peakKiB {
							peakKiB = n
						}
					}
				}
			}
		}
	}
	s := b.Show(ids[0])
	require.Equal(t, "succeeded", s.State)
	fi, err := os.Stat(s.Attempts[0].StdoutPath)
	require.NoError(t, err)
	require.Less(t, fi.Size(), int64(1<<20+4096), "log must be capped near log_max_bytes")
	data, err := os.ReadFile(s.Attempts[0].StdoutPath)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(string(data), "the-end\n"), "the tail is kept")
	require.Contains(t, string(data), "bytes cut here")
	t.Logf("worker peak RSS: %d KiB", peakKiB)
	require.Greater(t, peakKiB, 0)
	require.Less(t, peakKiB, 100*1024, "worker peak RSS must stay under 100 MiB")
}

func TestE2EKill9WorkerMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "lease = \"2s\"\nkill_grace = \"1s\"\n")
	ws := t.TempDir()
	e2etest.KillStrayBwraps(t, ws) // the worker is killed with SIGKILL
	var jobs strings.Builder
	// An interrupted attempt counts against retries (the queue's rule), so
	// the jobs allow a few.
	fmt.Fprintf(&jobs, "[defaults]\nworkspace = %q\nmode = \"workspace_write\"\nretries = 3\nbackoff = \"100ms\"\n", ws)
	const n = 12
	for i := 0; i < n; i++ {
		fmt.Fprintf(&jobs, "[[job]]\nname = \"crash-%02d\"\ncommand = \"echo start $PADDOCK_JOB_NAME >> ran.log; sleep 0.4; echo done $PADDOCK_JOB_NAME >> ran.log\"\n", i)
	}
	ids := b.Submit(b.WriteJob("crash.toml", jobs.String()))
	require.Len(t, ids, n)
	w := b.StartWorker("--concurrency", "2")
	// Kill -9 once some jobs are done and others are running.
	deadline := time.Now().Add(time.Minute)
	for {
		data, _ := os.ReadFile(filepath.Join(ws, "ran.log"))
		if strings.Count(string(data), "done ") >= 3 {
			break
		}
		require.False(t, time.Now().After(deadline), "no progress before the crash")
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, w.Process.Signal(syscall.SIGKILL))
	_, _ = w.Process.Wait()

	_, errOut, code := b.Run("worker", "--drain", "--concurrency", "2")
	require.Equal(t, 0, code, errOut)
	interrupted := 0
	for _, id := range ids {
		s := b.Show(id)
		require.Equal(t, "succeeded", s.State, "job %s", s.Name)
		succeeded := 0
		for _, a := range s.Attempts {
			switch a.Outcome {
			case "succeeded":
				succeeded++
			case "interrupted":
				interrupted++
			}
		}
		require.Equal(t, 1, succeeded, "job %s must succeed exactly once in the store", s.Name)
	}
	require.Greater(t, interrupted, 0, "the crash interrupted running jobs, and their attempts are recorded")
}

func TestE2ERunForegroundExitStatus(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	job := b.WriteJob("one.toml", `
name = "fg"
mode = "read_only"
command = "echo out; echo err >&2; exit 7"
`)
	out, errOut, code := b.Run("run", job)
	require.Equal(t, 7, code)
	require.Equal(t, "out\n", out)
	require.Contains(t, errOut, "err\n")
	s := b.Show("fg")
	require.Equal(t, "failed", s.State)
	require.Len(t, s.Attempts, 1)
}

// A reader that stops reading `paddock run`'s output does not stop the
// job: it runs to its end, is recorded, and its whole output is in its
// log (paddock once died of SIGPIPE and left the job "running"); the
// job's own processes keep SIGPIPE's default action.
func TestE2ERunClosedStdout(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	job := b.WriteJob("big.toml", "name = \"big\"\nmode = \"read_only\"\ncommand = \"seq 1 200000\"\n")
	ctx, cancel := context.WithTimeout(context.Background(), e2etest.CommandTimeout)
	defer cancel()
	c := b.Cmd(ctx, "run", job)
	stdout, err := c.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, c.Start())
	first := make([]byte, 2)
	_, err = io.ReadFull(stdout, first)
	require.NoError(t, err)
	require.Equal(t, "1\n", string(first))
	require.NoError(t, stdout.Close())
	require.NoError(t, c.Wait(), "exit status is the job's: 0")
	s := b.Show("big")
	require.Equal(t, "succeeded", s.State)
	out, _, code := b.Run("logs", "big")
	require.Equal(t, 0, code)
	require.True(t, strings.HasSuffix(out, "\n200000\n"), "the whole output is logged")

	pipe := b.WriteJob("pipe.toml", "name = \"sigpipe\"\nmode = \"read_only\"\ncommand = \"kill -PIPE $$; echo still here\"\n")
	out, errOut, code := b.Run("run", pipe)
	require.Equal(t, 128+int(syscall.SIGPIPE), code, "the job's shell dies of SIGPIPE: %s %s", out, errOut)
	require.NotContains(t, out, "still here")
}

func TestE2EBadInputIsRefusedWhole(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	job := b.WriteJob("bad.toml", `
[[job]]
name = "ok"
command = ["true"]

[[job]]
name = "bad"
comand = ["true"]
`)
	_, errOut, code := b.Run("submit", job)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "bad.toml")
	require.Contains(t, errOut, "comand")
	// Nothing may be enqueued from a bad batch: not even the queue was
	// made.
	require.Empty(t, b.List())
	require.NoFileExists(t, filepath.Join(b.State, "paddock.db"))

	_, errOut, code = b.Run("--config", filepath.Join(b.Dir, "missing.toml"), "ls")
	require.Equal(t, 2, code, "an explicit --config that does not exist is a usage error: %s", errOut)
}

func TestE2ERetriesKeepEveryAttempt(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	job := b.WriteJob("retry.toml", `
name = "flaky"
mode = "read_only"
retries = 1
backoff = "10ms"
command = "echo attempt $PADDOCK_ATTEMPT; exit 1"
`)
	_, errOut, code := b.Run("run", job)
	require.Equal(t, 1, code, errOut)
	s := b.Show("flaky")
	require.Equal(t, "failed", s.State)
	require.Len(t, s.Attempts, 2)
	require.Equal(t, 1, s.Attempts[0].Number)
	require.Equal(t, 2, s.Attempts[1].Number)
	require.NotEqual(t, s.Attempts[0].StdoutPath, s.Attempts[1].StdoutPath)
	for n := 1; n <= 2; n++ {
		out, _, code := b.Run("logs", "--attempt", strconv.Itoa(n), "flaky")
		require.Equal(t, 0, code)
		require.Equal(t, fmt.Sprintf("attempt %d\n", n), out)
	}

	// With --json, paddock's own lines on stderr are run_progress objects
	// (the job writes nothing to stderr here).
	_, errOut, code = b.Run("--json", "run", job)
	require.Equal(t, 1, code, errOut)
	var events []string
	for _, line := range strings.Split(strings.TrimSpace(errOut), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "stderr line %q", line)
		if m["message_type"] == "exit_error" {
			continue
		}
		require.Equal(t, "run_progress", m["message_type"], line)
		require.NotEmpty(t, m["job_id"])
		events = append(events, m["event"].(string))
	}
	// A backoff event shows when the retry's claim comes before its 10 ms.
	require.Equal(t, "enqueued", events[0], events)
	require.Contains(t, events, "attempt_finished")
	require.Equal(t, "finished", events[len(events)-1], events)
	for _, e := range events[1 : len(events)-1] {
		require.Contains(t, []string{"attempt_finished", "backoff"}, e)
	}
}

// A host where bwrap refuses to build a sandbox: the worker still runs
// danger_full_access jobs, and every confined job fails closed with the
// probe's explanation, never running unconfined. The refusal is a stand-in
// bwrap on PATH that answers as bwrap does on a host without unprivileged
// user namespaces (a failure this machine cannot produce for real).
func TestE2EUnusableSandboxFailsClosed(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	allowUnconfined(t, b)
	fakeDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(fakeDir, "bwrap"), []byte("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap 0.8.0'; exit 0; fi\n"+
		"echo 'bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces.' >&2\nexit 1\n"), 0o755))
	ws := t.TempDir()
	job := b.WriteJob("mixed.toml", fmt.Sprintf(`
[defaults]
workspace = %q

[[job]]
name = "confined"
mode = "workspace_write"
command = ["/bin/sh", "-c", "echo ran > confined-ran"]

[[job]]
name = "unconfined"
mode = "danger_full_access"
command = ["/bin/sh", "-c", "echo ran > unconfined-ran"]
`, ws))
	b.Submit(job)
	c := b.Cmd(context.Background(), "worker", "--drain")
	c.Env = append(c.Env, "PATH="+fakeDir+":/usr/bin:/bin")
	out, err := c.CombinedOutput()
	require.Error(t, err, "a confined job failed, so --drain exits 1: %s", out)
	require.Contains(t, string(out), "sandbox unusable")

	confined := b.Show("confined")
	require.Equal(t, "failed", confined.State)
	require.Equal(t, "runner_failed", confined.Attempts[0].Outcome)
	require.Contains(t, confined.Attempts[0].Reason, "never runs unconfined")
	require.Contains(t, confined.Attempts[0].Reason, "No permissions to create a new namespace")
	require.NoFileExists(t, filepath.Join(ws, "confined-ran"), "the confined job must not run at all")

	require.Equal(t, "succeeded", b.Show("unconfined").State)
	require.FileExists(t, filepath.Join(ws, "unconfined-ran"))
}

// TestE2EShowJSONDurations: `show --json` gives a job's durations in
// seconds under keys that say so, not Go's nanoseconds under bare keys
// (README, "JSON output": keys carry their unit).
func TestE2EShowJSONDurations(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	job := b.WriteJob("d.toml", "name = \"d\"\ncommand = [\"/bin/true\"]\ntimeout = \"90s\"\nretries = 2\nbackoff = \"1500ms\"\n")
	_, errOut, code := b.Run("submit", job)
	require.Equal(t, 0, code, errOut)
	out, errOut, code := b.Run("show", "--json", "d")
	require.Equal(t, 0, code, errOut)
	var v struct {
		Spec map[string]any `json:"spec"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, 90.0, v.Spec["timeout_seconds"])
	require.Equal(t, 1.5, v.Spec["backoff_seconds"])
	require.Equal(t, 2.0, v.Spec["retries"])
	for _, k := range []string{"timeout", "backoff", "missed_grace", "missed_grace_seconds"} {
		require.NotContains(t, v.Spec, k)
	}
	require.Equal(t, []any{"/bin/true"}, v.Spec["command"])
}

// Text show prints every key the job set, not only its command and mode;
// under one message_type ("job"), ls and show agree on every key they
// share: attempt_count is a number in both, attempts a list (show only).
func TestE2EShowPrintsTheSpec(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	ws := t.TempDir()
	job := b.WriteJob("job.toml", fmt.Sprintf(`[[job]]
name = "first"
command = "true"

[[job]]
name = "full"
command = ["make", "test"]
workspace = %q
cwd = "sub"
mode = "workspace_write"
network = false
env = { GOFLAGS = "-mod=readonly", A = "1" }
labels = { team = "infra" }
timeout = "90s"
retries = 2
backoff = "3s"
priority = 5
after = ["first"]
`, ws))
	b.Submit(job)
	out, errOut, code := b.Run("show", "full")
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{
		"command   make test\n", "mode      workspace_write\n", "cwd       " + filepath.Join(filepath.Dir(job), "sub") + "\n",
		"workspace " + ws + "\n", "env       A=1 GOFLAGS=-mod=readonly\n", "labels    team=infra\n", "after     first\n",
		"network   false\n", "timeout   1m30s\n", "retries   2\n", "backoff   3s\n", "priority  5\n",
	} {
		require.Contains(t, out, want)
	}
	shown, _, code := b.Run("--json", "show", "full")
	require.Equal(t, 0, code)
	listed, _, code := b.Run("--json", "ls", "--name", "full")
	require.Equal(t, 0, code)
	var s, l map[string]any
	require.NoError(t, json.Unmarshal([]byte(shown), &s))
	require.NoError(t, json.Unmarshal([]byte(listed), &l))
	require.Equal(t, "job", s["message_type"])
	require.Equal(t, "job", l["message_type"])
	for k, v := range l {
		if sv, ok := s[k]; ok {
			require.IsType(t, v, sv, "key %q has one type under message_type job", k)
		}
	}
	require.Equal(t, float64(0), l["attempt_count"])
	require.Equal(t, float64(0), s["attempt_count"])
	require.IsType(t, []any{}, s["attempts"])
}

// TestE2EShowRunningAttempt: show names a running attempt as running,
// with its time so far (as ls does), in text and in JSON.
func TestE2EShowRunningAttempt(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	b.StartWorker()
	id := b.Submit(b.WriteJob("sl.toml", "name = \"sl\"\ncommand = \"sleep 60\"\n"))[0]
	b.WaitState(id, time.Minute, "running")
	require.Eventually(t, func() bool {
		out, _, _ := b.Run("show", id)
		return strings.Contains(out, "\nattempt 1  running  ") && !strings.Contains(out, "  0.000s  ")
	}, 30*time.Second, 100*time.Millisecond, "show of a running attempt")
	j := b.Show(id)
	require.NotEmpty(t, j.Attempts)
	require.Greater(t, j.Attempts[0].DurationSeconds, 0.0)
	_, errOut, code := b.Run("cancel", id)
	require.Equal(t, 0, code, errOut)
}

// TestE2ECheckJSONWarnsInJSON: under --json, check's warning of a chain
// with no hooks is a check_warning object, not a line of text.
func TestE2ECheckJSONWarnsInJSON(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	out, errOut, code := b.Run("--json", "check", b.WriteJob("ok.toml", "command = \"true\"\nmode = \"read_only\"\nworkspace = \"/usr/share\"\n"))
	require.Equal(t, 0, code, out+errOut)
	var warn map[string]string
	require.NoError(t, json.Unmarshal([]byte(errOut), &warn), errOut)
	require.Equal(t, "check_warning", warn["message_type"])
	require.Contains(t, warn["message"], "no hooks")
}

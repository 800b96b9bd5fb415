package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// End-to-end tests: they build the real paddock binary once and drive it as
// a user would, with real bwrap, a real SQLite file and real processes.

var paddockBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "paddock-e2e-bin-")
	if err != nil {
		panic(err)
	}
	paddockBin = filepath.Join(dir, "paddock")
	out, err := exec.Command("go", "build", "-o", paddockBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build paddock: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// e2eBundle is one isolated paddock installation: a state directory and a
// config file.
type e2eBundle struct {
	t      *testing.T
	state  string
	config string
	dir    string
}

func setupE2E(t *testing.T, config string) *e2eBundle {
	t.Helper()
	requireBwrapCmd(t)
	dir := t.TempDir()
	b := &e2eBundle{t: t, state: filepath.Join(dir, "state"), config: filepath.Join(dir, "config.toml"), dir: dir}
	if config == "" {
		config = "lease = \"3s\"\nkill_grace = \"1s\"\nshutdown_grace = \"2s\"\n"
	}
	require.NoError(t, os.WriteFile(b.config, []byte(config), 0o600))
	return b
}

func (b *e2eBundle) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, paddockBin, append([]string{"--state-dir", b.state, "--config", b.config}, args...)...)
	c.Env = append(os.Environ(), "PADDOCK_STATE_DIR=")
	return c
}

// run runs paddock and returns stdout, stderr and the exit code.
func (b *e2eBundle) run(args ...string) (string, string, int) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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

func (b *e2eBundle) writeJob(name, text string) string {
	p := filepath.Join(b.dir, name)
	require.NoError(b.t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// submit enqueues a job file and returns the ids.
func (b *e2eBundle) submit(path string) []string {
	b.t.Helper()
	out, errOut, code := b.run("submit", path)
	require.Equal(b.t, 0, code, "submit: %s", errOut)
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		ids = append(ids, strings.Fields(line)[0])
	}
	return ids
}

// startWorker starts `paddock worker` in the background.
func (b *e2eBundle) startWorker(args ...string) *exec.Cmd {
	b.t.Helper()
	c := b.cmd(context.Background(), append([]string{"worker"}, args...)...)
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

type showJSON struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	State    string `json:"state"`
	Reason   string `json:"reason"`
	Attempts []struct {
		Number       int             `json:"number"`
		Outcome      string          `json:"outcome"`
		ExitCode     *int            `json:"exit_code"`
		Signal       string          `json:"signal"`
		Reason       string          `json:"reason"`
		ConfinedArgv []string        `json:"confined_argv"`
		Trail        json.RawMessage `json:"hook_trail"`
		StdoutPath   string          `json:"stdout_path"`
	} `json:"attempts"`
}

func (b *e2eBundle) show(ref string) showJSON {
	b.t.Helper()
	out, errOut, code := b.run("--json", "show", ref)
	require.Equal(b.t, 0, code, "show %s: %s", ref, errOut)
	var s showJSON
	require.NoError(b.t, json.Unmarshal([]byte(out), &s), out)
	return s
}

// waitState polls until the job is in one of states, or fails the test.
func (b *e2eBundle) waitState(ref string, timeout time.Duration, states ...string) showJSON {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := b.show(ref)
		for _, st := range states {
			if s.State == st {
				return s
			}
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("job %s still %s after %s, want %v", ref, s.State, timeout, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesWith returns the pids whose command line contains marker.
func processesWith(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func requireNoProcess(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(processesWith(marker)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes with %q survived: %v", marker, processesWith(marker))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestE2ESubmitWorkerLsShowLogs(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	ws := t.TempDir()
	job := b.writeJob("jobs.toml", fmt.Sprintf(`
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
	ids := b.submit(job)
	require.Len(t, ids, 4)

	_, errOut, code := b.run("worker", "--drain", "--concurrency", "2")
	require.Equal(t, 1, code, "drain must exit 1 when a job failed: %s", errOut)

	hello := b.show("hello")
	require.Equal(t, "succeeded", hello.State)
	require.NotEmpty(t, hello.Attempts[0].ConfinedArgv)
	require.Contains(t, hello.Attempts[0].ConfinedArgv, "--ro-bind")
	out, _, code := b.run("logs", "hello")
	require.Equal(t, 0, code)
	require.Equal(t, "hello from the fence\n", out)

	require.Equal(t, "succeeded", b.show("writer").State)
	data, err := os.ReadFile(filepath.Join(ws, "out.txt"))
	require.NoError(t, err)
	require.Equal(t, "written\n", string(data))

	esc := b.show("escaper")
	require.Equal(t, "failed", esc.State)
	require.NoFileExists(t, "/etc/paddock-e2e-escape")
	require.Contains(t, esc.Attempts[0].Reason, "fence")

	fails := b.show("fails")
	require.Equal(t, "failed", fails.State)
	require.Equal(t, 3, *fails.Attempts[0].ExitCode)

	out, _, code = b.run("ls", "--label", "suite=e2e", "--state", "succeeded")
	require.Equal(t, 0, code)
	require.Contains(t, out, "hello")
	require.Contains(t, out, "writer")
	require.NotContains(t, out, "escaper")

	out, _, code = b.run("--json", "ls", "--limit", "0")
	require.Equal(t, 0, code)
	require.Equal(t, 4, strings.Count(out, `"message_type":"job"`))
}

func TestE2ECancelRunningJobLeavesNoProcess(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	marker := fmt.Sprintf("paddock-cancel-%d", time.Now().UnixNano())
	job := b.writeJob("sleep.toml", fmt.Sprintf(`
name = "sleeper"
mode = "workspace_write"
command = "sleep 300 & (setsid sleep 301 &) ; echo %s; sleep 302"
`, marker))
	// The marker is in the shell's own command line; each sleep is its child.
	ids := b.submit(job)
	b.startWorker("--concurrency", "1")
	b.waitState(ids[0], time.Minute, "running")
	deadline := time.Now().Add(20 * time.Second)
	for len(processesWith(marker)) == 0 {
		require.False(t, time.Now().After(deadline), "job never started")
		time.Sleep(50 * time.Millisecond)
	}
	_, errOut, code := b.run("cancel", ids[0])
	require.Equal(t, 0, code, errOut)
	s := b.waitState(ids[0], 30*time.Second, "canceled")
	require.Equal(t, "canceled", s.Attempts[len(s.Attempts)-1].Outcome)
	requireNoProcess(t, marker)
	requireNoProcess(t, "sleep 301")
}

func TestE2ETimeoutKillsSetsidDaemon(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	marker := fmt.Sprintf("paddock-daemon-%d", time.Now().UnixNano())
	job := b.writeJob("daemon.toml", fmt.Sprintf(`
name = "daemonizer"
mode = "workspace_write"
timeout = "1s"
command = ["/bin/sh", "-c", "setsid /bin/sh -c 'sleep 600; : %s' </dev/null >/dev/null 2>&1 & sleep 600"]
`, marker))
	ids := b.submit(job)
	_, _, code := b.run("worker", "--drain")
	require.Equal(t, 1, code)
	s := b.show(ids[0])
	require.Equal(t, "failed", s.State)
	require.Equal(t, "timeout", s.Attempts[0].Outcome)
	requireNoProcess(t, marker)
}

func TestE2EHugeOutputIsCappedAndWorkerMemoryBounded(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "log_max_bytes = 1048576\nlease = \"5s\"\n")
	job := b.writeJob("huge.toml", `
name = "two-gib"
mode = "read_only"
command = "head -c 2147483648 /dev/zero | tr '\\0' x; echo; echo the-end"
timeout = "5m"
`)
	ids := b.submit(job)
	w := b.startWorker("--concurrency", "1", "--drain")
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
	s := b.show(ids[0])
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
	var jobs strings.Builder
	// An interrupted attempt counts against retries (the queue's rule), so
	// the jobs allow a few.
	fmt.Fprintf(&jobs, "[defaults]\nworkspace = %q\nmode = \"workspace_write\"\nretries = 3\nbackoff = \"100ms\"\n", ws)
	const n = 12
	for i := 0; i < n; i++ {
		fmt.Fprintf(&jobs, "[[job]]\nname = \"crash-%02d\"\ncommand = \"echo start $PADDOCK_JOB_NAME >> ran.log; sleep 0.4; echo done $PADDOCK_JOB_NAME >> ran.log\"\n", i)
	}
	ids := b.submit(b.writeJob("crash.toml", jobs.String()))
	require.Len(t, ids, n)
	w := b.startWorker("--concurrency", "2")
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

	_, errOut, code := b.run("worker", "--drain", "--concurrency", "2")
	require.Equal(t, 0, code, errOut)
	interrupted := 0
	for _, id := range ids {
		s := b.show(id)
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
	job := b.writeJob("one.toml", `
name = "fg"
mode = "read_only"
command = "echo out; echo err >&2; exit 7"
`)
	out, errOut, code := b.run("run", job)
	require.Equal(t, 7, code)
	require.Equal(t, "out\n", out)
	require.Contains(t, errOut, "err\n")
	s := b.show("fg")
	require.Equal(t, "failed", s.State)
	require.Len(t, s.Attempts, 1)
}

func TestE2EBadInputIsRefusedWhole(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	job := b.writeJob("bad.toml", `
[[job]]
name = "ok"
command = ["true"]

[[job]]
name = "bad"
comand = ["true"]
`)
	_, errOut, code := b.run("submit", job)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "bad.toml")
	require.Contains(t, errOut, "comand")
	out, _, code := b.run("--json", "ls", "--limit", "0")
	require.Equal(t, 0, code)
	require.Empty(t, strings.TrimSpace(out), "nothing may be enqueued from a bad batch")

	_, errOut, code = b.run("--config", filepath.Join(b.dir, "missing.toml"), "ls")
	require.Equal(t, 2, code, "an explicit --config that does not exist is a usage error: %s", errOut)
}

func TestE2ERetriesKeepEveryAttempt(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	job := b.writeJob("retry.toml", `
name = "flaky"
mode = "read_only"
retries = 1
backoff = "10ms"
command = "echo attempt $PADDOCK_ATTEMPT; exit 1"
`)
	_, errOut, code := b.run("run", job)
	require.Equal(t, 1, code, errOut)
	s := b.show("flaky")
	require.Equal(t, "failed", s.State)
	require.Len(t, s.Attempts, 2)
	require.Equal(t, 1, s.Attempts[0].Number)
	require.Equal(t, 2, s.Attempts[1].Number)
	require.NotEqual(t, s.Attempts[0].StdoutPath, s.Attempts[1].StdoutPath)
	for n := 1; n <= 2; n++ {
		out, _, code := b.run("logs", "--attempt", strconv.Itoa(n), "flaky")
		require.Equal(t, 0, code)
		require.Equal(t, fmt.Sprintf("attempt %d\n", n), out)
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
	fakeDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(fakeDir, "bwrap"), []byte("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap 0.8.0'; exit 0; fi\n"+
		"echo 'bwrap: No permissions to create a new namespace, likely because the kernel does not allow non-privileged user namespaces.' >&2\nexit 1\n"), 0o755))
	ws := t.TempDir()
	job := b.writeJob("mixed.toml", fmt.Sprintf(`
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
	b.submit(job)
	c := b.cmd(context.Background(), "worker", "--drain")
	c.Env = append(c.Env, "PATH="+fakeDir+":/usr/bin:/bin")
	out, err := c.CombinedOutput()
	require.Error(t, err, "a confined job failed, so --drain exits 1: %s", out)
	require.Contains(t, string(out), "sandbox unusable")

	confined := b.show("confined")
	require.Equal(t, "failed", confined.State)
	require.Equal(t, "runner_failed", confined.Attempts[0].Outcome)
	require.Contains(t, confined.Attempts[0].Reason, "never runs unconfined")
	require.Contains(t, confined.Attempts[0].Reason, "No permissions to create a new namespace")
	require.NoFileExists(t, filepath.Join(ws, "confined-ran"), "the confined job must not run at all")

	require.Equal(t, "succeeded", b.show("unconfined").State)
	require.FileExists(t, filepath.Join(ws, "unconfined-ran"))
}

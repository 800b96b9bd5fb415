// Package e2etest holds the helpers of paddock's end-to-end tests: they
// build the real paddock binary once per test binary and drive it as a
// user would, with real bwrap, a real SQLite file and real processes. The
// CLI's own tests (cmd/paddock) and the reliability suites in this
// package's tests (crash, escape, bad input) share them.
//
// Tests that need a working bwrap call [RequireBwrap]: it skips them when
// bwrap is unusable, and fails them instead under PADDOCK_REQUIRE_BWRAP=1
// (CI), because a skipped security test is a hole.
//
// Everything here is for tests: failures end the calling test through
// testify's require.
package e2etest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/testenv"
	"paddock/sandbox"
)

// CommandTimeout bounds each run of paddock by [Bundle.Run].
const CommandTimeout = 3 * time.Minute

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// BinaryEnv names the environment variable that gives [Paddock] a binary
// built beforehand: the Makefile sets it when it runs the escape suite as
// an unprivileged user, who cannot use root's Go build cache.
const BinaryEnv = "PADDOCK_E2E_BIN"

// Paddock returns the path of a paddock binary built from this module's
// cmd/paddock, building it on first use (once per test binary, into a
// temporary directory that [Cleanup] removes), or $PADDOCK_E2E_BIN when
// set.
func Paddock(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv(BinaryEnv); bin != "" {
		return bin
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "paddock-e2e-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "paddock")
		// Built as the Makefile builds it: static (CGO_ENABLED=0).
		build := exec.Command("go", "build", "-o", buildBin, "paddock/cmd/paddock")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := build.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build paddock: %v\n%s", err, out)
		}
	})
	require.NoError(tb, buildErr)
	return buildBin
}

// Cleanup removes the binary built by [Paddock]; call it from TestMain
// after m.Run.
func Cleanup() {
	if buildBin != "" {
		_ = os.RemoveAll(filepath.Dir(buildBin))
	}
}

// Unavailable ends a test that cannot run here (a tool, a kernel feature
// or a host shape it needs is missing): it skips, or fails under
// PADDOCK_REQUIRE_BWRAP=1 (CI), where nothing may be skipped.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	testenv.Unavailable(tb, format, args...)
}

// RequireBwrap probes the host and returns the report. When bwrap is
// unusable it skips the test, or fails it under PADDOCK_REQUIRE_BWRAP=1.
func RequireBwrap(tb testing.TB) sandbox.ProbeReport {
	tb.Helper()
	rep, err := sandbox.Probe(context.Background())
	if err != nil {
		if os.Getenv("PADDOCK_REQUIRE_BWRAP") == "1" {
			tb.Fatalf("bwrap is unusable and PADDOCK_REQUIRE_BWRAP=1: %v (bwrap line %q, hint %q)", err, rep.BwrapLine, rep.Hint)
		}
		tb.Skipf("bwrap is unusable: %v (set PADDOCK_REQUIRE_BWRAP=1 to fail instead)", err)
	}
	return rep
}

// DefaultConfig is the config of [Setup] when given "": short leases and
// graces, so that crash and stop tests do not wait long.
const DefaultConfig = "lease = \"3s\"\nkill_grace = \"1s\"\nshutdown_grace = \"2s\"\n"

// Bundle is one isolated paddock installation: a state directory and a
// config file in a fresh temporary directory, and the environment paddock
// runs with.
type Bundle struct {
	T      *testing.T
	Bin    string
	State  string
	Config string
	Dir    string
	// Env is added to paddock's environment (after the test's own).
	Env []string
}

// Setup makes a Bundle with config (DefaultConfig when ""), after
// [RequireBwrap].
func Setup(t *testing.T, config string) *Bundle {
	t.Helper()
	RequireBwrap(t)
	dir := t.TempDir()
	b := &Bundle{T: t, Bin: Paddock(t), State: filepath.Join(dir, "state"), Config: filepath.Join(dir, "config.toml"), Dir: dir}
	if config == "" {
		config = DefaultConfig
	}
	require.NoError(t, os.WriteFile(b.Config, []byte(config), 0o600))
	require.NoError(t, os.Mkdir(b.tmpDir(), 0o700))
	return b
}

// tmpDir is the TMPDIR of the bundle's paddock processes.
func (b *Bundle) tmpDir() string { return filepath.Join(b.Dir, "tmp") }

// Cmd returns paddock with the bundle's state dir and config and args.
func (b *Bundle) Cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, b.Bin, append([]string{"--state-dir", b.State, "--config", b.Config}, args...)...)
	// A TMPDIR of the bundle's own: what a process killed with SIGKILL
	// leaves there (the probe's scratch directory) goes with the test.
	c.Env = append(append(os.Environ(), "PADDOCK_STATE_DIR=", "TMPDIR="+b.tmpDir()), b.Env...)
	return c
}

// Run runs paddock and returns stdout, stderr and the exit code.
func (b *Bundle) Run(args ...string) (string, string, int) {
	b.T.Helper()
	return b.RunIn("", "", args...)
}

// RunIn is Run in directory dir ("" = the test's) with stdin as standard
// input ("" = the null device, as Run).
func (b *Bundle) RunIn(dir, stdin string, args ...string) (string, string, int) {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	c := b.Cmd(ctx, args...)
	c.Dir = dir
	if stdin != "" {
		c.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(b.T, err)
	}
	return out.String(), errb.String(), code
}

// WriteJob writes text to name in the bundle's directory and returns its path.
func (b *Bundle) WriteJob(name, text string) string {
	p := filepath.Join(b.Dir, name)
	require.NoError(b.T, os.WriteFile(p, []byte(text), 0o600))
	return p
}

// Submit enqueues a job file and returns the ids.
func (b *Bundle) Submit(paths ...string) []string {
	b.T.Helper()
	out, errOut, code := b.Run(append([]string{"submit"}, paths...)...)
	require.Equal(b.T, 0, code, "submit: %s", errOut)
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		ids = append(ids, strings.Fields(line)[0])
	}
	return ids
}

// StartWorker starts `paddock worker args…` in the background, logging to
// worker.log in the bundle's directory (printed when the test fails); it is
// killed at the end of the test.
func (b *Bundle) StartWorker(args ...string) *exec.Cmd {
	b.T.Helper()
	c := b.Cmd(context.Background(), append([]string{"worker"}, args...)...)
	logf, err := os.OpenFile(filepath.Join(b.Dir, "worker.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(b.T, err)
	c.Stdout, c.Stderr = logf, logf
	require.NoError(b.T, c.Start())
	b.T.Cleanup(func() {
		_ = c.Process.Kill()
		_, _ = c.Process.Wait()
		logf.Close()
		if b.T.Failed() {
			log, _ := os.ReadFile(filepath.Join(b.Dir, "worker.log"))
			b.T.Logf("worker log:\n%s", log)
		}
	})
	return c
}

// SetPolicy writes text as policy.toml in the bundle's directory and makes
// it the queue's policy (`paddock policy set`); it returns the policy's
// sha256, as every attempt run under it records.
func (b *Bundle) SetPolicy(text string) string {
	b.T.Helper()
	p := filepath.Join(b.Dir, "policy.toml")
	require.NoError(b.T, os.WriteFile(p, []byte(text), 0o600))
	out, errOut, code := b.Run("policy", "set", p)
	require.Equal(b.T, 0, code, "policy set: %s", errOut)
	sum := sha256.Sum256([]byte(text))
	digest := hex.EncodeToString(sum[:])
	require.Contains(b.T, out, digest)
	return digest
}

// Attempt is one attempt as `paddock --json show` prints it.
type Attempt struct {
	Number          int             `json:"number"`
	DurationSeconds float64         `json:"duration_seconds"`
	Outcome         string          `json:"outcome"`
	ExitCode        *int            `json:"exit_code"`
	Signal          string          `json:"signal"`
	Reason          string          `json:"reason"`
	ConfinedArgv    []string        `json:"confined_argv"`
	Trail           json.RawMessage `json:"hook_trail"`
	StdoutPath      string          `json:"stdout_path"`
	PolicySHA256    string          `json:"policy_sha256"`
}

// Job is a job as `paddock --json show` prints it.
type Job struct {
	ID           string    `json:"id"`
	Name         string    `json:"name"`
	State        string    `json:"state"`
	Reason       string    `json:"reason"`
	AttemptCount int       `json:"attempt_count"`
	Attempts     []Attempt `json:"attempts"`
}

// Show returns `paddock --json show ref`.
func (b *Bundle) Show(ref string) Job {
	b.T.Helper()
	out, errOut, code := b.Run("--json", "show", ref)
	require.Equal(b.T, 0, code, "show %s: %s", ref, errOut)
	var s Job
	require.NoError(b.T, json.Unmarshal([]byte(out), &s), out)
	return s
}

// Listed is a job as `paddock --json ls` prints it.
type Listed struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	State        string `json:"state"`
	AttemptCount int    `json:"attempt_count"`
	Outcome      string `json:"outcome"`
	Reason       string `json:"reason"`
}

// List returns every job (`paddock --json ls --limit 0`), newest first;
// none when the state directory holds no queue yet (ls refuses, exit 2:
// nothing was ever enqueued there).
func (b *Bundle) List() []Listed {
	b.T.Helper()
	out, errOut, code := b.Run("--json", "ls", "--limit", "0")
	if code == 2 && strings.Contains(errOut, `"no queue at `+b.State+`: `) {
		return nil
	}
	require.Equal(b.T, 0, code, "ls: %s", errOut)
	var jobs []Listed
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var j Listed
		require.NoError(b.T, dec.Decode(&j), out)
		jobs = append(jobs, j)
	}
	return jobs
}

// WaitState polls until the job is in one of states, or fails the test
// after timeout. A job that does not exist yet (a file in the inbox) is
// waited for too.
func (b *Bundle) WaitState(ref string, timeout time.Duration, states ...string) Job {
	b.T.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var s Job
		if out, _, code := b.Run("--json", "show", ref); code == 0 {
			require.NoError(b.T, json.Unmarshal([]byte(out), &s), out)
		}
		for _, st := range states {
			if s.State == st {
				return s
			}
		}
		if time.Now().After(deadline) {
			b.T.Fatalf("job %s still %q after %s, want %v", ref, s.State, timeout, states)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// HasOpen reports whether process pid has a file open whose name ends in
// suffix (read from /proc/PID/fd).
func HasOpen(pid int, suffix string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasSuffix(target, suffix) {
			return true
		}
	}
	return false
}

// ProcessesWith returns the pids (other than this process) whose command
// line contains marker.
func ProcessesWith(marker string) []int {
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

// LiveSleepsWith lists the pids of live `sleep` processes whose arguments
// contain tok (a zombie is dead; bwrap's own command line, which holds the
// job's script, does not count).
func LiveSleepsWith(tok string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.HasPrefix(b, []byte("sleep\x00")) || !bytes.Contains(b, []byte(tok)) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// RequireNoProcess fails the test when a process whose command line
// contains marker is still alive 5 seconds from now.
func RequireNoProcess(t testing.TB, marker string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(ProcessesWith(marker)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("processes with %q survived: %v", marker, ProcessesWith(marker))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KillStrayBwraps registers a cleanup that kills, with SIGKILL, every bwrap
// process whose command line names dir. A worker killed with SIGKILL just
// as it starts a job can leave that job's bwrap idle (bubblewrap 0.8.0 sets
// its kill-with-parent only after a moment: containers/bubblewrap#633; the
// docs/fence.md says so); a test that kills workers should not leave them on the
// machine.
func KillStrayBwraps(t testing.TB, dir string) {
	t.Cleanup(func() {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil {
				continue
			}
			argv := strings.Split(string(cmdline), "\x00")
			if filepath.Base(argv[0]) == "bwrap" && bytes.Contains(cmdline, []byte(dir)) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// Wat assembles the WebAssembly text file path (a hand-written hostile
// hook module, for example) with wat2wasm into the test's temporary
// directory and returns the module's path. When wat2wasm is missing
// (`make test` installs Debian's wabt) it skips the test, or fails it
// under PADDOCK_REQUIRE_BWRAP=1: in CI no hostile-module test is skipped.
func Wat(tb testing.TB, path string) string {
	tb.Helper()
	wat, err := exec.LookPath("wat2wasm")
	if err != nil {
		if os.Getenv("PADDOCK_REQUIRE_BWRAP") == "1" {
			tb.Fatalf("wat2wasm is missing and PADDOCK_REQUIRE_BWRAP=1: install Debian's wabt (make test does)")
		}
		tb.Skip("wat2wasm is missing: install Debian's wabt (make test does), or set PADDOCK_REQUIRE_BWRAP=1 to fail instead")
	}
	out := filepath.Join(tb.TempDir(), strings.TrimSuffix(filepath.Base(path), ".wat")+".wasm")
	msg, err := exec.Command(wat, path, "-o", out).CombinedOutput()
	require.NoError(tb, err, "wat2wasm %s: %s", path, msg)
	return out
}

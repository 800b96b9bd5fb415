package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"paddock/internal/testenv"
)

// unavailable ends a test that cannot run here (a kernel feature, a host
// shape it needs is missing): it skips, or fails under
// PADDOCK_REQUIRE_BWRAP=1 (CI), where nothing may be skipped.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	testenv.Unavailable(t, format, args...)
}

// requireBwrap probes the host and returns the report, or skips the test
// when bwrap is unusable; under PADDOCK_REQUIRE_BWRAP=1 (CI) it fails
// instead, because a skipped security test is a hole.
func requireBwrap(t *testing.T) ProbeReport {
	t.Helper()
	rep, err := Probe(context.Background())
	if err != nil {
		unavailable(t, "bwrap is unusable: %v (bwrap line %q, hint %q)", err, rep.BwrapLine, rep.Hint)
	}
	return rep
}

// requireRoot skips a test that must run as root (the remount escape), or
// fails it under PADDOCK_REQUIRE_BWRAP=1: CI runs as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "this test needs root")
	}
}

// nobody is the unprivileged user the root test process also runs jobs as.
const nobody = 65534

// who runs a job: the test process itself, and nobody when we are root.
type who struct {
	name string
	cred *syscall.Credential // nil: the test process's own
	uid  int
}

func whos() []who {
	w := []who{{name: "self", uid: os.Geteuid()}}
	if os.Geteuid() == 0 {
		w = append(w, who{name: "nobody", cred: &syscall.Credential{Uid: nobody, Gid: nobody}, uid: nobody})
	}
	return w
}

// grades returns the discovery of this host and, when it is full, the same
// with the partial base forced.
func grades(rep ProbeReport) []Discovery {
	d := rep.Discovery()
	out := []Discovery{d}
	if d.Grade == GradeFull {
		p := d
		p.Grade = GradePartial
		out = append(out, p)
	}
	return out
}

// matrix runs f for every grade × user this host offers.
func matrix(t *testing.T, f func(t *testing.T, d Discovery, u who)) {
	rep := requireBwrap(t)
	for _, d := range grades(rep) {
		for _, u := range whos() {
			t.Run(string(d.Grade)+"/"+u.name, func(t *testing.T) {
				t.Parallel()
				f(t, d, u)
			})
		}
	}
}

// hostDir makes a fresh directory under base owned by uid (mode 0755) and
// returns its canonical path. base "" means the default temp dir (/tmp).
func hostDir(t *testing.T, base string, uid int) string {
	t.Helper()
	if base == "" {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "paddock-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	require.NoError(t, os.Chown(dir, uid, uid))
	dir, err = filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	return dir
}

func token(t *testing.T) string {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

type jobResult struct {
	status Status
	state  *os.ProcessState
	stdout string
	stderr string
	class  Classification
}

// runJob confines argv with d and p and runs it as a runner would: its own
// process group, the status pipe on fd 3, a bounded time.
func runJob(t *testing.T, d Discovery, p Policy, u who, argv ...string) jobResult {
	t.Helper()
	full, err := ConfineWith(argv, p, d)
	require.NoError(t, err)
	return runArgv(t, full, d, p, u)
}

// runArgv runs a confined argv as runJob does, with the layers' files
// and the pinned roots (from FirstRootFD on) inherited.
func runArgv(t *testing.T, full []string, d Discovery, p Policy, u who, roots ...*os.File) jobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.ExtraFiles = inherited(t, d, p, u, pw, roots...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LC_ALL=C"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: u.cred}
	require.NoError(t, cmd.Start())
	pw.Close()
	st := readStatusAfter(t, cmd, pr)
	require.NoError(t, ctx.Err(), "job timed out; stderr: %s", stderr.String())
	res := jobResult{status: st, state: cmd.ProcessState, stdout: stdout.String(), stderr: stderr.String()}
	res.class = Classify(ClassifyParams{Mode: p.Mode(), State: cmd.ProcessState, Status: st, Stderr: stderr.Bytes()})
	return res
}

// readStatusAfter waits for cmd and reads the status pipe as a runner
// should: concurrently, with a deadline after the process is gone.
func readStatusAfter(t *testing.T, cmd *exec.Cmd, pr *os.File) Status {
	t.Helper()
	type read struct {
		st  Status
		err error
	}
	ch := make(chan read, 1)
	go func() { st, err := ReadStatus(pr); ch <- read{st, err} }()
	_ = cmd.Wait()
	require.NoError(t, pr.SetReadDeadline(time.Now().Add(5*time.Second)))
	r := <-ch
	require.NoError(t, r.err, "the status pipe stayed open after bwrap exited")
	return r.st
}

func mustPolicy(t *testing.T, pp PolicyParams) Policy {
	t.Helper()
	p, err := NewPolicy(pp)
	require.NoError(t, err)
	return p
}

func sh(script string, args ...string) []string {
	return append([]string{"/bin/sh", "-c", script, "sh"}, args...)
}

// TestFenceWrites: a write inside the workspace lands; writes outside fail;
// the host's /tmp is untouched. Workspaces under /tmp (hidden by the
// sandbox's tmpfs, shown by the bind) and under /var/tmp.
func TestFenceWrites(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		for _, base := range []string{"/tmp", "/var/tmp"} {
			ws := hostDir(t, base, u.uid)
			// Writable by the job's user on the host, outside the workspace:
			// a sibling under the same base, one under /var/tmp (shown
			// read-only), and one under the host's /tmp (hidden).
			sibling := hostDir(t, base, u.uid)
			varTmp := hostDir(t, "/var/tmp", u.uid)
			hostTmp := hostDir(t, "/tmp", u.uid)
			for _, mode := range []Mode{ModeWorkspaceWrite, ModeReadOnly} {
				p := mustPolicy(t, PolicyParams{Mode: mode, Workspace: ws, Network: true})
				res := runJob(t, d, p, u, sh(`
echo in > "$1/inside" || exit 20
if ( echo out > "$2/outside" ) 2>/dev/null; then exit 21; fi
if ( echo out > "$3/outside" ) 2>/dev/null; then exit 22; fi
echo out > "$4/outside" 2>/dev/null
echo tmp > /tmp/scratch || exit 23
exit 0`, ws, sibling, varTmp, hostTmp)...)
				_, err := os.Stat(filepath.Join(ws, "inside"))
				if mode == ModeWorkspaceWrite {
					require.Equal(t, OutcomeSucceeded, res.class.Outcome, "%s %+v stderr=%s", mode, res.class, res.stderr)
					b, err := os.ReadFile(filepath.Join(ws, "inside"))
					require.NoError(t, err)
					require.Equal(t, "in\n", string(b))
					require.NoError(t, os.Remove(filepath.Join(ws, "inside")))
				} else {
					require.Equal(t, OutcomeFailed, res.class.Outcome)
					require.Equal(t, 20, res.class.ExitCode, res.stderr)
					require.True(t, res.class.Denied, "%+v", res.class)
					require.True(t, errors.Is(err, os.ErrNotExist), "read_only wrote the workspace")
				}
				for _, dir := range []string{sibling, varTmp, hostTmp} {
					_, err := os.Stat(filepath.Join(dir, "outside"))
					require.True(t, errors.Is(err, os.ErrNotExist), "a write outside the workspace landed in %s (%s)", dir, mode)
				}
				_, err = os.Stat("/tmp/scratch")
				require.True(t, errors.Is(err, os.ErrNotExist), "the sandbox's /tmp is the host's")
			}
		}
	})
}

// TestDevNodes: input 2. bwrap binds are nodev; the partial base must still
// give working device nodes.
func TestDevNodes(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		ws := hostDir(t, "", u.uid)
		p := mustPolicy(t, PolicyParams{Mode: ModeReadOnly, Workspace: ws, Network: true})
		res := runJob(t, d, p, u, sh(`
echo x > /dev/null || exit 10
test "$(head -c 4 /dev/zero | wc -c)" = 4 || exit 11
test "$(head -c 4 /dev/full | wc -c)" = 4 || exit 12
test "$(head -c 4 /dev/urandom | wc -c)" = 4 || exit 13
test "$(head -c 4 /dev/random | wc -c)" = 4 || exit 14
echo x > /dev/urandom || exit 15
if echo x 2>/dev/null > /dev/full; then exit 16; fi
echo ok`)...)
		require.Equal(t, OutcomeSucceeded, res.class.Outcome, "%+v %s", res.class, res.stderr)
		require.Equal(t, "ok\n", res.stdout)
	})
}

// TestSeedPartialBaseBreaksDevNull documents input 2 against the seed's
// partial base: binds are nodev.
func TestSeedPartialBaseBreaksDevNull(t *testing.T) {
	rep := requireBwrap(t)
	out, err := exec.Command(rep.Executable, "--unshare-user", "--ro-bind", "/", "/", "--die-with-parent", "--", "/bin/sh", "-c", "echo x >/dev/null").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "Permission denied")
}

// TestRootCannotRemount: input 3. As root the job gets a user namespace and
// no capabilities: it cannot remount / read-write, and cannot regain
// capabilities through a nested user namespace.
func TestRootCannotRemount(t *testing.T) {
	requireRoot(t)
	rep := requireBwrap(t)
	for _, d := range grades(rep) {
		t.Run(string(d.Grade), func(t *testing.T) {
			t.Parallel()
			ws := hostDir(t, "", 0)
			target := filepath.Join("/etc", "paddock-escaped-"+token(t))
			t.Cleanup(func() { os.Remove(target) })
			p := mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true})
			res := runJob(t, d, p, who{name: "root"}, sh(`
t=$1
mount -o remount,rw,bind / 2>/dev/null && echo remounted
echo x > "$t" 2>/dev/null && echo wrote
unshare -Ur sh -c 'mount -o remount,rw,bind / && echo x > "$0"' "$t" 2>/dev/null && echo nested
unshare -m sh -c 'mount -o remount,rw,bind / && echo x > "$0"' "$t" 2>/dev/null && echo mountns
grep '^CapEff' /proc/self/status 2>/dev/null
exit 0`, target)...)
			require.Equal(t, OutcomeSucceeded, res.class.Outcome, res.stderr)
			require.NotContains(t, res.stdout, "remounted")
			require.NotContains(t, res.stdout, "wrote")
			require.NotContains(t, res.stdout, "nested")
			require.NotContains(t, res.stdout, "mountns")
			if d.Grade == GradeFull {
				require.Contains(t, res.stdout, "CapEff:\t0000000000000000")
			}
			_, err := os.Stat(target)
			require.True(t, errors.Is(err, os.ErrNotExist), "root escaped the fence")
		})
	}
}

// TestProcRootNoWayOut: /proc/<pid>/root of a host process (same user) must
// not reach the host's writable root, at either grade.
func TestProcRootNoWayOut(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		ws := hostDir(t, "", u.uid)
		target := hostDir(t, "/var/tmp", u.uid)
		host := exec.Command("sleep", "60")
		host.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred}
		require.NoError(t, host.Start())
		t.Cleanup(func() { host.Process.Kill(); host.Wait() })
		pid := strconv.Itoa(host.Process.Pid)
		p := mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true})
		res := runJob(t, d, p, u, sh(`
for pid in "$1" 1 $(ls /proc 2>/dev/null | grep '^[0-9]'); do
  ( echo x > "/proc/$pid/root$2/escaped" ) 2>/dev/null && echo "escaped via $pid"
done
exit 0`, pid, target)...)
		require.Equal(t, OutcomeSucceeded, res.class.Outcome, res.stderr)
		require.NotContains(t, res.stdout, "escaped")
		_, err := os.Stat(filepath.Join(target, "escaped"))
		require.True(t, errors.Is(err, os.ErrNotExist), "wrote through /proc/%s/root", pid)
	})
}

// TestSetsidGrandchildDies: a grandchild in its own session does not
// outlive bwrap when the runner SIGKILLs bwrap's process group.
func TestSetsidGrandchildDies(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		ws := hostDir(t, "", u.uid)
		tok := "1000." + strconv.Itoa(int(time.Now().UnixNano()%1000000))
		p := mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true})
		argv, err := ConfineWith(sh(`setsid sleep "$1" </dev/null >/dev/null 2>&1 & echo started; exec sleep 1000`, tok), p, d)
		require.NoError(t, err)
		pr, pw, err := os.Pipe()
		require.NoError(t, err)
		defer pr.Close()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.ExtraFiles = inherited(t, d, p, u, pw)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: u.cred}
		require.NoError(t, cmd.Start())
		pw.Close()
		require.Eventually(t, func() bool { return len(pidsWith(tok)) > 0 }, 10*time.Second, 20*time.Millisecond, "grandchild never started")
		require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL))
		st := readStatusAfter(t, cmd, pr)
		c := Classify(ClassifyParams{Mode: p.Mode(), State: cmd.ProcessState, Status: st})
		require.Equal(t, OutcomeFailed, c.Outcome)
		require.Equal(t, "SIGKILL", c.Signal)
		require.Eventually(t, func() bool { return len(pidsWith(tok)) == 0 }, 10*time.Second, 20*time.Millisecond, "setsid grandchild outlived bwrap: %v", pidsWith(tok))
	})
}

// TestInitWatch: bwrap reports the command's exit code while other
// processes of the sandbox still live (its init reports through an
// eventfd and keeps reaping), so the exit-code record does not mean the
// job is over. The init's exit does: when InitWatch is done, the job's
// setsid daemon and its plain background process are dead, and before
// that they were alive. A job without stragglers is done without
// waiting for anyone to kill bwrap; the watch of a reaped init is done at
// once; a status without the init is refused.
func TestInitWatch(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		ws := hostDir(t, "", u.uid)
		p := mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true})
		start := func(script string, args ...string) (*exec.Cmd, chan Status, chan Status) {
			argv, err := ConfineWith(sh(script, args...), p, d)
			require.NoError(t, err)
			pr, pw, err := os.Pipe()
			require.NoError(t, err)
			t.Cleanup(func() { pr.Close() })
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.ExtraFiles = inherited(t, d, p, u, pw)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: u.cred}
			require.NoError(t, cmd.Start())
			pw.Close()
			t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
			records := make(chan Status, 4)
			done := make(chan Status, 1)
			go func() {
				st, err := WatchStatus(pr, func(s Status) { records <- s })
				assert.NoError(t, err)
				done <- st
			}()
			return cmd, records, done
		}
		next := func(records chan Status) Status {
			select {
			case s := <-records:
				return s
			case <-time.After(20 * time.Second):
				t.Fatal("no status record")
				return Status{}
			}
		}

		// Stragglers: the command exits, its daemons sleep on.
		tok := "1000." + strconv.Itoa(int(time.Now().UnixNano()%1000000))
		cmd, records, done := start(`setsid sleep "$1" </dev/null >/dev/null 2>&1 & sleep "$1" </dev/null >/dev/null 2>&1 &
while [ ! -e "$2/go" ]; do sleep 0.01; done; exit 7`, tok, ws)
		child := next(records)
		require.NotZero(t, child.ChildPID)
		require.NotZero(t, child.PidNamespace, "bwrap 0.5 and later report the pid namespace")
		doneWith := make(chan bool, 1)
		w, err := WatchInit(child, func(exited bool) { doneWith <- exited })
		require.NoError(t, err)
		defer w.Stop()
		// A watch stopped while the init lives reports no exit.
		stoppedWith := make(chan bool, 1)
		early, err := WatchInit(child, func(exited bool) { stoppedWith <- exited })
		require.NoError(t, err)
		early.Stop()
		require.False(t, <-stoppedWith)
		select {
		case <-early.Done():
			t.Fatal("a stopped watch is done")
		default:
		}
		require.Eventually(t, func() bool { return len(pidsWith(tok)) == 2 }, 10*time.Second, 10*time.Millisecond, "the job's two background processes never started")
		require.NoError(t, os.WriteFile(filepath.Join(ws, "go"), nil, 0o644)) // the command exits now
		exited := next(records)
		require.True(t, exited.Ran)
		require.Equal(t, 7, exited.ExitCode)
		// Only bwrap's exit kills the init, and with it the stragglers:
		// the exit-code record alone proves nothing.
		select {
		case <-w.Done():
			// bwrap may already be gone; then so must the stragglers be.
		case <-time.After(5 * time.Second):
			t.Fatal("the init did not exit after bwrap reported the exit code")
		}
		require.Empty(t, pidsWith(tok), "processes of the job were alive after the sandbox's init exited")
		require.True(t, <-doneWith, "onDone reports the exit")
		_ = cmd.Wait()
		require.Equal(t, 7, cmd.ProcessState.ExitCode())
		require.Equal(t, exited, <-done)

		// No stragglers: the init exits by itself once the command has.
		_, records, _ = start(`exit 3`)
		child = next(records)
		w2, err := WatchInit(child, nil)
		require.NoError(t, err)
		defer w2.Stop()
		select {
		case <-w2.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("the init of a finished job did not exit")
		}
		// Once reaped, the same status is done at once.
		require.Eventually(t, func() bool {
			w3, err := WatchInit(child, nil)
			require.NoError(t, err)
			defer w3.Stop()
			select {
			case <-w3.Done():
				return true
			default:
				return false
			}
		}, 10*time.Second, 10*time.Millisecond)

		_, err = WatchInit(Status{ChildPID: child.ChildPID}, nil)
		require.ErrorIs(t, err, ErrInitUnknown)
	})
}

// pidsWith lists host pids of "sleep" processes whose arguments contain tok
// (bwrap's own command line contains tok too, and does not count).
func pidsWith(tok string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if bytes.HasPrefix(b, []byte("sleep\x00")) && bytes.Contains(b, []byte(tok)) {
			if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
				continue // a zombie is dead
			}
			out = append(out, pid)
		}
	}
	return out
}

// TestCwd: input 4. The command runs in the policy's cwd, also under /tmp
// inside the workspace; a cwd the sandbox cannot show is refused before
// anything runs.
func TestCwd(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		ws := hostDir(t, "/tmp", u.uid)
		sub := filepath.Join(ws, "sub")
		require.NoError(t, os.Mkdir(sub, 0o755))
		require.NoError(t, os.Chown(sub, u.uid, u.uid))
		p := mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Cwd: sub, Network: true})
		res := runJob(t, d, p, u, "pwd")
		require.Equal(t, OutcomeSucceeded, res.class.Outcome, res.stderr)
		require.Equal(t, sub+"\n", res.stdout)

		other := hostDir(t, "/tmp", u.uid)
		_, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Cwd: other, Network: true})
		require.ErrorIs(t, err, ErrBadPath)
		require.ErrorContains(t, err, "/tmp")

		// A cwd that vanished after the policy was built: bwrap refuses,
		// the command never runs, and it is a runner failure.
		require.NoError(t, os.Remove(sub))
		res = runJob(t, d, p, u, "pwd")
		require.False(t, res.status.Ran)
		require.Equal(t, OutcomeRunnerFailed, res.class.Outcome)
		require.Contains(t, res.class.Reason, "bwrap: Can't chdir to")
		require.Empty(t, res.stdout)
	})
}

// TestNewSession: input 5. The command runs in a session created inside the
// sandbox (led by bwrap, pid 1 of the pid namespace), so it has no
// controlling terminal to push input into (TIOCSTI). Without --new-session
// the session leader is outside the namespace and reads as 0. Checked
// through /proc/self/stat, which only the full grade has.
func TestNewSession(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		if d.Grade != GradeFull {
			return // no procfs at the partial grade; the argv test covers --new-session
		}
		ws := hostDir(t, "", u.uid)
		p := mustPolicy(t, PolicyParams{Mode: ModeReadOnly, Workspace: ws, Network: true})
		res := runJob(t, d, p, u, sh(`read -r pid comm state ppid pgrp sid rest < /proc/self/stat; echo "$sid"`)...)
		require.Equal(t, "1\n", res.stdout, res.stderr)
	})
}

// TestStatus: input 6. "bwrap failed" and "the command exited 1" both exit
// 1; the status record tells them apart, and a job printing a bwrap-like
// line is still a job failure.
func TestStatus(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		ws := hostDir(t, "", u.uid)
		p := mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true})

		res := runJob(t, d, p, u, sh(`echo "bwrap: Can't mount proc on /newroot/proc" >&2; exit 1`)...)
		require.True(t, res.status.Ran)
		require.Equal(t, 1, res.state.ExitCode())
		require.Equal(t, Classification{Outcome: OutcomeFailed, ExitCode: 1, Reason: "exit status 1"}, res.class)

		// Not found: bwrap's execvp exits 1; the launcher's, 127, and
		// it says so on the report descriptor.
		res = runJob(t, d, p, u, "/nonexistent/command")
		if d.LandlockABI > 0 {
			require.Equal(t, 127, res.state.ExitCode())
			require.Equal(t, "execvp /nonexistent/command: no such file or directory", res.status.LaunchError)
		} else {
			require.Equal(t, 1, res.state.ExitCode())
		}
		require.False(t, res.status.Ran)
		require.Equal(t, OutcomeRunnerFailed, res.class.Outcome)
		require.Contains(t, res.class.Reason, "execvp /nonexistent/command")

		res = runJob(t, d, p, u, sh(`exit 0`)...)
		require.Equal(t, OutcomeSucceeded, res.class.Outcome)

		res = runJob(t, d, p, u, sh(`touch /usr/paddock-denied`)...)
		require.Equal(t, OutcomeFailed, res.class.Outcome)
		require.True(t, res.class.Denied, "%+v", res.class)
		require.Contains(t, res.class.Reason, "Read-only file system")
	})
}

// TestNetworkIsolation: network = false leaves only the loopback interface.
func TestNetworkIsolation(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		if !d.NetworkIsolation {
			if testenv.Required() {
				t.Fatal("network isolation unavailable and PADDOCK_REQUIRE_BWRAP=1")
			}
			return
		}
		ws := hostDir(t, "", u.uid)
		p := mustPolicy(t, PolicyParams{Mode: ModeReadOnly, Workspace: ws})
		res := runJob(t, d, p, u, sh(`cat /proc/net/dev 2>/dev/null | tail -n +3 | cut -d: -f1 | tr -d ' '`)...)
		require.Equal(t, OutcomeSucceeded, res.class.Outcome, res.stderr)
		if d.Grade == GradeFull {
			lines := strings.Fields(res.stdout)
			require.Contains(t, lines, "lo")
			for _, l := range lines {
				require.Equal(t, "lo", l, "an interface other than lo is visible: %q", res.stdout)
			}
		}
	})
}

// TestProbeShells: input 1. The probe's check script is correct under dash
// and bash; the seed's script fails under dash at a good host.
func TestProbeShells(t *testing.T) {
	rep := requireBwrap(t)
	for _, shell := range []string{"/bin/dash", "/bin/bash", "/bin/sh"} {
		t.Run(filepath.Base(shell), func(t *testing.T) {
			t.Parallel()
			if _, err := os.Stat(shell); err != nil {
				t.Logf("%s not installed; nothing to check", shell)
				return
			}
			got, err := ProbeWith(context.Background(), ProbeParams{Executable: rep.Executable, Shell: shell})
			require.NoError(t, err)
			require.Equal(t, rep.Grade, got.Grade)
			require.Equal(t, rep.NetworkIsolation, got.NetworkIsolation)
		})
	}
	if _, err := os.Stat("/bin/dash"); err == nil {
		ws := hostDir(t, "", os.Geteuid())
		p := mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true})
		res := runJob(t, rep.Discovery(), p, who{}, "/bin/dash", "-c", `echo x > /dev/null && ! : > "$0"`, "/usr/seed-probe")
		require.Equal(t, 2, res.class.ExitCode, "the seed's probe exits 2 under dash: %s", res.stderr)
	}
}

// TestProbeReport checks what paddock probe shows on this host.
func TestProbeReport(t *testing.T) {
	rep := requireBwrap(t)
	require.True(t, filepath.IsAbs(rep.Executable))
	require.NotEmpty(t, rep.Version)
	require.Empty(t, rep.Error)
	require.Equal(t, os.Geteuid() == 0, rep.Root)
	require.Equal(t, rep.Discovery(), Discovered(), "a usable probe is memoized")
	again, err := Probe(context.Background())
	require.NoError(t, err)
	require.Equal(t, rep, again)
}

// TestProbeFailures: a missing bwrap and a bwrap that is not bubblewrap
// are unusable, with an explanation; failures are not memoized.
func TestProbeFailures(t *testing.T) {
	t.Parallel()
	rep, err := ProbeWith(context.Background(), ProbeParams{Executable: "/nonexistent/bwrap"})
	require.ErrorIs(t, err, ErrUnusable)
	require.Equal(t, GradeUnusable, rep.Grade)
	require.Contains(t, rep.Error, "not found")
	require.Contains(t, rep.Hint, "apt-get install bubblewrap")

	rep, err = ProbeWith(context.Background(), ProbeParams{Executable: "/bin/false"})
	require.ErrorIs(t, err, ErrUnusable)
	require.Equal(t, GradeUnusable, rep.Grade)

	// A "bwrap" that prints a version but cannot build namespaces: the
	// probe reports the bwrap line and its hint.
	dir := t.TempDir()
	fake := filepath.Join(dir, "bwrap")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'bubblewrap 0.8.0'; exit 0; fi\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"), 0o755))
	// A test running beside this one may fork while the script is still
	// open for writing, and its exec then fails with ETXTBSY for a moment
	// (golang/go#22315): probe again then.
	for try := 0; ; try++ {
		rep, err = ProbeWith(context.Background(), ProbeParams{Executable: fake})
		if !strings.Contains(rep.Error, "text file busy") || try == 50 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	require.ErrorIs(t, err, ErrUnusable)
	require.Equal(t, "bwrap: setting up uid map: Permission denied", rep.BwrapLine, rep.Error)
	require.Contains(t, rep.Hint, "apparmor")
	require.Equal(t, fake, rep.Executable)
	require.True(t, rep.DisableUserns)
}

// TestProbeSetuid copies bwrap, makes the copy setuid root and probes it as
// nobody: the probe reports it and either works with the same argv or
// explains why not.
func TestProbeSetuid(t *testing.T) {
	requireRoot(t)
	rep := requireBwrap(t)
	dir := hostDir(t, "/var/tmp", 0)
	suid := filepath.Join(dir, "bwrap")
	copyFile(t, rep.Executable, suid, 0o755)
	require.NoError(t, os.Chmod(suid, os.ModeSetuid|0o755))
	// Whatever happens, leave no setuid-root process behind.
	t.Cleanup(func() { killRunning(suid) })
	// Run the probe as nobody through a re-exec of (a copy of) the test
	// binary, whose build directory nobody cannot enter.
	self := filepath.Join(dir, "sandbox.test")
	copyFile(t, os.Args[0], self, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, "-test.run", "^TestHelperProbeSetuid$", "-test.v")
	cmd.Env = append(os.Environ(), "PADDOCK_HELPER_SETUID_BWRAP="+suid)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "setuid=true")
	require.Contains(t, string(out), "disable_userns=false")
	require.Contains(t, string(out), "err=<nil>")
	t.Log(string(out))
	// A failing setuid bwrap leaves its forked half blocked on a setup
	// eventfd, orphaned; the probe kills its process group (bwrap 0.8.0).
	require.Zero(t, killRunning(suid), "the probe left a setuid bwrap running")
}

// killRunning sends SIGKILL to every process whose executable is exe and
// returns how many there were.
func killRunning(exe string) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && strings.TrimSuffix(target, " (deleted)") == exe {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}

func copyFile(t *testing.T, from, to string, perm os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, perm))
}

// TestHelperProbeSetuid is run by TestProbeSetuid as nobody.
func TestHelperProbeSetuid(t *testing.T) {
	exe := os.Getenv("PADDOCK_HELPER_SETUID_BWRAP")
	if exe == "" {
		return
	}
	rep, err := ProbeWith(context.Background(), ProbeParams{Executable: exe})
	fmt.Printf("setuid=%v disable_userns=%v grade=%s err=%v line=%q notes=%q\n", rep.Setuid, rep.DisableUserns, rep.Grade, err, rep.BwrapLine, rep.Notes)
}

// TestEscapeVectorsAreReal shows, as root, that the vectors the fence tests
// probe are real on this host when the fence lacks its pieces (the seed's
// bases), so a passing fence test means something.
func TestEscapeVectorsAreReal(t *testing.T) {
	requireRoot(t)
	rep := requireBwrap(t)
	// Input 3: the seed's full base as root lets the job remount / rw (in
	// its own mount namespace only: nothing is written here).
	out, err := exec.Command(rep.Executable, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--die-with-parent",
		"--", "/bin/sh", "-c", "mount -o remount,rw,bind / && echo remounted").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "remounted")
	// The seed's partial base as root: /proc/<pid>/root of a host process
	// writes through the fence.
	target := hostDir(t, "/var/tmp", 0)
	host := exec.Command("sleep", "60")
	require.NoError(t, host.Start())
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	out, err = exec.Command(rep.Executable, "--ro-bind", "/", "/", "--die-with-parent", "--", "/bin/sh", "-c",
		`echo x > "/proc/$0/root$1/escaped"`, strconv.Itoa(host.Process.Pid), target).CombinedOutput()
	require.NoError(t, err, string(out))
	_, err = os.Stat(filepath.Join(target, "escaped"))
	require.NoError(t, err, "the /proc/<pid>/root vector did not work on this host")
}

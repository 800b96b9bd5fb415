package e2etest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"paddock/sandbox"
)

// bothGrades runs f once at this host's grade and once with the partial
// grade forced, each on a fresh bundle.
func bothGrades(t *testing.T, f func(t *testing.T, b *Bundle)) {
	rep := RequireBwrap(t)
	grades := []string{string(rep.Grade)}
	if rep.Grade == "full" {
		grades = append(grades, "partial")
	}
	for _, g := range grades {
		t.Run(g, func(t *testing.T) {
			t.Parallel()
			b := Setup(t, "")
			b.Env = append(b.Env, "PADDOCK_FORCE_GRADE="+g)
			f(t, b)
		})
	}
}

// TestE2EProcSysReadOnly: a confined job cannot write a sysctl, even as
// the host's root (procfs lets the owner of a sysctl write it without a
// capability; kernel.core_pattern would run a program as host root). The
// job writes back the current value of a harmless one, so that the host
// is unchanged even if the fence failed, and counts what access(2) calls
// writable under /proc/sys.
func TestE2EProcSysReadOnly(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		before, err := os.ReadFile("/proc/sys/kernel/domainname")
		require.NoError(t, err)
		job := b.WriteJob("sysctl.toml", `mode = "read_only"
network = false
command = '''
if [ -e /proc/sys/kernel/domainname ]; then
  cur=$(cat /proc/sys/kernel/domainname)
  ( printf '%s\n' "$cur" > /proc/sys/kernel/domainname ) 2>/dev/null && echo ESCAPED-wrote-a-sysctl
  [ -w /proc/sys/kernel/core_pattern ] && echo ESCAPED-core_pattern-writable
  echo "writable=$(find /proc/sys -type f -writable 2>/dev/null | wc -l)"
else
  echo "no /proc/sys"
fi
'''
`)
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, errOut)
		require.NotContains(t, out, "ESCAPED")
		require.Regexp(t, `^(writable=0|no /proc/sys)\n$`, out)
		after, err := os.ReadFile("/proc/sys/kernel/domainname")
		require.NoError(t, err)
		require.Equal(t, string(before), string(after))
	})
}

// TestE2ERaceIntoStateDir: a process flips, as fast as it can, a
// directory and a symlink to paddock's state directory (renameat2
// RENAME_EXCHANGE) at a path that jobs name as their workspace. Whatever
// the interleaving, a job either binds the directory or is refused: it
// never binds the state directory, so it never writes there. 200 jobs.
// The flipper runs on the host, as another tool or a job of a worker with
// another state directory would: a job of the same state directory
// writing the parent would hold its lock, and the racers would wait for
// it to end (TestE2EProtectedAcrossJobs).
func TestE2ERaceIntoStateDir(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "the race needs python3 (renameat2 through ctypes)")
	const racers = 200
	bothGrades(t, func(t *testing.T, b *Bundle) {
		_, _, code := b.Run("probe") // creates the state directory
		require.Equal(t, 0, code)
		shared := hostDirUnder(t, "/var/tmp")
		require.NoError(t, os.Mkdir(filepath.Join(shared, "sub"), 0o755))
		require.NoError(t, os.Symlink(b.State, filepath.Join(shared, "link")))
		flipper := exec.Command(python, "-c", `
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
n = 0
deadline = time.time() + 240
while not os.path.exists("stop") and time.time() < deadline:
    libc.renameat2(AT_FDCWD, b"sub", AT_FDCWD, b"link", RENAME_EXCHANGE)
    n += 1
print("flips", n)
`)
		flipper.Dir = shared
		var flips strings.Builder
		flipper.Stdout = &flips
		require.NoError(t, flipper.Start())
		t.Cleanup(func() { _ = flipper.Process.Kill(); _ = flipper.Wait() })
		var racersFile strings.Builder
		racersFile.WriteString("[defaults]\nmode = \"workspace_write\"\n")
		fmt.Fprintf(&racersFile, "workspace = %q\n", filepath.Join(shared, "sub"))
		racersFile.WriteString("command = 'echo x > \"pwned-$PADDOCK_JOB_ID\" 2>/dev/null; if [ -e paddock.db ] || [ -e workspaces ]; then echo ESCAPED; fi'\n")
		for i := range racers {
			fmt.Fprintf(&racersFile, "[[job]]\nname = \"racer-%d\"\n", i)
		}
		w := b.StartWorker("--concurrency", "2")
		racerIDs := b.Submit(b.WriteJob("racers.toml", racersFile.String()))
		require.Len(t, racerIDs, racers)
		for _, id := range racerIDs {
			b.WaitState(id, 3*time.Minute, "succeeded", "failed", "denied")
		}
		require.NoError(t, os.WriteFile(filepath.Join(shared, "stop"), nil, 0o644))
		require.NoError(t, flipper.Wait())
		_ = w.Process.Kill()

		outcomes := map[string]int{}
		for _, id := range racerIDs {
			j := b.Show(id)
			a := j.Attempts[len(j.Attempts)-1]
			outcomes[a.Outcome]++
			out, _, _ := b.Run("logs", id)
			require.NotContains(t, out, "ESCAPED", "racer %s saw the state directory", id)
		}
		t.Logf("%d racers: %v; flipper: %s", racers, outcomes, strings.TrimSpace(flips.String()))
		matches, err := filepath.Glob(filepath.Join(b.State, "pwned-*"))
		require.NoError(t, err)
		require.Empty(t, matches, "a racer wrote into the state directory")
		require.Equal(t, racers, outcomes["succeeded"]+outcomes["runner_failed"], "racers end as succeeded (bound the directory) or runner_failed (refused): %v", outcomes)
	})
}

// TestE2EOtherJobsWorkspace: a job that names another job's default
// workspace is refused, writable or read-only, and the other job's files
// stay as they were; its own default workspace works.
func TestE2EOtherJobsWorkspace(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		victim := b.WriteJob("victim.toml", "name = \"victim\"\nmode = \"workspace_write\"\ncommand = \"echo mine > file\"\n")
		out, errOut, code := b.Run("run", victim)
		require.Equal(t, 0, code, out+errOut)
		victimID := b.Show("victim").ID
		victimWS := filepath.Join(b.State, "workspaces", victimID)
		require.FileExists(t, filepath.Join(victimWS, "file"))
		for _, mode := range []string{"workspace_write", "read_only"} {
			job := b.WriteJob("thief.toml", fmt.Sprintf("mode = %q\nworkspace = %q\ncommand = \"cat file; echo stolen > file; echo RAN\"\n", mode, victimWS))
			out, errOut, code := b.Run("run", job)
			require.Equal(t, 125, code, "%s: %s%s", mode, out, errOut)
			require.NotContains(t, out, "RAN")
			require.Contains(t, errOut, "may use only its own default workspace there")
		}
		got, err := os.ReadFile(filepath.Join(victimWS, "file"))
		require.NoError(t, err)
		require.Equal(t, "mine\n", string(got))
	})
}

// TestE2EQueueCannotBeLocked: a read_only job that tries to take the
// SQLite WAL locks of paddock's queue (bytes 120-127 of paddock.db-shm,
// readable through the read-only root before the state directory was
// hidden) finds no such file, and the queue keeps answering submit and ls
// while it runs.
func TestE2EQueueCannotBeLocked(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "the lock attempt needs python3 (fcntl)")
	bothGrades(t, func(t *testing.T, b *Bundle) {
		b.StartWorker("--concurrency", "2")
		shared := hostDirUnder(t, "/var/tmp")
		locker := b.WriteJob("locker.toml", fmt.Sprintf(`name = "locker"
mode = "read_only"
workspace = %q
command = [%q, "-c", '''
import fcntl, os, struct, sys, time
state = sys.argv[1]
held = []
for name in ("paddock.db-shm", "paddock.db", "paddock.db-wal"):
    path = os.path.join(state, name)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        print("cannot open", name, e.errno)
        continue
    try:
        fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 120, 8, 0))
        print("LOCKED", name)
        held.append(fd)
    except OSError as e:
        print("no lock on", name, e.errno)
sys.stdout.flush()
time.sleep(4)
''', %q]
`, shared, python, b.State))
		ids := b.Submit(locker)
		b.WaitState(ids[0], time.Minute, "running", "succeeded", "failed")
		// While it holds (or tries to hold) the locks, the queue answers.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		quick := b.WriteJob("quick.toml", "name = \"quick\"\nmode = \"read_only\"\ncommand = \"true\"\n")
		for _, args := range [][]string{{"submit", quick}, {"ls"}} {
			out, err := b.Cmd(ctx, args...).CombinedOutput()
			require.NoError(t, err, "%v while a job tries to lock the queue: %s", args, out)
		}
		j := b.WaitState(ids[0], time.Minute, "succeeded", "failed")
		require.Equal(t, "succeeded", j.State, j.Reason)
		out, _, _ := b.Run("logs", ids[0])
		require.NotContains(t, out, "LOCKED")
		require.Contains(t, out, "cannot open paddock.db-shm")
		b.WaitState("quick", time.Minute, "succeeded")
	})
}

// TestE2EBwrapLibrariesProtected: a job may not be given a writable
// directory that holds a library bwrap loads: as a root worker's job it
// could replace libc, and the next bwrap would run its code on the host.
func TestE2EBwrapLibrariesProtected(t *testing.T) {
	t.Parallel()
	rep := RequireBwrap(t)
	files := sandbox.LoadedFiles(rep.Executable)
	if len(files) < 2 {
		Unavailable(t, "bwrap is statically linked here: no library of its to protect")
	}
	b := Setup(t, "")
	// The directory of each file bwrap's loader maps, and of each symlink
	// on the way to one (Debian's /usr/lib64, holding the link
	// ld-linux-x86-64.so.2 that bwrap's /lib64/ld-linux-x86-64.so.2
	// goes through): a job that could write one could repoint it.
	dirs := map[string]bool{}
	for _, f := range files[1:] {
		if d := filepath.Dir(f); d != "/" && d != "/etc" {
			dirs[d] = true
		}
	}
	// The policy names them all as roots a job may write: the fence's
	// own refusal is what is tested (with no workspace_roots the policy
	// refuses system directories first).
	var list []string
	for d := range dirs {
		list = append(list, fmt.Sprintf("%q", d))
	}
	b.SetPolicy("workspace_roots = [" + strings.Join(list, ", ") + "]\n")
	for libDir := range dirs {
		job := b.WriteJob("lib.toml", fmt.Sprintf("mode = \"workspace_write\"\nwritable = [%q]\ncommand = \"echo RAN\"\n", libDir))
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 125, code, "writable %s: %s", libDir, out+errOut)
		require.NotContains(t, out, "RAN")
		require.Contains(t, errOut, "paddock keeps out of every job's reach", libDir)
	}
}

// hostDirUnder makes a fresh directory under base (0755) that jobs see
// (unlike the host's /tmp, hidden by their private one) and returns its
// canonical path.
func hostDirUnder(t *testing.T, base string) string {
	t.Helper()
	dir, err := os.MkdirTemp(base, "paddock-e2e-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	dir, err = filepath.EvalSymlinks(dir)
	require.NoError(t, err)
	return dir
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// TestE2EWorkspaceRootsRace: the policy allows workspaces under one
// directory only; a process inside it flips a symlink on the path that
// jobs name as a writable root between a directory inside and one
// outside. Whatever the interleaving, no job writes outside: the ceiling
// is judged again on the descriptors bwrap binds. The flipper runs on the
// host, as in TestE2ERaceIntoStateDir.
func TestE2EWorkspaceRootsRace(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	require.NoError(t, err, "the race needs python3")
	const racers = 100
	bothGrades(t, func(t *testing.T, b *Bundle) {
		allowed := hostDirUnder(t, "/var/tmp")
		outside := hostDirUnder(t, "/var/tmp")
		for _, d := range []string{filepath.Join(allowed, "a", "real", "sub"), filepath.Join(allowed, "b"), filepath.Join(outside, "sub")} {
			require.NoError(t, os.MkdirAll(d, 0o755))
		}
		require.NoError(t, os.Symlink("real", filepath.Join(allowed, "a", "r")))
		pol := b.WriteJob("policy.toml", fmt.Sprintf("workspace_roots = [%q]\n", allowed))
		_, errOut, code := b.Run("policy", "set", pol)
		require.Equal(t, 0, code, errOut)
		flipper := exec.Command(python, "-c", fmt.Sprintf(`
import os, time
deadline = time.time() + 240
while not os.path.exists("stop") and time.time() < deadline:
    for target in ("real", %q):
        try:
            os.unlink("r.tmp")
        except FileNotFoundError:
            pass
        os.symlink(target, "r.tmp")
        os.rename("r.tmp", "r")
`, outside))
		flipper.Dir = filepath.Join(allowed, "a")
		var racersFile strings.Builder
		racersFile.WriteString("[defaults]\nmode = \"workspace_write\"\n")
		fmt.Fprintf(&racersFile, "workspace = %q\nwritable = [%q]\n", filepath.Join(allowed, "b"), filepath.Join(allowed, "a", "r", "sub"))
		fmt.Fprintf(&racersFile, "command = 'touch %q/pwn-$PADDOCK_JOB_ID 2>/dev/null; true'\n", filepath.Join(allowed, "a", "r", "sub"))
		for i := range racers {
			fmt.Fprintf(&racersFile, "[[job]]\nname = \"racer-%d\"\n", i)
		}
		// The racers are submitted while the link points inside (submit
		// judges the paths too), then the flipper starts.
		ids := b.Submit(b.WriteJob("racers.toml", racersFile.String()))
		require.NoError(t, flipper.Start())
		t.Cleanup(func() { _ = flipper.Process.Kill(); _ = flipper.Wait() })
		b.StartWorker("--concurrency", "2")
		outcomes := map[string]int{}
		for _, id := range ids {
			j := b.WaitState(id, 3*time.Minute, "succeeded", "failed", "denied")
			outcomes[j.Attempts[len(j.Attempts)-1].Outcome]++
		}
		require.NoError(t, os.WriteFile(filepath.Join(allowed, "a", "stop"), nil, 0o644))
		require.NoError(t, flipper.Wait())
		t.Logf("%d racers: %v", racers, outcomes)
		matches, err := filepath.Glob(filepath.Join(outside, "sub", "pwn-*"))
		require.NoError(t, err)
		require.Empty(t, matches, "a job wrote outside the policy's workspace_roots")
	})
}

// TestE2EDeviceNodesUnchanged: the device nodes a job can write are not
// the host's to change. A worker that runs as root runs jobs as host uid
// 0, the owner of the host's /dev/null and its like, and an owner may
// chmod and set times without a capability: the job gets substitutes
// (sandbox.PrepareDeviceNodes), which it can read and write but not
// change, by path or through its stdin. Nor can it change the kernel's
// own mode of a global /proc entry (it is set back to the mode it has, so
// the host is unchanged even if the fence failed). Checked from the host:
// every node's mode and times unchanged.
func TestE2EDeviceNodesUnchanged(t *testing.T) {
	t.Parallel()
	nodes := []string{"null", "zero", "full", "random", "urandom", "tty"}
	bothGrades(t, func(t *testing.T, b *Bundle) {
		before := map[string]unix.Stat_t{}
		for _, n := range nodes {
			var st unix.Stat_t
			require.NoError(t, unix.Stat("/dev/"+n, &st))
			before[n] = st
			// Should the fence fail, put the host's node back.
			t.Cleanup(func() { _ = unix.Chmod("/dev/"+n, st.Mode&0o7777) })
		}
		job := b.WriteJob("devnodes.toml", `mode = "read_only"
command = '''
for n in null zero full random urandom tty; do
  [ -e /dev/$n ] || continue
  chmod 0600 /dev/$n 2>/dev/null && echo "ESCAPED: chmod /dev/$n"
  touch -d @978307200 /dev/$n 2>/dev/null && echo "ESCAPED: set the times of /dev/$n"
done
fchmod() { python3 -c 'import os, sys; os.fchmod(0, int(sys.argv[1], 8))' "$1"; }
fchmod 666 2>/dev/null && echo "ESCAPED: fchmod of stdin"
python3 -c 'import os; os.utime(0, (978307200, 978307200))' 2>/dev/null && echo "ESCAPED: set the times of stdin"
for e in buddyinfo meminfo slabinfo; do
  [ -e /proc/$e ] || continue
  chmod "$(stat -c %a /proc/$e)" /proc/$e 2>/dev/null && echo "ESCAPED: chmod /proc/$e"
done
echo x > /dev/null && echo null-writable
[ "$(head -c 3 /dev/zero | od -An -tx1 | tr -d ' ')" = 000000 ] && echo zero-readable
[ "$(head -c 16 /dev/urandom | wc -c)" = 16 ] && echo urandom-readable
python3 -c 'import os; os.openpty()' 2>/dev/null && echo pty-opened
true
'''
`)
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, errOut)
		require.NotContains(t, out, "ESCAPED")
		// At the full grade a job has pseudo-terminals of its own (a
		// devpts made for it).
		want := "null-writable\nzero-readable\nurandom-readable\npty-opened\n"
		if slices.Contains(b.Env, "PADDOCK_FORCE_GRADE=partial") {
			out = strings.Replace(out, "pty-opened\n", "", 1)
			want = strings.Replace(want, "pty-opened\n", "", 1)
		}
		require.Equal(t, want, out)
		for _, n := range nodes {
			var st unix.Stat_t
			require.NoError(t, unix.Stat("/dev/"+n, &st))
			require.Equal(t, before[n].Mode, st.Mode, "/dev/%s's mode", n)
			// The job sets the times to 2001-01-01 (978307200); any user may
			// set a node it can write to the current time, so only the
			// job's value says the fence failed.
			require.NotEqual(t, int64(978307200), st.Mtim.Sec, "/dev/%s's modification time", n)
			require.NotEqual(t, int64(978307200), st.Atim.Sec, "/dev/%s's access time", n)
			require.Equal(t, before[n].Uid, st.Uid, "/dev/%s's owner", n)
		}
	})
}

// TestE2ESystemDirsRefused: on a queue whose policy names no
// workspace_roots (a fresh queue's), a workspace_write job may not write
// a system directory (/etc/cron.d: a root worker's job would have the
// host's cron run what it leaves): submit and run refuse the file with
// its line, key and ceiling, check reports refused_by_policy, and nothing
// is enqueued. A read_only job may have one as its workspace. Nothing is ever written
// there, whatever the result.
func TestE2ESystemDirsRefused(t *testing.T) {
	t.Parallel()
	b := Setup(t, "")
	for name, tc := range map[string]struct{ text, want string }{
		"cron": {"command = [\"true\"]\nmode = \"workspace_write\"\nwritable = [\"/etc/cron.d\"]\n",
			`cron.toml:3: writable: refused by policy (workspace_roots): "/etc/cron.d" is in /etc, a system directory`},
		"spool": {"command = [\"true\"]\nmode = \"workspace_write\"\nworkspace = \"/var/spool/cron\"\n",
			`spool.toml:3: workspace: refused by policy (workspace_roots): "/var/spool/cron" is in /var/spool, a system directory`},
	} {
		job := b.WriteJob(name+".toml", tc.text)
		for _, cmd := range []string{"submit", "run"} {
			_, errOut, code := b.Run(cmd, job)
			require.Equal(t, 2, code, "%s %s: %s", cmd, name, errOut)
			require.Contains(t, errOut, tc.want, cmd)
		}
		out, _, code := b.Run("check", job)
		require.Equal(t, 1, code, name)
		require.Contains(t, out, "refused_by_policy")
	}
	require.Empty(t, b.List(), "nothing was enqueued")
	out, errOut, code := b.Run("run", b.WriteJob("read.toml", "command = [\"ls\", \"/usr/share\"]\nmode = \"read_only\"\nworkspace = \"/usr/share\"\n"))
	require.Equal(t, 0, code, out+errOut)
}

package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestPrepareDeviceNodes: the substitutes have the host's device numbers,
// mode 0666 and nobody as owner; a second call keeps them; anything else
// at a node's name is replaced; a symlink for the directory is refused.
func TestPrepareDeviceNodes(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		unavailable(t, "making device nodes needs root")
	}
	dir := filepath.Join(t.TempDir(), "dev")
	require.NoError(t, PrepareDeviceNodes(dir))
	inodes := map[string]uint64{}
	for _, n := range substituteNodes {
		var host, st unix.Stat_t
		require.NoError(t, unix.Stat("/dev/"+n, &host))
		require.NoError(t, unix.Lstat(filepath.Join(dir, n), &st))
		require.Equal(t, uint32(unix.S_IFCHR|0o666), st.Mode, n)
		require.Equal(t, host.Rdev, st.Rdev, n)
		require.Equal(t, uint32(nobodyID), st.Uid, n)
		require.Equal(t, uint32(nobodyID), st.Gid, n)
		inodes[n] = st.Ino
	}
	require.NoError(t, os.Remove(filepath.Join(dir, "zero")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "zero"), []byte("not a device"), 0o666))
	require.NoError(t, unix.Chmod(filepath.Join(dir, "full"), 0o600))
	require.NoError(t, PrepareDeviceNodes(dir))
	for _, n := range substituteNodes {
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(filepath.Join(dir, n), &st))
		require.Equal(t, uint32(unix.S_IFCHR|0o666), st.Mode, n)
		if n != "zero" && n != "full" {
			require.Equal(t, inodes[n], st.Ino, "%s is kept", n)
		}
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, len(substituteNodes), "no temporary file left")

	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	require.ErrorContains(t, PrepareDeviceNodes(link), "is not a directory")
}

// TestConfineDeviceNodes: with DeviceNodes the substitutes are bound over
// every node --dev takes from the host (full grade) and are the partial
// grade's --dev-bind sources; without, the host's nodes.
func TestConfineDeviceNodes(t *testing.T) {
	t.Parallel()
	ws := mkdirs(t, "ws")
	p := mustPolicy(t, PolicyParams{Mode: ModeReadOnly, Workspace: ws, Network: true})
	for _, g := range []Grade{GradeFull, GradePartial} {
		d := Discovery{Executable: "/usr/bin/bwrap", Grade: g, NetworkIsolation: true}
		with, err := Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d, DeviceNodes: "/state/dev"})
		require.NoError(t, err)
		without, err := Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d})
		require.NoError(t, err)
		nodes := substituteNodes
		if g == GradePartial {
			nodes = nodes[:5] // no /dev/tty: the host's /dev stays, read-only
		}
		for _, n := range nodes {
			i := indexPair(with, "--dev-bind", "/state/dev/"+n)
			require.True(t, i >= 0 && with[i+2] == "/dev/"+n, "%s: /dev/%s: %q", g, n, with)
			require.NotContains(t, without, "/state/dev/"+n)
		}
		if g == GradeFull {
			i, j := indexPair(with, "--dev", "/dev"), indexPair(with, "--dev-bind", "/state/dev/null")
			require.Less(t, i, j, "after --dev")
			require.Equal(t, len(without)+3*len(nodes), len(with))
		} else {
			require.Equal(t, len(without), len(with))
		}
	}
}

// indexPair is the index of a followed by b in argv, or -1.
func indexPair(argv []string, a, b string) int {
	for i := 0; i+1 < len(argv); i++ {
		if argv[i] == a && argv[i+1] == b {
			return i
		}
	}
	return -1
}

// TestStartWithDeviceNodes: a process started over the substitutes sees
// them at the host's node paths, and so does bwrap's --dev (no bind of
// its own in the argv), while the host's nodes are untouched; each start
// sees the host's mounts as they are then (one unmounted since an earlier
// start is gone, one mounted since is there), whatever the host's
// propagation; a substitute changed since the directory was made is
// refused.
func TestStartWithDeviceNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		unavailable(t, "a mount namespace needs root")
	}
	dir := filepath.Join(t.TempDir(), "dev")
	require.NoError(t, PrepareDeviceNodes(dir))
	require.NoError(t, CheckDeviceNamespace(dir))

	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.Command(name, args...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		reaped, err := StartWithDeviceNodes(dir, false, cmd)
		require.NoError(t, err)
		defer reaped()
		_ = cmd.Wait() // the output says what happened
		return out.String()
	}
	owners := strings.Repeat("65534\n", len(substituteNodes))
	paths := make([]string, len(substituteNodes))
	for i, n := range substituteNodes {
		paths[i] = "/dev/" + n
	}
	require.Equal(t, owners, run("stat", append([]string{"-c", "%u"}, paths...)...))
	for _, p := range paths {
		var st unix.Stat_t
		require.NoError(t, unix.Stat(p, &st))
		require.NotEqual(t, uint32(nobodyID), st.Uid, "the host's %s", p)
	}

	// A file system unmounted on the host after one start is gone at the
	// next; one mounted after it is there.
	vault := t.TempDir()
	require.NoError(t, unix.Mount("tmpfs", vault, "tmpfs", 0, ""))
	t.Cleanup(func() { _ = unix.Unmount(vault, unix.MNT_DETACH) })
	require.NoError(t, os.WriteFile(filepath.Join(vault, "secret"), []byte("vault-secret"), 0o600))
	require.Equal(t, "vault-secret", run("cat", filepath.Join(vault, "secret")))
	require.NoError(t, unix.Unmount(vault, 0))
	require.NotContains(t, run("cat", filepath.Join(vault, "secret")), "vault-secret")
	require.NoError(t, unix.Mount("tmpfs", vault, "tmpfs", 0, "mode=0700"))
	require.Equal(t, "700\n", run("stat", "-c", "%a", vault))

	// bwrap started there binds the substitutes with --dev.
	rep := requireBwrap(t)
	if d := rep.Discovery(); d.Grade == GradeFull {
		argv := []string{d.Executable, "--unshare-user", "--cap-drop", "ALL", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--"}
		require.Equal(t, owners, run(argv[0], append(argv[1:], append([]string{"stat", "-c", "%u"}, paths...)...)...))
	}

	// A substitute whose mode changed is refused; PrepareDeviceNodes
	// repairs it.
	require.NoError(t, os.Chmod(filepath.Join(dir, "null"), 0o600))
	_, err := StartWithDeviceNodes(dir, false, exec.Command("true"))
	require.ErrorContains(t, err, "/dev/null is not a substitute")
	require.NoError(t, PrepareDeviceNodes(dir))
	require.Equal(t, owners, run("stat", append([]string{"-c", "%u"}, paths...)...))
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "only root reaches the substitutes")
}

// TestPrepareDeviceNodesConcurrent: jobs of one worker preparing the
// substitutes at once all succeed, and leave no temporary file.
func TestPrepareDeviceNodesConcurrent(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		unavailable(t, "making device nodes needs root")
	}
	dir := filepath.Join(t.TempDir(), "dev")
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- PrepareDeviceNodes(dir) }()
	}
	for range 8 {
		require.NoError(t, <-errs)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, len(substituteNodes), "no temporary file left")
}

// TestStartWithDevTree: bwrap started over a /dev made for the job and
// bound whole (ConfineParams.DevTree) gives the job what --dev gives:
// the six nodes with the host's device numbers and mode 0666, the
// stdin/stdout/stderr/fd/core/ptmx links, /dev/shm, and pseudo-terminals
// of a devpts of its own; the argv binds no node. A job that changes a
// node changes its own copy only: neither the host's node, nor the
// substitutes' directory, nor the next job sees it.
func TestStartWithDevTree(t *testing.T) {
	if os.Geteuid() != 0 {
		unavailable(t, "a mount namespace needs root")
	}
	rep := requireBwrap(t)
	d := rep.Discovery()
	if d.Grade != GradeFull {
		unavailable(t, "the /dev tree is for the full grade; this host's is %q", d.Grade)
	}
	dir := filepath.Join(t.TempDir(), "dev")
	require.NoError(t, PrepareDeviceNodes(dir))
	require.NoError(t, CheckDeviceNamespace(dir))
	pol, err := NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: t.TempDir(), Network: true})
	require.NoError(t, err)
	run := func(script string) string {
		t.Helper()
		argv, err := Build(ConfineParams{Argv: []string{"/bin/sh", "-c", script}, Policy: pol, Discovery: Discovery{Grade: d.Grade, Executable: d.Executable, NetworkIsolation: d.NetworkIsolation, KernelPaths: d.KernelPaths}, DevTree: dir})
		require.NoError(t, err)
		require.Equal(t, -1, indexPair(argv, "--dev", "/dev"), "no --dev: %q", argv)
		require.NotEqual(t, -1, indexPair(argv, "--dev-bind", dir), "%q", argv)
		cmd := exec.Command(argv[0], argv[1:]...)
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		require.NoError(t, err)
		defer null.Close()
		cmd.ExtraFiles = []*os.File{null} // the status descriptor, 3
		cmd.WaitDelay = 10 * time.Second
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		reaped, err := StartWithDeviceNodes(dir, true, cmd)
		require.NoError(t, err)
		defer reaped()
		require.NoError(t, cmd.Wait(), out.String())
		return out.String()
	}

	var want strings.Builder
	for _, n := range substituteNodes {
		var host unix.Stat_t
		require.NoError(t, unix.Stat("/dev/"+n, &host))
		fmt.Fprintf(&want, "%s c 666 65534 %x:%x\n", n, unix.Major(host.Rdev), unix.Minor(host.Rdev))
	}
	got := run(`cd /dev && for n in null zero full random urandom tty; do stat -c "$n %F %a %u %t:%T" $n; done | sed 's/character special file/c/'`)
	require.Equal(t, want.String(), got)
	require.Equal(t, "/proc/self/fd/0 /proc/self/fd/1 /proc/self/fd/2 /proc/self/fd /proc/kcore pts/ptmx\n",
		run(`cd /dev && echo $(readlink stdin stdout stderr fd core ptmx)`))
	require.Equal(t, "directory\ndevpts\n", run(`stat -c %F /dev/shm; stat -f -c %T /dev/pts`))
	// A pseudo-terminal of the job's own devpts.
	require.Equal(t, "/dev/pts/0\n", run(`python3 -c 'import os; m, s = os.openpty(); print(os.ttyname(s))'`))
	// The job keeps the caller's umask (the tree is made with 0).
	old := unix.Umask(0o027)
	defer unix.Umask(old)
	require.Equal(t, "0027\n", run(`umask`), "the job's umask")
	// Writes reach the devices.
	require.Equal(t, "ok\n", run(`echo x > /dev/null && head -c 4 /dev/urandom | wc -c | grep -q 4 && echo ok`))

	// The job cannot change a node; nor, should it manage to, would the
	// host's node, the substitutes or the next job see it.
	require.Equal(t, "", run(`chmod 600 /dev/null 2>/dev/null && echo chmod; touch -d 2001-01-01 /dev/full 2>/dev/null && echo touch; true`))
	for _, p := range []string{"/dev/null", filepath.Join(dir, "null")} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o666), fi.Mode().Perm(), p)
	}
	fi, err := os.Stat("/dev/full")
	require.NoError(t, err)
	require.NotEqual(t, 2001, fi.ModTime().Year(), "the host's /dev/full")
}

// BenchmarkStartWithDeviceNodes measures what starting a process over a
// job's own devices costs the worker: /bin/true started and waited for
// plainly (exec.Cmd.Start), and through [StartWithDeviceNodes] with the
// substitutes bound and with a whole /dev made (tree). Besides the wall
// time it reports self-cpu-ns/op, the calling process's own CPU time
// (getrusage(2) RUSAGE_SELF: its threads, the ones that ended included;
// not the child's), which is what a worker pays. Needs root.
func BenchmarkStartWithDeviceNodes(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (CAP_SYS_ADMIN, CAP_MKNOD)")
	}
	dir := filepath.Join(b.TempDir(), "dev")
	require.NoError(b, PrepareDeviceNodes(dir))
	selfCPU := func() time.Duration {
		var ru unix.Rusage
		require.NoError(b, unix.Getrusage(unix.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, c := range []struct {
		name    string
		devices bool
		tree    bool
	}{{"plain", false, false}, {"substitutes", true, false}, {"tree", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			start := selfCPU()
			for b.Loop() {
				cmd := exec.Command("/bin/true")
				release := func() {}
				if c.devices {
					var err error
					release, err = StartWithDeviceNodes(dir, c.tree, cmd)
					require.NoError(b, err)
				} else {
					require.NoError(b, cmd.Start())
				}
				require.NoError(b, cmd.Wait())
				release()
			}
			b.ReportMetric(float64(selfCPU()-start)/float64(b.N), "self-cpu-ns/op")
		})
	}
}

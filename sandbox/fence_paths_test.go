package sandbox

import (
	"debug/elf"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConfineCoversKernelPaths: the kernel paths the probe found are
// bound read-only or masked, after the base mounts; /proc entries only at
// the full grade (the partial grade's /proc is an empty read-only tmpfs).
func TestConfineCoversKernelPaths(t *testing.T) {
	t.Parallel()
	ws := mkdirs(t)
	p, err := NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: ws, Network: true})
	require.NoError(t, err)
	kp := KernelPaths{
		ReadOnly:    []string{"/proc/sys", "/proc/irq", "/sys/kernel/x"},
		MaskedFiles: []string{"/proc/kcore"},
		MaskedDirs:  []string{"/proc/acpi", "/sys/firmware"},
	}
	d := Discovery{Executable: "/usr/bin/bwrap", Grade: GradeFull, NetworkIsolation: true, KernelPaths: kp}
	got, err := ConfineWith([]string{"true"}, p, d)
	require.NoError(t, err)
	joined := strings.Join(got, " ")
	// /proc/sys and /proc/irq by the read-only /proc, after its masks.
	require.Contains(t, joined, "--proc /proc --ro-bind /sys/kernel/x /sys/kernel/x --ro-bind /dev/null /proc/kcore --tmpfs /proc/acpi --tmpfs /sys/firmware --remount-ro /proc --tmpfs /tmp")
	require.NotContains(t, joined, "--ro-bind /proc/sys")

	d.Grade = GradePartial
	d.KernelPaths.PrivateDirs = []string{"/dev/shm"}
	got, err = ConfineWith([]string{"true"}, p, d)
	require.NoError(t, err)
	joined = strings.Join(got, " ")
	require.Contains(t, joined, "--tmpfs /proc --remount-ro /proc --tmpfs /dev/shm --tmpfs /sys/firmware --tmpfs /tmp")
	require.NotContains(t, joined, "/proc/sys")
	require.NotContains(t, joined, "/proc/acpi")

	// Before any probe, /proc/sys is still covered.
	require.Equal(t, []string{"/proc/sys"}, defaultKernelPaths().ReadOnly)
	// The list only names paths of the cover list, and each has a reason.
	found := FindKernelPaths()
	require.True(t, found.known())
	reasons := KernelPathReasons()
	for _, p := range append(append(found.ReadOnly, found.MaskedFiles...), found.MaskedDirs...) {
		require.NotEmpty(t, reasons[p], p)
	}
	require.Contains(t, found.ReadOnly, "/proc/sys", "every Linux host has /proc/sys")
	require.False(t, KernelPaths{ReadOnly: []string{"/etc"}}.known(), "a path off the list (from a tampered cache) is not accepted")
	require.False(t, KernelPaths{MaskedDirs: []string{"/proc/sys"}}.known(), "nor a listed path under another cover")
}

// TestConfineHideAndDescriptors: hidden directories get an empty tmpfs
// after the roots that contain them and before the roots inside them,
// and are made read-only last; with RootFDs each root is bound by
// descriptor.
func TestConfineHideAndDescriptors(t *testing.T) {
	t.Parallel()
	root := mkdirs(t, "home/state/workspaces/j1/sub", "extra")
	home := filepath.Join(root, "home")
	state := filepath.Join(home, "state")
	own := filepath.Join(state, "workspaces", "j1")
	extra := filepath.Join(root, "extra")
	d := Discovery{Executable: "/usr/bin/bwrap", Grade: GradeFull, NetworkIsolation: true}
	tail := func(argv []string) string {
		s := strings.Join(argv, " ")
		return s[strings.Index(s, "--tmpfs /tmp ")+len("--tmpfs /tmp "):]
	}

	// read_only over a tree that holds the hidden directory: the root is
	// bound first, the tmpfs then covers the hidden directory inside it,
	// read-only since it is inside a root.
	p, err := NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: home, Network: true, Hide: []string{state}})
	require.NoError(t, err)
	got, err := Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d})
	require.NoError(t, err)
	require.Equal(t, "--ro-bind "+home+" "+home+" --tmpfs "+state+" --remount-ro "+state+" --chdir "+home+" -- true", tail(got))

	// A workspace inside the hidden directory is bound back over the
	// tmpfs; a writable root elsewhere keeps its place. Descriptors
	// replace the sources. The hidden directory is in no root: its tmpfs
	// is the job's own and is not remounted.
	p, err = NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: own, Writable: []string{extra}, Network: true, Hide: []string{state, state}})
	require.NoError(t, err)
	require.Equal(t, []string{own, extra}, p.Roots())
	require.Equal(t, []string{state}, p.Hide())
	got, err = Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d, RootFDs: []int{4, 5}})
	require.NoError(t, err)
	require.Equal(t, "--bind-fd 5 "+extra+" --tmpfs "+state+" --bind-fd 4 "+own+" --chdir "+own+" -- true", tail(got))

	// Wrong descriptor counts and standard streams are refused.
	_, err = Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d, RootFDs: []int{4}})
	require.ErrorContains(t, err, "2 roots")
	_, err = Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d, RootFDs: []int{4, 1}})
	require.ErrorContains(t, err, "standard stream")

	// A hidden directory that is also a root, and a cwd only inside a
	// hidden directory, are refused.
	_, err = NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: state, Network: true, Hide: []string{state}})
	require.ErrorIs(t, err, ErrBadPath)
	_, err = NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: extra, Cwd: own, Network: true, Hide: []string{state}})
	require.ErrorContains(t, err, "hidden")
	_, err = NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: extra, Network: true, Hide: []string{"/usr"}})
	require.ErrorIs(t, err, ErrBadPath)
}

// TestConfineHideFiles: a hidden file is covered with /dev/null, read-only,
// after every root and hidden directory (so one inside a writable root is
// covered too), reached through its symlinks; one inside a hidden
// directory is left to the directory; a directory or a missing file is
// refused.
func TestConfineHideFiles(t *testing.T) {
	t.Parallel()
	root := mkdirs(t, "ws", "secrets")
	ws, secrets := filepath.Join(root, "ws"), filepath.Join(root, "secrets")
	inWS, inSecrets := filepath.Join(ws, ".netrc"), filepath.Join(secrets, "key")
	for _, f := range []string{inWS, inSecrets} {
		require.NoError(t, os.WriteFile(f, nil, 0o600))
	}
	link := filepath.Join(root, "link")
	require.NoError(t, os.Symlink(inWS, link))
	d := Discovery{Executable: "/usr/bin/bwrap", Grade: GradeFull, NetworkIsolation: true}
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Hide: []string{secrets}, HideFiles: []string{link, inSecrets, inWS}})
	require.NoError(t, err)
	require.Equal(t, []string{inWS}, p.HideFiles())
	got, err := Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d})
	require.NoError(t, err)
	s := strings.Join(got, " ")
	require.Contains(t, s, "--bind "+ws+" "+ws+" --tmpfs "+secrets+" --ro-bind /dev/null "+inWS+" --chdir ")

	_, err = NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, HideFiles: []string{secrets}})
	require.ErrorIs(t, err, ErrBadPath)
	_, err = NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, HideFiles: []string{filepath.Join(root, "missing")}})
	require.ErrorIs(t, err, ErrBadPath)
	full, err := NewPolicy(PolicyParams{Mode: ModeDangerFullAccess, Network: true, HideFiles: []string{filepath.Join(root, "missing")}})
	require.NoError(t, err, "ignored for danger_full_access")
	require.Empty(t, full.HideFiles())
}

// TestPinRootsRefusesSymlinks: a root whose path holds a symlink when it
// is pinned (put there after the policy resolved it) is refused, never
// followed; a pinned root is the directory, whatever its path becomes.
func TestPinRootsRefusesSymlinks(t *testing.T) {
	t.Parallel()
	root := mkdirs(t, "a/ws", "secret")
	ws := filepath.Join(root, "a", "ws")
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true})
	require.NoError(t, err)

	pins, err := PinRoots(p)
	require.NoError(t, err)
	require.Len(t, pins.Files(), 1)
	var before, after os.FileInfo
	before, err = pins.Files()[0].Stat()
	require.NoError(t, err)

	// The workspace's parent becomes a symlink to another tree.
	require.NoError(t, os.Rename(filepath.Join(root, "a"), filepath.Join(root, "a-moved")))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "secret", "ws"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(root, "secret"), filepath.Join(root, "a")))
	_, err = PinRoots(p)
	require.ErrorIs(t, err, ErrRootChanged)
	_, err = walkNoSymlinksPath(ws)
	require.ErrorIs(t, err, ErrRootChanged, "the walk for kernels without openat2 refuses it too")

	// The descriptor pinned before still names the original directory.
	after, err = os.Stat(filepath.Join(root, "a-moved", "ws"))
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after))
	pins.Close()
	pins.Close()
	var none *Pinned
	none.Close()
	require.Nil(t, none.Files())
}

// walkNoSymlinksPath runs the openat2-less walk on dir, as OpenNoSymlinks
// would on an old kernel.
func walkNoSymlinksPath(dir string) (*os.File, error) {
	f, err := openNoSymlinks(dir, true)
	if err != nil && !errors.Is(err, ErrRootChanged) {
		return nil, err
	}
	return f, err
}

// TestKernelPathsInsideTheSandbox: at the full grade a job cannot write
// /proc/sys (access says read-only, and a write of the current value of a
// harmless sysctl fails, so the host is unchanged even if the fence
// failed), the masked files cannot be read, and /proc/self still works;
// at the partial grade /proc is empty and read-only. As root and as
// nobody.
func TestKernelPathsInsideTheSandbox(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		ws := hostDir(t, "", u.uid)
		before, err := os.ReadFile("/proc/sys/kernel/domainname")
		require.NoError(t, err)
		p := mustPolicy(t, PolicyParams{Mode: ModeReadOnly, Workspace: ws})
		script := `
if [ -d /proc/sys/kernel ]; then
  if [ -w /proc/sys/kernel/domainname ]; then echo "ESCAPE: /proc/sys writable"; fi
  cur=$(cat /proc/sys/kernel/domainname)
  if ( printf '%s\n' "$cur" > /proc/sys/kernel/domainname ) 2>/dev/null; then echo "ESCAPE: wrote a sysctl"; fi
  for f in /proc/keys /proc/timer_list /proc/kcore /proc/sched_debug /proc/interrupts; do
    if [ -e "$f" ] && cat "$f" >/dev/null 2>&1; then echo "ESCAPE: read $f"; fi
  done
  for dir in /proc/acpi /proc/scsi /sys/firmware; do
    if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then echo "ESCAPE: $dir not empty"; fi
  done
  head -1 /proc/self/status >/dev/null || echo "BROKEN: /proc/self/status"
  ls /proc/self/fd >/dev/null || echo "BROKEN: /proc/self/fd"
  if [ "$1" = self ]; then echo ok > /dev/stdout || echo "BROKEN: /dev/stdout"; fi
else
  if [ -n "$(ls -A /proc | grep -vx .paddock-launch)" ]; then echo "ESCAPE: partial /proc holds more than the launcher"; fi
  if ( echo x > /proc/x ) 2>/dev/null; then echo "ESCAPE: partial /proc writable"; fi
  if [ -d /sys/firmware ] && [ -n "$(ls -A /sys/firmware)" ]; then echo "ESCAPE: /sys/firmware not empty"; fi
  if [ -e "/dev/shm/$2" ]; then echo "ESCAPE: saw the host's /dev/shm"; fi
fi
exit 0`
		// /dev/stdout reopens the test's pipe through /proc/self/fd/1,
		// which only the pipe's owner (the test process) may do.
		shm := "paddock-test-" + token(t)
		if err := os.WriteFile(filepath.Join("/dev/shm", shm), []byte("host"), 0o644); err == nil {
			t.Cleanup(func() { os.Remove(filepath.Join("/dev/shm", shm)) })
		}
		res := runJob(t, d, p, u, sh(script, u.name, shm)...)
		require.Equal(t, OutcomeSucceeded, res.class.Outcome, "%+v stderr=%s", res.class, res.stderr)
		require.NotContains(t, res.stdout, "ESCAPE")
		require.NotContains(t, res.stdout, "BROKEN")
		if d.Grade == GradeFull && u.cred == nil {
			require.Contains(t, res.stdout, "ok")
		}
		after, err := os.ReadFile("/proc/sys/kernel/domainname")
		require.NoError(t, err)
		require.Equal(t, string(before), string(after))
	})
}

// TestHiddenAndPinnedInsideTheSandbox: a hidden directory is empty and
// read-only inside the sandbox, a workspace inside it is bound back and
// writable, and a root pinned before its path was swapped for a symlink
// is either bound as pinned or refused by bwrap: nothing lands where the
// symlink points.
func TestHiddenAndPinnedInsideTheSandbox(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		base := hostDir(t, "/var/tmp", u.uid)
		state := filepath.Join(base, "state")
		own := filepath.Join(state, "workspaces", "j1")
		require.NoError(t, os.MkdirAll(own, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(state, "paddock.db"), []byte("db"), 0o644))
		require.NoError(t, os.Chown(own, u.uid, u.uid))
		p := mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: own, Hide: []string{state}})
		res := runPinned(t, d, p, u, nil, sh(`
test -e "$1/paddock.db" && echo "ESCAPE: saw the database"
ls -A "$1" | grep -v '^workspaces$' && echo "ESCAPE: state not empty"
( echo x > "$1/new" ) 2>/dev/null && echo "ESCAPE: wrote the hidden directory"
echo in > "$2/inside" || echo "BROKEN: own workspace not writable"
exit 0`, state, own)...)
		require.Equal(t, OutcomeSucceeded, res.class.Outcome, "%+v stderr=%s", res.class, res.stderr)
		require.NotContains(t, res.stdout, "ESCAPE")
		require.NotContains(t, res.stdout, "BROKEN")
		_, err := os.Stat(filepath.Join(own, "inside"))
		require.NoError(t, err)
		_, err = os.Stat(filepath.Join(state, "new"))
		require.True(t, errors.Is(err, os.ErrNotExist))

		// Pinned, then swapped: ws moves away and a symlink to target
		// takes its path before bwrap starts.
		ws := filepath.Join(base, "ws")
		target := filepath.Join(base, "target")
		for _, dir := range []string{ws, target} {
			require.NoError(t, os.Mkdir(dir, 0o755))
			require.NoError(t, os.Chown(dir, u.uid, u.uid))
		}
		p = mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws})
		res = runPinned(t, d, p, u, func() {
			require.NoError(t, os.Rename(ws, ws+"-moved"))
			require.NoError(t, os.Symlink(target, ws))
		}, sh(`echo x > "$1/written"; exit 0`, ws)...)
		_, err = os.Stat(filepath.Join(target, "written"))
		require.True(t, errors.Is(err, os.ErrNotExist), "the write followed the swapped symlink: %+v %s", res.class, res.stderr)
		if res.class.Outcome == OutcomeSucceeded {
			_, err = os.Stat(filepath.Join(ws+"-moved", "written"))
			require.NoError(t, err, "bound the pinned directory")
		} else {
			require.Equal(t, OutcomeRunnerFailed, res.class.Outcome, "%+v %s", res.class, res.stderr)
		}
	})
}

// runPinned is runJob with the roots pinned and bound by descriptor (fd 4
// on, after the status pipe), and between runs before bwrap starts.
func runPinned(t *testing.T, d Discovery, p Policy, u who, between func(), argv ...string) jobResult {
	t.Helper()
	pins, err := PinRoots(p)
	require.NoError(t, err)
	defer pins.Close()
	full, err := Build(ConfineParams{Argv: argv, Policy: p, Discovery: d, RootFDs: RootFDs(len(pins.Files()))})
	require.NoError(t, err)
	if between != nil {
		between()
	}
	return runArgv(t, full, d, p, u, pins.Files()...)
}

// TestLoadedFiles: bwrap's loader, libc and the rest of what it maps are
// found (the fence protects them: a job writing one would run its code as
// the next bwrap, on the host); a static program gives itself alone.
func TestLoadedFiles(t *testing.T) {
	rep := requireBwrap(t)
	files := LoadedFiles(rep.Executable)
	require.Equal(t, rep.Executable, files[0])
	if len(files) == 1 {
		unavailable(t, "bwrap is statically linked here: no library of its to protect")
	}
	var libc bool
	for _, f := range files {
		libc = libc || strings.HasPrefix(filepath.Base(f), "libc.so")
		require.True(t, filepath.IsAbs(f), f)
	}
	require.True(t, libc, "libc among %v", files)
	require.Contains(t, files, "/etc/ld.so.cache")
	// Each link on the way to bwrap's interpreter as bwrap names it is
	// protected too, where it lies: a writable root holding one could
	// repoint it (on Debian, /lib64 and /usr/lib64/ld-linux-x86-64.so.2).
	f, err := elf.Open(rep.Executable)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			_, err := p.ReadAt(b, 0)
			require.NoError(t, err)
			for _, l := range symlinksOn(strings.TrimRight(string(b), "\x00")) {
				require.Contains(t, files, l)
			}
		}
	}
	self, err := os.Executable()
	require.NoError(t, err)
	require.NotEmpty(t, LoadedFiles(self))
	require.Equal(t, []string{"/nonexistent/x"}, LoadedFiles("/nonexistent/x"))
}

// TestSymlinksOn: the links a path's resolution goes through, each named
// under its resolved directory, links inside link targets included.
func TestSymlinksOn(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	at := func(rel string) string { return filepath.Join(dir, rel) }
	require.NoError(t, os.MkdirAll(at("usr/lib"), 0o755))
	require.NoError(t, os.WriteFile(at("usr/lib/ld.so.real"), nil, 0o755))
	require.NoError(t, os.Symlink("ld.so.real", at("usr/lib/ld.so")))
	require.NoError(t, os.Symlink("usr/lib", at("lib64")))
	require.NoError(t, os.Symlink(at("lib64"), at("alias")))
	require.Equal(t, []string{at("lib64"), at("usr/lib/ld.so")}, symlinksOn(at("lib64/ld.so")))
	require.Equal(t, []string{at("alias"), at("lib64"), at("usr/lib/ld.so")}, symlinksOn(at("alias/ld.so")))
	require.Empty(t, symlinksOn(at("usr/lib/ld.so.real")))
	require.Equal(t, []string{at("lib64")}, symlinksOn(at("lib64/missing")))
	require.Nil(t, symlinksOn("relative/path"))
	require.NoError(t, os.Symlink("loop", at("loop")))
	require.Len(t, symlinksOn(at("loop")), maxSymlinks)
}

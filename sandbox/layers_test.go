package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/sandbox/launch"
)

var (
	launcherOnce sync.Once
	launcherPath string
	launcherErr  error
)

// openTestLauncher opens the launcher for grade g, as a runner does: at
// the full grade [OpenLauncher]'s (the image where there is one, which
// any user may execute from its descriptor); at the partial grade, this
// test binary (the launcher: see TestMain) for u. bwrap resolves a bound
// descriptor's path as the user it runs as, and the test binary lies in a
// directory only its owner may enter: for another user (nobody), a copy
// in a directory anyone may enter, made once and removed with the test
// binary's temporary files.
func openTestLauncher(t *testing.T, g Grade, u who) *os.File {
	t.Helper()
	if g == GradeFull || u.cred == nil {
		f, err := OpenLauncher(g)
		require.NoError(t, err)
		return f
	}
	launcherOnce.Do(func() {
		dir, err := os.MkdirTemp("", "paddock-launcher-")
		if err != nil {
			launcherErr = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			launcherErr = err
			return
		}
		src, err := os.Open("/proc/self/exe")
		if err != nil {
			launcherErr = err
			return
		}
		defer src.Close()
		p := filepath.Join(dir, "launcher")
		dst, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
		if err != nil {
			launcherErr = err
			return
		}
		if _, err := io.Copy(dst, src); err != nil {
			dst.Close()
			launcherErr = err
			return
		}
		launcherErr = dst.Close()
		launcherPath = p
		testCleanups = append(testCleanups, func() { os.RemoveAll(dir) })
	})
	require.NoError(t, launcherErr)
	f, err := os.Open(launcherPath)
	require.NoError(t, err)
	return f
}

// inherited returns the ExtraFiles of an argv built with d and p for a
// job run as u: the status pipe's write end, the seccomp program and the
// launcher as d's layers need them, then roots. The files are closed when
// the test ends.
func inherited(t *testing.T, d Discovery, p Policy, u who, status *os.File, roots ...*os.File) []*os.File {
	t.Helper()
	in := Inherited{Status: status, Roots: roots}
	if d.Seccomp {
		f, err := SeccompFile(p)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		in.Seccomp = f
	}
	if d.LandlockABI > 0 {
		f := openTestLauncher(t, d.Grade, u)
		t.Cleanup(func() { f.Close() })
		in.Launcher = f
	}
	return in.ExtraFiles()
}

// TestInheritedLayout: the descriptors land where the argv names them,
// whatever is missing; the report slot is the status pipe only when
// there is a launcher.
func TestInheritedLayout(t *testing.T) {
	t.Parallel()
	status, seccomp, launcher, r1, r2 := os.Stdout, os.Stdin, os.Stderr, &os.File{}, &os.File{}
	got := Inherited{Status: status, Seccomp: seccomp, Launcher: launcher, Roots: []*os.File{r1, r2}}.ExtraFiles()
	require.Equal(t, []*os.File{status, seccomp, status, launcher, r1, r2}, got)
	for fd, f := range map[int]*os.File{StatusFD: status, SeccompFD: seccomp, LaunchReportFD: status, LauncherFD: launcher, FirstRootFD: r1, FirstRootFD + 1: r2} {
		require.Same(t, f, got[fd-3], "fd %d", fd)
	}
	got = Inherited{Status: status, Roots: []*os.File{r1}}.ExtraFiles()
	require.Equal(t, []*os.File{status, nil, nil, nil, r1}, got)
	require.Equal(t, []int{FirstRootFD, FirstRootFD + 1}, RootFDs(2))
}

// TestConfineLayersArgv: the layers' options at each grade and mode: the
// seccomp descriptor, the launcher bound in the grade's own tmpfs (before
// /proc is remounted read-only at the partial grade), and the launcher's
// writable set: the roots only in workspace_write mode, /tmp, and the
// devices as the grade has them.
func TestConfineLayersArgv(t *testing.T) {
	t.Parallel()
	root := mkdirs(t, "ws", "extra")
	ws, extra := filepath.Join(root, "ws"), filepath.Join(root, "extra")
	for _, tc := range []struct {
		name   string
		grade  Grade
		params PolicyParams
		base   []string    // the grade's base, launcher bind included
		spec   launch.Spec // what the launcher enforces
	}{
		{"full/workspace_write", GradeFull, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Writable: []string{extra}, Network: true},
			[]string{"--dev", "/dev", "--proc", "/proc"},
			launch.Spec{LandlockABI: 6, WritableDirs: []string{ws, extra, "/tmp", "/dev"}, Seccomp: true, ReportFD: 5}},
		{"partial/read_only/unix", GradePartial, PolicyParams{Mode: ModeReadOnly, Workspace: ws, Network: true, UnixSockets: true},
			append(slices.Clone(partialDevBinds), "--tmpfs", "/proc", "--ro-bind-fd", "6", "/proc/.paddock-launch", "--remount-ro", "/proc"),
			launch.Spec{LandlockABI: 6, WritableDirs: []string{"/tmp"}, WritableFiles: []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"},
				UnixSockets: true, Seccomp: true, ReportFD: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPolicy(tc.params)
			require.NoError(t, err)
			d := Discovery{Executable: "/usr/bin/bwrap", Grade: tc.grade, NetworkIsolation: true, DisableUserns: true, Seccomp: true, LandlockABI: 6}
			got, err := ConfineWith([]string{"true"}, p, d)
			require.NoError(t, err)
			require.Equal(t, []string{"/usr/bin/bwrap", "--unshare-user", "--disable-userns", "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc",
				"--die-with-parent", "--new-session", "--json-status-fd", "3", "--seccomp", "4", "--ro-bind", "/", "/"}, got[:16])
			require.Equal(t, tc.base, got[16:16+len(tc.base)])
			tc.spec.Argv = []string{"true"}
			tail := append([]string{"--", LauncherProgram(tc.grade)}, tc.spec.Args()...)
			require.Equal(t, tail, got[len(got)-len(tail):])
		})
	}
	// Without the layers: no --seccomp, no launcher; --unshare-ipc stays.
	p, err := NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: ws, Network: true})
	require.NoError(t, err)
	got, err := ConfineWith([]string{"true"}, p, Discovery{Executable: "/usr/bin/bwrap", Grade: GradeFull, NetworkIsolation: true})
	require.NoError(t, err)
	require.Contains(t, got, "--unshare-ipc")
	require.NotContains(t, got, "--seccomp")
	require.NotContains(t, got, "--ro-bind-fd")
	require.Equal(t, []string{"--", "true"}, got[len(got)-2:])
}

// partialDevBinds are the partial grade's device binds.
var partialDevBinds = []string{
	"--dev-bind", "/dev/null", "/dev/null", "--dev-bind", "/dev/zero", "/dev/zero", "--dev-bind", "/dev/full", "/dev/full",
	"--dev-bind", "/dev/random", "/dev/random", "--dev-bind", "/dev/urandom", "/dev/urandom",
}

// requireLandlockHere skips a test of the Landlock layer on a host
// without it, or fails it under PADDOCK_REQUIRE_BWRAP=1.
func requireLandlockHere(t *testing.T, d Discovery) {
	t.Helper()
	if d.LandlockABI == 0 {
		unavailable(t, "no Landlock layer on this host")
	}
}

// TestLandlockLayer: with a directory bound read-write that is not in the
// writable set, the mounts would let the job write it; Landlock does not.
// The writable set works (workspace, /tmp, /dev/null, a FIFO and a rename
// in the workspace); a host FIFO on the read-only root cannot be opened
// for writing; from ABI 6 the sandbox's init (outside the domain) cannot
// be signalled.
func TestLandlockLayer(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		requireLandlockHere(t, d)
		ws := hostDir(t, "", u.uid)
		ungranted := hostDir(t, "/var/tmp", u.uid)
		fifoDir := hostDir(t, "/var/tmp", u.uid)
		fifo := filepath.Join(fifoDir, "fifo")
		require.NoError(t, syscall.Mkfifo(fifo, 0o666))
		require.NoError(t, os.Chmod(fifo, 0o666))
		// A reader, so that opening for writing would not block.
		rfd, err := syscall.Open(fifo, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		require.NoError(t, err)
		defer syscall.Close(rfd)
		p := mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true})
		argv, err := Build(ConfineParams{Policy: p, Discovery: d, ungranted: []string{ungranted}, Argv: sh(`
echo in > "$1/inside" || exit 20
if ( echo out > "$2/outside" ) 2>/dev/null; then echo "ESCAPED: wrote the ungranted directory"; fi
( echo out > "$2/outside" ) 2>&1 | grep -q "Permission denied" || echo "BROKEN: no EACCES"
echo tmp > /tmp/t || exit 21
echo null > /dev/null || exit 22
mkfifo "$1/own-fifo" && mv "$1/inside" "$1/renamed" || exit 23
if ( echo x > "$3" ) 2>/dev/null; then echo "ESCAPED: wrote the host FIFO"; fi
if [ "$4" -ge 6 ] && kill -0 1 2>/dev/null; then echo "ESCAPED: signalled the sandbox's init"; fi
echo done`, ws, ungranted, fifo, strconv.Itoa(d.LandlockABI))})
		require.NoError(t, err)
		res := runArgv(t, argv, d, p, u)
		require.Equal(t, OutcomeSucceeded, res.class.Outcome, "%+v %s", res.class, res.stderr)
		require.Equal(t, "done\n", res.stdout, res.stderr)
		require.NoFileExists(t, filepath.Join(ungranted, "outside"))
		require.FileExists(t, filepath.Join(ws, "renamed"))
		buf := make([]byte, 16)
		n, _ := syscall.Read(rfd, buf)
		require.LessOrEqual(t, n, 0, "the host FIFO's reader got %q", buf[:max(n, 0)])
	})
}

// TestLaunchFailures: a job the launcher cannot start never ran
// (runner_failed, with the launcher's reason), and one whose Landlock
// ruleset the kernel refuses does not run unconfined: a spec asking for
// an ABI level the kernel lacks, or a writable path that is not there.
func TestLaunchFailures(t *testing.T) {
	matrix(t, func(t *testing.T, d Discovery, u who) {
		requireLandlockHere(t, d)
		ws := hostDir(t, "", u.uid)
		p := mustPolicy(t, PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true})
		plain := filepath.Join(ws, "not-executable")
		require.NoError(t, os.WriteFile(plain, []byte("echo RAN\n"), 0o644))
		for _, tc := range []struct {
			name, want string
			argv       []string
			edit       func(argv []string) // changes the built argv
		}{
			{"not executable", "execvp " + plain + ": permission denied", []string{plain}, nil},
			{"not found", "execvp no-such-command-here: no such file or directory", []string{"no-such-command-here"}, nil},
			{"missing path", "landlock: opening /nonexistent-dir: no such file or directory", sh(`echo RAN`), func(a []string) {
				a[slices.IndexFunc(a, func(s string) bool { return strings.HasPrefix(s, "d/") })] = "d/nonexistent-dir"
			}},
		} {
			argv, err := ConfineWith(tc.argv, p, d)
			require.NoError(t, err)
			if tc.edit != nil {
				tc.edit(argv)
			}
			res := runArgv(t, argv, d, p, u)
			require.NotContains(t, res.stdout, "RAN", tc.name)
			require.False(t, res.status.Ran, tc.name)
			require.Equal(t, OutcomeRunnerFailed, res.class.Outcome, tc.name)
			require.Contains(t, res.status.LaunchError, tc.want, tc.name)
			require.Contains(t, res.class.Reason, "paddock-launch: "+tc.want, tc.name)
		}
	})
}

// TestProbeLayers: the probe reports the layers that hold, and a layer
// that fails its check is dropped with a note saying why, never
// silently: a launcher that is not one (/bin/true, which runs nothing)
// leaves bwrap and seccomp.
func TestProbeLayers(t *testing.T) {
	t.Parallel()
	rep := requireBwrap(t)
	require.True(t, rep.Seccomp)
	require.Equal(t, rep.Discovery().Layers(), rep.Layers)
	if rep.LandlockABI == 0 {
		requireLandlockHere(t, rep.Discovery())
	}
	bogus, err := os.Open("/bin/true")
	require.NoError(t, err)
	defer bogus.Close()
	r, err := ProbeWith(context.Background(), ProbeParams{Launcher: bogus, MaxGrade: rep.Grade})
	require.NoError(t, err)
	require.Equal(t, rep.Grade, r.Grade)
	require.Zero(t, r.LandlockABI)
	require.Equal(t, []string{LayerBwrap, LayerSeccomp}, r.Layers)
	require.Equal(t, []string{LayerLandlock}, r.Discovery().MissingLayers())
	require.True(t, slices.ContainsFunc(r.Notes, func(n string) bool {
		return strings.HasPrefix(n, "no landlock layer at the "+string(rep.Grade)+" grade: ")
	}), "%q", r.Notes)
}

// TestStatusLaunchError: the launcher's record (written with the key the
// launch package names) makes the status "never ran", whatever exit-code
// record bwrap writes after it, and Classify says why.
func TestStatusLaunchError(t *testing.T) {
	t.Parallel()
	rec, err := json.Marshal(map[string]string{launch.ReportKey: "execvp nope: no such file or directory"})
	require.NoError(t, err)
	stream := `{"child-pid": 42, "pid-namespace": 7}` + "\n" + string(rec) + "\n" + `{"exit-code": 127}` + "\n"
	st, err := ReadStatus(strings.NewReader(stream))
	require.NoError(t, err)
	require.Equal(t, Status{ChildPID: 42, PidNamespace: 7, ExitCode: 127, LaunchError: "execvp nope: no such file or directory"}, st)
	cmd := exec.Command("/bin/sh", "-c", "exit 127")
	_ = cmd.Run()
	c := Classify(ClassifyParams{Mode: ModeReadOnly, State: cmd.ProcessState, Status: st})
	require.Equal(t, OutcomeRunnerFailed, c.Outcome)
	require.Equal(t, 127, c.ExitCode)
	require.True(t, strings.HasPrefix(c.Reason, "paddock-launch: execvp nope: no such file or directory (the command could not be started"), c.Reason)
	// The job's own words in the report (its command's name) never choose
	// the explanation: only the step that failed does.
	for name, want := range map[string]string{
		"bwrap: setting up uid map: Permission denied": "(the command could not be started",
		"landlock": "(the command could not be started",
	} {
		c = Classify(ClassifyParams{Mode: ModeReadOnly, State: cmd.ProcessState,
			Status: Status{ChildPID: 42, ExitCode: 127, LaunchError: "execvp " + name + ": no such file or directory"}})
		require.Contains(t, c.Reason, want, name)
		require.NotContains(t, c.Reason, "apparmor", name)
		require.NotContains(t, c.Reason, "Landlock layer", name)
	}
	c = Classify(ClassifyParams{Mode: ModeReadOnly, State: cmd.ProcessState,
		Status: Status{ChildPID: 42, ExitCode: 126, LaunchError: "landlock: opening /w/execvp: no such file or directory"}})
	require.Contains(t, c.Reason, "could not enforce the Landlock layer")
	// An empty message still counts.
	st, err = ReadStatus(strings.NewReader(`{"` + launch.ReportKey + `": ""}` + "\n" + `{"exit-code": 126}` + "\n"))
	require.NoError(t, err)
	require.False(t, st.Ran)
	require.Equal(t, "the launcher failed", st.LaunchError)
}

// openLauncherArg makes this test binary run openLauncherProbe (see
// TestMain).
const openLauncherArg = "__open-launcher"

// openLauncherProbe renames the file named by $REPLACE_WITH (when set)
// over this running executable, as an upgrade does, then opens the
// launcher and prints the inode it opened.
func openLauncherProbe() {
	if with := os.Getenv("REPLACE_WITH"); with != "" {
		exe, err := os.Executable()
		if err == nil {
			err = os.Rename(with, exe)
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
	}
	f, err := OpenLauncher(GradePartial)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fi, err := f.Stat()
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(fi.Sys().(*syscall.Stat_t).Ino, Unlinked(f))
	os.Exit(0)
}

// TestOpenLauncherAfterUpgrade: the launcher is the running executable,
// and once that file has been replaced on disk (an upgrade renames a new
// one over it), the file now at its path: bwrap cannot bind a descriptor
// whose file has no name left.
func TestOpenLauncherAfterUpgrade(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src, err := os.Open("/proc/self/exe")
	require.NoError(t, err)
	defer src.Close()
	bin := filepath.Join(dir, "paddock")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	require.NoError(t, err)
	require.NoError(t, dst.Close())
	ino := func(path string) string {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		return strconv.FormatUint(fi.Sys().(*syscall.Stat_t).Ino, 10)
	}
	run := func(env ...string) string {
		// A file just written may still be open for writing in a child
		// another test forked and has not yet exec'd (the descriptor is
		// close-on-exec, but until the exec it is open): executing it
		// then fails with ETXTBSY for a moment (golang/go#22315).
		for try := 0; ; try++ {
			cmd := exec.Command(bin, openLauncherArg)
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			if errors.Is(err, syscall.ETXTBSY) && try < 50 {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			require.NoError(t, err, string(out))
			return strings.TrimSpace(string(out))
		}
	}
	require.Equal(t, ino(bin)+" false", run(), "the running file itself")
	upgrade := filepath.Join(dir, "paddock.new")
	require.NoError(t, os.WriteFile(upgrade, []byte("#!/bin/sh\n"), 0o755))
	want := ino(upgrade)
	require.Equal(t, want+" false", run("REPLACE_WITH="+upgrade), "the file now at the executable's path")
}

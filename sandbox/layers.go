package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"paddock/sandbox/launch"
)

// The descriptors a confined argv from [Build] names, as bwrap inherits
// them: exec.Cmd.ExtraFiles[i] becomes descriptor 3+i. [Inherited] puts
// the files in this order; a layer the host lacks leaves its slot empty
// (nil), so that the numbers never move.
const (
	// SeccompFD carries the seccomp program ([SeccompFile]); bwrap reads
	// it to its end (--seccomp).
	SeccompFD = 4
	// LaunchReportFD is the status pipe's write end again, for the
	// launcher: it writes a [launch.ReportKey] record there when the
	// job's argv never ran. bwrap does not use it.
	LaunchReportFD = 5
	// LauncherFD is the launcher: executed from the descriptor at the
	// full grade, bound read-only at [LauncherPath] at the partial grade
	// ([LauncherProgram]).
	LauncherFD = 6
	// FirstRootFD is the first pinned root ([ConfineParams].RootFDs);
	// the others follow in [Policy.Roots] order ([RootFDs]).
	FirstRootFD = 7
)

// Inherited are the files bwrap inherits to run an argv from [Build].
// The caller opens them for one spawn, passes [Inherited.ExtraFiles] as
// exec.Cmd.ExtraFiles and closes its copies after Start.
type Inherited struct {
	// Status is the write end of the status pipe ([StatusFD], and
	// [LaunchReportFD] when Launcher is set). Required.
	Status *os.File
	// Seccomp is the seccomp program ([SeccompFile]); nil when the
	// discovery has no seccomp layer.
	Seccomp *os.File
	// Launcher is the launcher binary; nil when the discovery has no
	// Landlock layer. It is only read (bound), never executed by the
	// caller, and may be shared by concurrent spawns.
	Launcher *os.File
	// Roots are the pinned roots ([PinRoots]), in [Policy.Roots] order.
	Roots []*os.File
	// Protected are the pinned protected paths ([Pinned.Protected]),
	// after the roots ([ProtectFDs]).
	Protected []*os.File
}

// ExtraFiles returns the files in descriptor order, from 3.
func (in Inherited) ExtraFiles() []*os.File {
	out := make([]*os.File, 0, FirstRootFD-3+len(in.Roots)+len(in.Protected))
	report := in.Status
	if in.Launcher == nil {
		report = nil
	}
	out = append(out, in.Status, in.Seccomp, report, in.Launcher)
	out = append(out, in.Roots...)
	return append(out, in.Protected...)
}

// RootFDs returns the descriptor numbers of n pinned roots as
// [Inherited.ExtraFiles] places them: [FirstRootFD] on.
func RootFDs(n int) []int {
	fds := make([]int, n)
	for i := range fds {
		fds[i] = FirstRootFD + i
	}
	return fds
}

// ProtectFDs returns the descriptor numbers of n pinned protected paths
// as [Inherited.ExtraFiles] places them: after nRoots pinned roots.
func ProtectFDs(nRoots, n int) []int {
	fds := make([]int, n)
	for i := range fds {
		fds[i] = FirstRootFD + nRoots + i
	}
	return fds
}

// SeccompFile returns a pipe's read end holding the seccomp program for
// policy p on this machine's architecture ([SeccompBytes], Unix sockets
// as p says), its write end already closed: bwrap reads it to its end,
// once. Each spawn needs its own. The caller closes it after Start.
func SeccompFile(p Policy) (*os.File, error) {
	b, err := nativeSeccomp[boolIndex(p.UnixSockets())]()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: seccomp pipe: %w", err)
	}
	// A few hundred bytes: far below a pipe's capacity, so the write
	// never blocks without a reader.
	_, err = w.Write(b)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("sandbox: seccomp pipe: %w", err)
	}
	return r, nil
}

// nativeSeccomp memoizes [SeccompBytes] for this machine's architecture,
// without and with Unix sockets: a pure function's result, built at the
// first confined job instead of at every one (about 20 µs).
var nativeSeccomp = [2]func() ([]byte, error){
	sync.OnceValues(func() ([]byte, error) { return SeccompBytes(SeccompParams{}) }),
	sync.OnceValues(func() ([]byte, error) { return SeccompBytes(SeccompParams{UnixSockets: true}) }),
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// OpenLauncher opens the launcher of confined jobs at grade g. At the
// full grade, where it is executed from its descriptor
// ([LauncherProgram]), it is the [launch.Image] in a sealed memfd (as
// runc keeps its own binary for CVE-2019-5736: nothing can change the
// bytes once sealed, and the job never holds the descriptor), checked
// once by running it; where there is no image (an architecture without
// one) or the kernel will not execute a memfd (vm.memfd_noexec = 2), and
// at the partial grade, it is this process's own executable
// (/proc/self/exe), whose program must run [launch.Main] when its first
// argument is [launch.Command] ([launch.Dispatch]). When that file has
// been unlinked since it started (replaced by an upgrade), it opens the
// file now at the executable's path instead: bwrap 0.8.0 binds a
// descriptor through the path it reads back from /proc/self/fd, which an
// unlinked file no longer has. A runner holding the descriptor should
// open it again once [Unlinked] says so (at the partial grade). The
// caller closes it.
func OpenLauncher(g Grade) (*os.File, error) {
	if g == GradeFull {
		if f, err := openImage(); err == nil {
			return f, nil
		}
	}
	f, err := os.Open("/proc/self/exe")
	if err == nil && Unlinked(f) {
		f.Close()
		var exe string
		if exe, err = os.Executable(); err == nil { // " (deleted)" trimmed
			f, err = os.Open(exe)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: opening the launcher: %w", err)
	}
	return f, nil
}

// openImage returns a sealed memfd holding the launcher image, after
// running it once outside any sandbox: asked to execute a program that
// does not exist, it must exit 127 with its report.
func openImage() (*os.File, error) {
	img, err := launch.Image()
	if err != nil {
		return nil, err
	}
	const flags = unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	fd, err := unix.MemfdCreate("paddock-launch", flags|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // Linux < 6.3: no MFD_EXEC
		fd, err = unix.MemfdCreate("paddock-launch", flags)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "paddock-launch")
	if _, err := f.Write(img); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: writing the launcher image: %w", err)
	}
	const seals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: sealing the launcher image: %w", err)
	}
	if err := checkImage(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkImage runs the image in f (as descriptor 3 of a child) on a
// command that does not exist.
func checkImage(f *os.File) error {
	const missing = "/nonexistent/paddock-launch-check"
	v := launch.Invocation{ReportFD: 1, Argv: []string{missing}}
	cmd := exec.Command("/proc/self/fd/3", v.Args()...)
	cmd.Args[0] = "paddock-launch"
	cmd.ExtraFiles = []*os.File{f}
	cmd.Env = []string{}
	out, err := cmd.Output()
	want := `{"` + launch.ReportKey + `":"execvp ` + missing + `: errno 2"}` + "\n"
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 127 || string(out) != want {
		return fmt.Errorf("sandbox: the launcher image does not run as it should (%v, %q)", err, out)
	}
	return nil
}

// Unlinked reports whether f's file has no name left on disk (its link
// count is 0), which bwrap cannot bind by descriptor. An error reading it
// counts as unlinked.
func Unlinked(f *os.File) bool {
	fi, err := f.Stat()
	if err != nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Nlink == 0
}

// LauncherPath is where the launcher binary is bound inside the sandbox
// at grade g: in a tmpfs bwrap makes for the sandbox, where no workspace,
// writable root or hidden directory can be (they are refused under /dev
// and /proc), so nothing the job asks for covers it and nothing is
// created on the host: /dev at the full grade, /proc (an empty
// read-only tmpfs) at the partial grade.
func LauncherPath(g Grade) string {
	if g == GradeFull {
		return "/dev/.paddock-launch"
	}
	return "/proc/.paddock-launch"
}

// LauncherProgram is the program bwrap executes to start a confined job
// at grade g: at the full grade, the launcher's own descriptor,
// /proc/self/fd/[LauncherFD] (bwrap's child inherits it; the sandbox's
// /proc shows it), which needs no mount and works for any launcher file,
// a sealed memfd included ([OpenLauncher]); at the partial grade, where
// the sandbox has no /proc of its own, [LauncherPath], where the file is
// bound.
func LauncherProgram(g Grade) string {
	if g == GradeFull {
		return "/proc/self/fd/" + strconv.Itoa(LauncherFD)
	}
	return LauncherPath(g)
}

// Layer names, as [Discovery.Layers] lists them.
const (
	LayerBwrap    = "bwrap"
	LayerSeccomp  = "seccomp"
	LayerLandlock = "landlock"
)

// Layers names the layers of the fence d builds, in order: always
// "bwrap"; "seccomp" when d.Seccomp; "landlock ABI N" when
// d.LandlockABI > 0.
func (d Discovery) Layers() []string {
	out := []string{LayerBwrap}
	if d.Seccomp {
		out = append(out, LayerSeccomp)
	}
	if d.LandlockABI > 0 {
		out = append(out, LayerLandlock+" ABI "+strconv.Itoa(d.LandlockABI))
	}
	return out
}

// launchSpec is what the launcher of a job with policy p enforces at
// grade g: writes below the workspace and writable roots
// (workspace_write only), /tmp, and the device nodes (all of /dev, a
// private tmpfs, at the full grade; the five bound nodes at the partial
// grade).
func launchSpec(p Policy, d Discovery, argv []string) launch.Spec {
	s := launch.Spec{LandlockABI: d.LandlockABI, UnixSockets: p.unix, Seccomp: d.Seccomp, ReportFD: LaunchReportFD, Argv: argv}
	if p.mode == ModeWorkspaceWrite {
		s.WritableDirs = append(s.WritableDirs, p.Roots()...)
	}
	s.WritableDirs = append(s.WritableDirs, "/tmp")
	if d.Grade == GradeFull {
		s.WritableDirs = append(s.WritableDirs, "/dev")
	} else {
		s.WritableFiles = append(s.WritableFiles, devNodes...)
	}
	return s
}

// MissingLayers names the layers d lacks: "seccomp" and "landlock" when
// the host does not have them; none when the fence is whole.
func (d Discovery) MissingLayers() []string {
	var out []string
	if !d.Seccomp {
		out = append(out, LayerSeccomp)
	}
	if d.LandlockABI == 0 {
		out = append(out, LayerLandlock)
	}
	return out
}

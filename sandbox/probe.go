package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"paddock/sandbox/launch"
)

// Discovery is what [Probe] found about the host's bwrap; [ConfineWith]
// builds argv from it. Tests and callers that pin a configuration may fill
// it by hand.
type Discovery struct {
	// Executable is the absolute path of bwrap.
	Executable string
	// Grade is full, partial or unusable.
	Grade Grade
	// NetworkIsolation is true when --unshare-net works.
	NetworkIsolation bool
	// DisableUserns is true when bwrap knows --disable-userns (0.8.0 and
	// later); the argv then forbids nested user namespaces.
	DisableUserns bool
	// Root is true when the probe ran with euid 0. It is reported, not
	// used: the argv is the same for root and non-root.
	Root bool
	// KernelPaths are the kernel interfaces under /proc and /sys that
	// exist on this host and that the argv covers ([FindKernelPaths]).
	KernelPaths KernelPaths
	// Seccomp is true when bwrap applies the seccomp program
	// ([SeccompProgram]) on this host: the argv then passes --seccomp
	// [SeccompFD].
	Seccomp bool
	// LandlockABI is the Landlock ABI level the launcher enforces
	// ([launch.LandlockABI]); 0 when the host has no usable Landlock, and
	// the argv then runs the command without the launcher.
	LandlockABI int
}

// probed holds the memoized successful probe; nil until one succeeds. It is
// the package's only mutable state.
var probed atomic.Pointer[ProbeReport]

// probeMu serialises probing so concurrent first calls probe once.
var probeMu sync.Mutex

// Discovered returns the memoized result of the last successful [Probe]. It
// is pure and safe for concurrent use. Before any successful probe it
// returns the defaults: Executable [DefaultExecutable], Grade full,
// NetworkIsolation true, DisableUserns true, Root false, KernelPaths
// with /proc/sys read-only, Seccomp true and LandlockABI 0.
func Discovered() Discovery {
	if r := probed.Load(); r != nil {
		return r.Discovery()
	}
	return Discovery{Executable: DefaultExecutable, Grade: GradeFull, NetworkIsolation: true, DisableUserns: true, KernelPaths: defaultKernelPaths(), Seccomp: true}
}

// ProbeReport is what a probe found, for people ([paddock probe]) and for
// [Discovered].
type ProbeReport struct {
	Grade            Grade  `json:"grade"`
	Executable       string `json:"executable"` // absolute; "" when not found
	Version          string `json:"version"`    // e.g. "0.8.0"
	NetworkIsolation bool   `json:"network_isolation"`
	DisableUserns    bool   `json:"disable_userns"`
	Root             bool   `json:"root"`
	Setuid           bool   `json:"setuid"`
	// KernelPaths are the /proc and /sys paths covered in every sandbox
	// (read-only or masked), those of [FindKernelPaths] that exist here.
	KernelPaths KernelPaths `json:"kernel_paths"`
	// Seccomp is true when bwrap applies the seccomp program here.
	Seccomp bool `json:"seccomp"`
	// LandlockABI is the Landlock ABI level jobs run under; 0 = none.
	LandlockABI int `json:"landlock_abi"`
	// Layers names the layers of the fence: "bwrap", then "seccomp" and
	// "landlock ABI N" where they hold ([Discovery.Layers]); empty when
	// the grade is unusable.
	Layers    []string `json:"layers"`
	Error     string   `json:"error"`      // "" when usable
	BwrapLine string   `json:"bwrap_line"` // the "bwrap: ..." line that explains a failure
	Hint      string   `json:"hint"`       // what to do about it
	// Notes are remarks that are not failures (a setuid bwrap, the reason
	// for the partial grade, why network isolation is missing, where a
	// cached report came from).
	Notes []string `json:"notes,omitempty"`
	// Cached is true when the report was read from the probe cache
	// ([ProbeCached]) rather than found by running bwrap now.
	Cached bool `json:"cached"`
}

// Usable reports whether the grade is full or partial.
func (r ProbeReport) Usable() bool { return r.Grade == GradeFull || r.Grade == GradePartial }

// Discovery returns the part of r that [ConfineWith] needs.
func (r ProbeReport) Discovery() Discovery {
	return Discovery{Executable: r.Executable, Grade: r.Grade, NetworkIsolation: r.NetworkIsolation, DisableUserns: r.DisableUserns, Root: r.Root, KernelPaths: r.KernelPaths,
		Seccomp: r.Seccomp, LandlockABI: r.LandlockABI}
}

// ProbeParams tune [ProbeWith]. The zero value probes "bwrap" from PATH
// with /bin/sh.
type ProbeParams struct {
	// Executable is the bwrap to probe: an absolute path, or a name looked
	// up in PATH. Defaults to "bwrap".
	Executable string
	// Shell runs the probe's check script inside the sandbox. The script is
	// POSIX and correct under dash and bash. Defaults to "/bin/sh".
	Shell string
	// Timeout bounds each bwrap run of the probe. Defaults to 10s.
	Timeout time.Duration
	// MaxGrade caps the grade: GradePartial skips the full base and
	// checks only the partial one, so a host that supports the full grade
	// runs at the partial grade (tests, and reproducing a container's
	// sandbox on a full host). It can only lower the grade, never weaken
	// the fence below the partial grade's. Defaults to "" (no cap);
	// GradeFull is the same.
	MaxGrade Grade
	// Launcher is the launcher the Landlock layer is checked with (see
	// package launch), at both grades; the caller keeps it open and
	// closes it. Defaults to [OpenLauncher]'s for the grade checked, the
	// one a runner uses (this process's own executable among them, which
	// must then call [launch.Dispatch] first in main).
	Launcher *os.File

	// launchers are the defaults opened for Launcher, by grade.
	launchers map[Grade]*os.File
}

// launcherFor returns the launcher to check grade g with: pp.Launcher,
// or [OpenLauncher]'s, opened once per probe (closed by Probe).
func (pp *ProbeParams) launcherFor(g Grade) (*os.File, error) {
	if pp.Launcher != nil {
		return pp.Launcher, nil
	}
	if f := pp.launchers[g]; f != nil {
		return f, nil
	}
	f, err := OpenLauncher(g)
	if err != nil {
		return nil, err
	}
	pp.launchers[g] = f
	return f, nil
}

// ForceGradeEnv names the environment variable [Probe] reads for
// [ProbeParams.MaxGrade]: "partial" caps the grade at partial; "" or
// "full" change nothing; any other value makes the probe fail (fail
// closed: confined jobs refuse to run).
const ForceGradeEnv = "PADDOCK_FORCE_GRADE"

// Probe resolves bwrap from PATH and finds the grade, like [ProbeWith] with
// zero params (but MaxGrade from $PADDOCK_FORCE_GRADE, see
// [ForceGradeEnv]), and memoizes the report when it is usable: later calls return
// it without running anything, and [Discovered] reads it. A failed probe is
// not memoized, so the next call probes again. Safe for concurrent use;
// concurrent first calls probe once.
//
// The error wraps [ErrUnusable] when the grade is unusable; the report is
// filled in either case.
func Probe(ctx context.Context) (ProbeReport, error) {
	if r := probed.Load(); r != nil {
		return *r, nil
	}
	probeMu.Lock()
	defer probeMu.Unlock()
	if r := probed.Load(); r != nil {
		return *r, nil
	}
	maxGrade, rep, err := forcedMaxGrade()
	if err != nil {
		return *rep, err
	}
	r, err := ProbeWith(ctx, ProbeParams{MaxGrade: maxGrade})
	if err == nil {
		probed.Store(&r)
	}
	return r, err
}

// probeScript checks, inside the sandbox, that the device nodes open for
// reading and writing, that the workspace ($1) is writable, and that / is
// not. It attempts a write to $2 (outside the workspace), which the caller
// checks from the host. It avoids special builtins (":" etc.) under a
// redirection, whose failure exits dash, and puts every risky redirection in
// a subshell, so its result does not depend on which shell /bin/sh is.
const probeScript = `ws=$1
out=$2
for d in /dev/null /dev/zero /dev/full /dev/random /dev/urandom; do
  if ! ( true < "$d" ) 2>/dev/null; then echo "paddock-probe: cannot read $d" >&2; exit 10; fi
  if ! ( true > "$d" ) 2>/dev/null; then echo "paddock-probe: cannot write $d" >&2; exit 11; fi
done
if ! ( echo x > /dev/null ) 2>/dev/null; then echo "paddock-probe: cannot write to /dev/null" >&2; exit 12; fi
if ! ( echo ok > "$ws/inside" ) 2>/dev/null; then echo "paddock-probe: cannot write the workspace" >&2; exit 13; fi
( echo x > "$out" ) 2>/dev/null
if ( echo x > /paddock-probe-escape ) 2>/dev/null; then echo "paddock-probe: / is writable" >&2; exit 14; fi
if [ -n "$3" ]; then ( echo x > "$3/landlock" ) 2>/dev/null; fi
exit 0
`

// escapeMarker is the host path the probe script must fail to create.
const escapeMarker = "/paddock-probe-escape"

// ProbeWith probes the bwrap named by pp and returns what it found. It
// memoizes nothing. It runs bwrap --version and up to three sandboxes: the
// full base, then the partial base if the full one fails, then the usable
// base with --unshare-net. Each runs a check script that must write the
// workspace and the device nodes and must fail to write / and a path
// outside the workspace, verified from the host.
//
// The error wraps [ErrUnusable] when no base works (bwrap missing, refused,
// or a fence that leaks); the report then says why (Error, BwrapLine, Hint).
// ctx bounds the whole probe.
func ProbeWith(ctx context.Context, pp ProbeParams) (ProbeReport, error) {
	rep := ProbeReport{Grade: GradeUnusable, Root: os.Geteuid() == 0}
	fail := func(msg, line, hint string) (ProbeReport, error) {
		rep.Grade, rep.Error, rep.BwrapLine, rep.Hint = GradeUnusable, msg, line, hint
		return rep, fmt.Errorf("%w: %s", ErrUnusable, msg)
	}
	if pp.Executable == "" {
		pp.Executable = "bwrap"
	}
	if pp.Shell == "" {
		pp.Shell = "/bin/sh"
	}
	if pp.Timeout <= 0 {
		pp.Timeout = 10 * time.Second
	}
	exe, err := exec.LookPath(pp.Executable)
	if err != nil {
		return fail(fmt.Sprintf("bwrap not found (%v)", err), "", "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)")
	}
	if exe, err = filepath.Abs(exe); err != nil {
		return fail(err.Error(), "", "")
	}
	rep.Executable = exe
	if fi, err := os.Stat(exe); err == nil && fi.Mode()&os.ModeSetuid != 0 {
		rep.Setuid = true
		rep.Notes = append(rep.Notes, "bwrap is setuid root: it builds the sandbox with real root privileges; paddock passes no option a setuid bwrap refuses (no --cap-add, --size, --userns, and no --disable-userns, which a setuid bwrap cannot apply), and the checks ran through it")
	}
	vctx, cancel := context.WithTimeout(ctx, pp.Timeout)
	vout, err := exec.CommandContext(vctx, exe, "--version").CombinedOutput()
	cancel()
	if err != nil {
		return fail(fmt.Sprintf("%s --version failed: %v", exe, err), firstLine(vout), "check that bwrap is bubblewrap and is executable")
	}
	rep.Version = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(vout)), "bubblewrap"))
	// --disable-userns exists since 0.8.0; a setuid bwrap cannot honour it
	// (it fails opening /proc/sys/user/max_user_namespaces as the user).
	rep.DisableUserns = versionAtLeast(rep.Version, 0, 8) && !rep.Setuid

	rep.KernelPaths = FindKernelPaths()
	pp.launchers = map[Grade]*os.File{}
	defer func() {
		for _, f := range pp.launchers {
			f.Close()
		}
	}()
	_, launcherErr := pp.launcherFor(GradePartial)
	d := Discovery{Executable: exe, Grade: GradeFull, NetworkIsolation: true, DisableUserns: rep.DisableUserns, Root: rep.Root, KernelPaths: rep.KernelPaths,
		Seccomp: true, LandlockABI: launch.LandlockABI()}
	if d.LandlockABI == 0 {
		rep.Notes = append(rep.Notes, "no Landlock layer: the kernel has no usable Landlock (Linux 5.13 or later with landlock in the lsm= boot list); jobs run under bwrap and seccomp only")
	} else if launcherErr != nil {
		d.LandlockABI = 0
		rep.Notes = append(rep.Notes, "no Landlock layer: this process's own executable cannot be opened as the launcher")
	}
	var fullErr error
	if pp.MaxGrade == GradePartial {
		fullErr = errors.New("grade capped at partial")
	} else {
		d, fullErr = checkLayers(ctx, pp, d, &rep)
	}
	if fullErr != nil {
		d.Grade = GradePartial
		var partialErr error
		if d, partialErr = checkLayers(ctx, pp, d, &rep); partialErr != nil {
			var ce *checkError
			if errors.As(partialErr, &ce) || errors.As(fullErr, &ce) {
				return fail(fmt.Sprintf("full grade: %v; partial grade: %v", fullErr, partialErr), ce.diag.Line, ce.hint())
			}
			return fail(fmt.Sprintf("full grade: %v; partial grade: %v", fullErr, partialErr), "", "")
		}
		if pp.MaxGrade == GradePartial {
			rep.Notes = append(rep.Notes, "partial grade forced ("+ForceGradeEnv+"=partial or ProbeParams.MaxGrade); the full base was not tried")
		} else {
			rep.Notes = append(rep.Notes, "partial grade because the full base failed: "+fullErr.Error())
		}
	}
	rep.Grade = d.Grade
	rep.Seccomp, rep.LandlockABI, rep.Layers = d.Seccomp, d.LandlockABI, d.Layers()
	if netErr := runCheck(ctx, pp, d, false); netErr != nil {
		rep.NetworkIsolation = false
		rep.Notes = append(rep.Notes, "network isolation unavailable: "+netErr.Error())
	} else {
		rep.NetworkIsolation = true
	}
	return rep, nil
}

// checkError is a failed probe run with bwrap's explanation.
type checkError struct {
	msg  string
	diag Diagnosis
}

func (e *checkError) Error() string {
	if e.diag.Explanation != "" {
		return e.msg + " (" + e.diag.Explanation + ")"
	}
	return e.msg
}

func (e *checkError) hint() string { return e.diag.Hint }

// checkLayers runs the check at d's grade with the layers d asks for.
// When that fails and the base without them works, the layers are tried
// one by one: the one that fails is dropped, with a note saying why, so
// that the report says which layers hold (a layer is never dropped
// silently). The error is the base's own when the grade itself fails.
func checkLayers(ctx context.Context, pp ProbeParams, d Discovery, rep *ProbeReport) (Discovery, error) {
	err := runCheck(ctx, pp, d, true)
	if err == nil || (!d.Seccomp && d.LandlockABI == 0) {
		return d, err
	}
	base := d
	base.Seccomp, base.LandlockABI = false, 0
	if baseErr := runCheck(ctx, pp, base, true); baseErr != nil {
		return d, baseErr
	}
	for _, layer := range []string{LayerSeccomp, LayerLandlock} {
		one := base
		switch {
		case layer == LayerSeccomp && d.Seccomp:
			one.Seccomp = true
		case layer == LayerLandlock && d.LandlockABI > 0:
			one.LandlockABI = d.LandlockABI
		default:
			continue
		}
		if lerr := runCheck(ctx, pp, one, true); lerr != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("no %s layer at the %s grade: %v", layer, d.Grade, lerr))
			continue
		}
		base = one
	}
	return base, nil
}

// runCheck runs probeScript confined by d (network shared or not) and checks
// the results from the host. With the Landlock layer, a directory bound
// read-write but left out of the writable set must stay unwritten.
func runCheck(ctx context.Context, pp ProbeParams, d Discovery, network bool) error {
	dir, err := os.MkdirTemp("", "paddock-probe-")
	if err != nil {
		return fmt.Errorf("probe scratch dir: %w", err)
	}
	defer os.RemoveAll(dir)
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		return fmt.Errorf("probe scratch dir: %w", err)
	}
	outside := filepath.Join(dir, "outside")
	pol, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: network})
	if err != nil {
		return err
	}
	cp := ConfineParams{Argv: []string{pp.Shell, "-c", probeScript, "paddock-probe", pol.Workspace(), filepath.Join(filepath.Dir(pol.Workspace()), "outside"), ""},
		Policy: pol, Discovery: d}
	// The directory outside the writable set is not under /tmp: a
	// Landlock rule covers everything mounted below its directory, and
	// the launcher grants /tmp. /var/tmp exists on every FHS system;
	// without it the launcher's own checks are all there is.
	ungranted := ""
	if d.LandlockABI > 0 {
		if u, err := os.MkdirTemp("/var/tmp", "paddock-probe-"); err == nil {
			defer os.RemoveAll(u)
			if ungranted, err = filepath.EvalSymlinks(u); err != nil {
				return fmt.Errorf("probe scratch dir: %w", err)
			}
			cp.ungranted = []string{ungranted}
			cp.Argv[len(cp.Argv)-1] = ungranted
		}
	}
	argv, err := Build(cp)
	if err != nil {
		return err
	}
	in := Inherited{}
	if d.Seccomp {
		if in.Seccomp, err = SeccompFile(pol); err != nil {
			return err
		}
		defer in.Seccomp.Close()
	}
	if d.LandlockABI > 0 {
		if in.Launcher, err = pp.launcherFor(d.Grade); err != nil {
			return err
		}
	}
	res, err := runConfined(ctx, pp.Timeout, argv, in)
	if err != nil {
		return err
	}
	if ungranted != "" {
		if _, err := os.Lstat(filepath.Join(ungranted, "landlock")); err == nil {
			return errors.New("the Landlock layer did not hold: a write outside the writable set landed on the host")
		}
	}
	if _, err := os.Lstat(escapeMarker); err == nil {
		os.Remove(escapeMarker)
		return errors.New("the fence leaked: a write to / landed on the host")
	}
	if _, err := os.Lstat(outside); err == nil {
		return errors.New("the fence leaked: a write outside the workspace landed on the host")
	}
	if res.status.LaunchError != "" {
		return &checkError{msg: "the launcher failed: " + res.status.LaunchError}
	}
	if !res.status.Ran {
		diag, _ := Diagnose(res.stderr)
		msg := fmt.Sprintf("bwrap failed before the check ran (exit status %d)", res.exitCode)
		if diag.Line != "" {
			msg = diag.Line
		}
		return &checkError{msg: msg, diag: diag}
	}
	if res.status.ExitCode != 0 {
		return fmt.Errorf("check script failed with status %d: %s", res.status.ExitCode, strings.TrimSpace(lastLine(res.stderr)))
	}
	if b, err := os.ReadFile(filepath.Join(ws, "inside")); err != nil || string(b) != "ok\n" {
		return errors.New("a write inside the workspace did not land on the host")
	}
	return nil
}

type runResult struct {
	status   Status
	exitCode int
	stderr   []byte
}

// runConfined runs a confined argv with the status pipe and the files of
// in wired, in its own process group, and waits for it.
func runConfined(ctx context.Context, timeout time.Duration, argv []string, in Inherited) (runResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pr, pw, err := os.Pipe()
	if err != nil {
		return runResult{}, err
	}
	defer pr.Close()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = &stderr
	in.Status = pw
	cmd.ExtraFiles = in.ExtraFiles()
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LC_ALL=C"}
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return runResult{}, fmt.Errorf("starting bwrap: %w", err)
	}
	pw.Close()
	// A setuid bwrap that fails leaves its forked half blocked on a setup
	// eventfd forever, orphaned (seen with bwrap 0.8.0 run by a user whose
	// namespaces it cannot make). It has not reached its own session yet:
	// whatever is left in the process group once bwrap exits is killed.
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()
	type read struct {
		st  Status
		err error
	}
	ch := make(chan read, 1)
	go func() { st, err := ReadStatus(pr); ch <- read{st, err} }()
	werr := cmd.Wait()
	// A sandbox child orphaned by a failing bwrap can hold the status pipe
	// open (seen with a setuid bwrap): do not wait for EOF forever.
	_ = pr.SetReadDeadline(time.Now().Add(2 * time.Second))
	r := <-ch
	st, stErr := r.st, r.err
	if errors.Is(stErr, os.ErrDeadlineExceeded) {
		stErr = nil
	}
	if ctx.Err() != nil {
		return runResult{}, fmt.Errorf("bwrap did not finish in %s: %w", timeout, ctx.Err())
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return runResult{}, werr
	}
	if stErr != nil {
		return runResult{}, stErr
	}
	return runResult{status: st, exitCode: cmd.ProcessState.ExitCode(), stderr: stderr.Bytes()}, nil
}

// versionAtLeast reports whether a "X.Y[.Z]" version is at least maj.min.
func versionAtLeast(v string, maj, min int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	a, err1 := strconv.Atoi(parts[0])
	b, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return a > maj || (a == maj && b >= min)
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

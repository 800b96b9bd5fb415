package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
)

// StatusFD is the file descriptor on which bwrap writes its JSON status
// (--json-status-fd 3). A caller running a confined argv must pass the
// write end of a pipe as exec.Cmd.ExtraFiles[0] (which becomes fd 3), close
// its own copy after Start, and read the read end with [ReadStatus].
const StatusFD = 3

// DefaultExecutable is the bwrap path [Discovered] returns before a
// successful [Probe].
const DefaultExecutable = "/usr/bin/bwrap"

// ErrUnusable means a confined mode was requested but there is no usable
// bwrap (grade unusable, or an executable that is not an absolute path).
// paddock fails closed: it never falls back to running unconfined.
var ErrUnusable = errors.New("sandbox: no usable bwrap")

// ErrNoNetworkIsolation means the policy asks for network = false but the
// probe found that --unshare-net does not work on this host.
var ErrNoNetworkIsolation = errors.New("sandbox: network isolation (--unshare-net) does not work on this host")

// devNodes are bound as devices (--dev-bind) at the partial grade: plain
// binds are nodev, which makes even /dev/null unwritable. /dev/tty is left
// out on purpose: with --new-session the job has no controlling terminal.
var devNodes = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"}

// Confine returns the argv that runs argv under policy p, using the
// memoized [Discovered] result. It is [ConfineWith] with [Discovered]().
func Confine(argv []string, p Policy) ([]string, error) {
	return ConfineWith(argv, p, Discovered())
}

// ConfineWith returns the argv that runs argv under policy p with the bwrap
// described by d. The result is a new slice; argv is not modified.
//
// It is pure: it spawns nothing, reads no file and searches no PATH. It is
// safe for concurrent use. The exact shape per grade and mode is in the
// package documentation; it does not depend on d.Root.
//
// danger_full_access returns a copy of argv unchanged (no bwrap at all).
//
// # Errors
//
//   - argv is empty;
//   - p is the zero Policy (not built by [NewPolicy]);
//   - d.Grade is not full or partial, or d.Executable is not absolute
//     (wraps [ErrUnusable]);
//   - p.Network() is false but d.NetworkIsolation is false (wraps
//     [ErrNoNetworkIsolation]).
func ConfineWith(argv []string, p Policy, d Discovery) ([]string, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox: empty argv")
	}
	switch p.mode {
	case ModeDangerFullAccess:
		return append([]string(nil), argv...), nil
	case ModeReadOnly, ModeWorkspaceWrite:
	default:
		return nil, errors.New("sandbox: invalid policy (build it with NewPolicy)")
	}
	if d.Grade != GradeFull && d.Grade != GradePartial {
		return nil, fmt.Errorf("%w (grade %q)", ErrUnusable, d.Grade)
	}
	if !filepath.IsAbs(d.Executable) {
		return nil, fmt.Errorf("%w (executable %q is not an absolute path)", ErrUnusable, d.Executable)
	}
	if !p.network && !d.NetworkIsolation {
		return nil, ErrNoNetworkIsolation
	}

	n := 40 + 3*len(p.writable) + len(argv)
	out := make([]string, 0, n)
	out = append(out, d.Executable, "--unshare-user")
	if d.DisableUserns {
		out = append(out, "--disable-userns")
	}
	out = append(out, "--cap-drop", "ALL", "--unshare-pid")
	if !p.network {
		out = append(out, "--unshare-net")
	}
	out = append(out, "--die-with-parent", "--new-session", "--json-status-fd", "3", "--ro-bind", "/", "/")
	if d.Grade == GradeFull {
		out = append(out, "--dev", "/dev", "--proc", "/proc")
	} else {
		for _, n := range devNodes {
			out = append(out, "--dev-bind", n, n)
		}
		out = append(out, "--tmpfs", "/proc", "--remount-ro", "/proc")
	}
	out = append(out, "--tmpfs", "/tmp")
	if p.mode == ModeReadOnly {
		out = append(out, "--ro-bind", p.workspace, p.workspace)
	} else {
		out = append(out, "--bind", p.workspace, p.workspace)
		for _, w := range p.writable {
			out = append(out, "--bind", w, w)
		}
	}
	out = append(out, "--chdir", p.cwd, "--")
	return append(out, argv...), nil
}

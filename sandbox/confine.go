package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
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
// described by d, binding every root by path. It is [Build] with no
// descriptors; see there for errors and purity.
func ConfineWith(argv []string, p Policy, d Discovery) ([]string, error) {
	return Build(ConfineParams{Argv: argv, Policy: p, Discovery: d})
}

// ConfineParams are the inputs of [Build].
type ConfineParams struct {
	// Argv is the command. Required; it is copied, never modified.
	Argv []string
	// Policy is built by [NewPolicy]. Required.
	Policy Policy
	// Discovery describes the bwrap to use (usually [Discovered]).
	Discovery Discovery
	// RootFDs, when not nil, are the descriptor numbers, as bwrap will
	// inherit them, of the policy's [Policy.Roots], in that order: each
	// root is then bound with --bind-fd / --ro-bind-fd instead of by path,
	// so that what is bound is the directory the caller opened and
	// checked ([PinRoots]), whatever happens to the path afterwards.
	// bwrap checks after the mount that it bound the descriptor's inode
	// and fails otherwise. Defaults to nil (bind by path: for printing).
	RootFDs []int
	// DeviceNodes, when not "", is a directory [PrepareDeviceNodes] made:
	// its substitutes are bound over the device nodes bwrap takes from
	// the host (after --dev at the full grade; as the partial grade's
	// --dev-bind sources), so that a job that runs as host root cannot
	// change the host's nodes' mode or times. Defaults to "" (the host's
	// nodes: right for a worker that is not root, which owns none).
	DeviceNodes string
	// DevTree, when not "", is a directory holding a whole /dev made for
	// the job in the mount namespace bwrap starts in
	// ([StartWithDeviceNodes] with tree): at the full grade it is bound
	// as the job's /dev (--dev-bind DIR /dev, one mount) in place of
	// --dev, which makes a tmpfs and binds six host nodes, each bind a
	// read of the whole mount table. Only at the full grade, and never
	// with DeviceNodes. Defaults to "" (--dev).
	DevTree string
	// ProtectFDs, when RootFDs is not nil, are the descriptor numbers of
	// the policy's pinned protected paths ([Pinned.Protected]), in that
	// order; each is bound with --bind-fd / --ro-bind-fd like a root.
	ProtectFDs []int

	// ungranted are directories bound read-write by path and left out of
	// the launcher's writable set: the probe writes one to check that the
	// Landlock layer holds where the mounts alone would not.
	ungranted []string
}

// Build returns the argv that runs cp.Argv under cp.Policy with the bwrap
// described by cp.Discovery. The result is a new slice.
//
// It is pure: it spawns nothing, reads no file and searches no PATH. It is
// safe for concurrent use. The exact shape per grade and mode is in the
// package documentation; it does not depend on Discovery.Root.
//
// danger_full_access returns a copy of the argv unchanged (no bwrap at
// all).
//
// # Errors
//
//   - the argv is empty;
//   - the policy is the zero Policy (not built by [NewPolicy]);
//   - the grade is not full or partial, or the executable is not
//     absolute (wraps [ErrUnusable]);
//   - the policy's network is false but Discovery.NetworkIsolation is
//     false (wraps [ErrNoNetworkIsolation]);
//   - RootFDs is not nil and does not have one descriptor (>= 3) per
//     root, or ProtectFDs one per pinned protected path;
//   - DevTree is set at the partial grade or with DeviceNodes.
func Build(cp ConfineParams) ([]string, error) {
	argv, p, d := cp.Argv, cp.Policy, cp.Discovery
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
	roots := p.Roots()
	if cp.RootFDs != nil {
		if len(cp.RootFDs) != len(roots) {
			return nil, fmt.Errorf("sandbox: %d root descriptors for %d roots", len(cp.RootFDs), len(roots))
		}
		if n := p.pinnedProtect(); len(cp.ProtectFDs) != n {
			return nil, fmt.Errorf("sandbox: %d protected-path descriptors for %d protected paths", len(cp.ProtectFDs), n)
		}
		for _, fd := range append(slices.Clone(cp.RootFDs), cp.ProtectFDs...) {
			if fd < 3 {
				return nil, fmt.Errorf("sandbox: root descriptor %d is a standard stream", fd)
			}
		}
	}

	if cp.DevTree != "" && (d.Grade != GradeFull || cp.DeviceNodes != "") {
		return nil, errors.New("sandbox: a prepared /dev (DevTree) is for the full grade only, and never with DeviceNodes")
	}

	n := 90 + 6*len(roots) + 5*len(p.hide) + 3*len(p.hideFiles) + 6*len(p.protect) + len(argv)
	out := make([]string, 0, n)
	out = append(out, d.Executable, "--unshare-user")
	if d.DisableUserns {
		out = append(out, "--disable-userns")
	}
	out = append(out, "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc")
	if !p.network {
		out = append(out, "--unshare-net")
	}
	out = append(out, "--die-with-parent", "--new-session", "--json-status-fd", "3")
	if d.Seccomp {
		out = append(out, "--seccomp", strconv.Itoa(SeccompFD))
	}
	out = append(out, "--ro-bind", "/", "/")
	launcher := d.LandlockABI > 0
	bindLauncher := func(out []string) []string {
		if !launcher {
			return out
		}
		return append(out, "--ro-bind-fd", strconv.Itoa(LauncherFD), LauncherPath(d.Grade))
	}
	if d.Grade == GradeFull {
		// The launcher is executed from its descriptor (LauncherProgram):
		// no mount.
		if cp.DevTree != "" {
			out = append(out, "--dev-bind", cp.DevTree, "/dev")
		} else {
			out = append(out, "--dev", "/dev")
		}
		if cp.DeviceNodes != "" {
			for _, n := range substituteNodes {
				out = append(out, "--dev-bind", filepath.Join(cp.DeviceNodes, n), "/dev/"+n)
			}
		}
		out = append(out, "--proc", "/proc")
	} else {
		for _, n := range devNodes {
			src := n
			if cp.DeviceNodes != "" {
				src = filepath.Join(cp.DeviceNodes, filepath.Base(n))
			}
			out = append(out, "--dev-bind", src, n)
		}
		out = append(out, "--tmpfs", "/proc")
		out = bindLauncher(out)
		out = append(out, "--remount-ro", "/proc")
	}
	out = d.KernelPaths.appendCover(out, d.Grade)
	out = append(out, "--tmpfs", "/tmp")
	for _, m := range p.mounts(roots, cp) {
		out = append(out, m.args...)
	}
	for _, u := range cp.ungranted {
		out = append(out, "--bind", u, u)
	}
	out = append(out, "--chdir", p.cwd, "--")
	if launcher {
		out = append(out, LauncherProgram(d.Grade))
		return append(out, launchSpec(p, d, argv).Args()...), nil
	}
	return append(out, argv...), nil
}

// pinnedProtect is the number of protected paths [PinRoots] pins.
func (p Policy) pinnedProtect() int {
	n := 0
	for _, m := range p.protect {
		if m.kind.pinned() {
			n++
		}
	}
	return n
}

// mount is one mount of a job's file system view below its root bind:
// a writable root's bind, a hidden directory's tmpfs (made read-only
// inside a root, so that a job's writes there fail rather than vanish
// with it), a hidden file's empty node, or a protected path's mount. args
// are its bwrap options.
type mount struct {
	path string
	args []string
}

// mounts returns the mounts of p's roots (bound from cp.RootFDs when
// set), hidden paths and protected paths (cp.ProtectFDs for the pinned
// ones, in p.protect's order), each after every one whose path contains
// it: a mount made before one of a directory around it would be covered
// by it (bwrap's binds are recursive from the host's tree, where the
// earlier mount is not). So a hidden directory inside a root stays
// hidden, a root inside a hidden directory is bound back over the tmpfs,
// and a protected directory kept around a hidden one does not show it
// again. Mounts of paths that do not contain each other keep their order:
// roots, hidden directories, protected paths, hidden files.
//
// A hidden directory outside every root stays a private, writable tmpfs
// (the job's writes reach nothing, as in /tmp, and the Landlock layer
// refuses them anyway): --remount-ro is the costliest bwrap option (it
// reads the whole mount table), and a fence pays for each one on every
// job.
func (p Policy) mounts(roots []string, cp ConfineParams) []mount {
	bind := "--bind"
	if p.mode == ModeReadOnly {
		bind = "--ro-bind"
	}
	out := make([]mount, 0, len(roots)+len(p.hide)+len(p.protect)+len(p.hideFiles))
	for i, r := range roots {
		if cp.RootFDs != nil {
			out = append(out, mount{r, []string{bind + "-fd", strconv.Itoa(cp.RootFDs[i]), r}})
		} else {
			out = append(out, mount{r, []string{bind, r, r}})
		}
	}
	for _, h := range p.hide {
		m := mount{h, []string{"--tmpfs", h}}
		if slices.ContainsFunc(roots, func(r string) bool { return Within(h, r) }) {
			m.args = append(m.args, "--remount-ro", h)
		}
		out = append(out, m)
	}
	pinned := 0
	for _, pm := range p.protect {
		switch pm.kind {
		case protectAbsent, protectPending:
			continue
		case protectNewDir:
			out = append(out, mount{pm.path, []string{"--tmpfs", pm.path, "--remount-ro", pm.path}})
			continue
		}
		b := "--ro-bind"
		if pm.kind == protectKeep {
			b = "--bind"
		}
		if cp.RootFDs != nil {
			out = append(out, mount{pm.path, []string{b + "-fd", strconv.Itoa(cp.ProtectFDs[pinned]), pm.path}})
		} else {
			out = append(out, mount{pm.path, []string{b, pm.path, pm.path}})
		}
		pinned++
	}
	for _, f := range p.hideFiles {
		out = append(out, mount{f, []string{"--ro-bind", "/dev/null", f}})
	}
	return containmentOrder(out)
}

// containmentOrder returns ms with each mount after every one whose path
// contains it, and otherwise in their order: at each step, the first
// mount left that no other one left contains (there is always one:
// containment of distinct paths has no cycle).
func containmentOrder(ms []mount) []mount {
	around := make([]int, len(ms)) // mounts left whose path contains ms[i]
	for i, m := range ms {
		for j, o := range ms {
			if i != j && o.path != m.path && Within(m.path, o.path) {
				around[i]++
			}
		}
	}
	out := make([]mount, 0, len(ms))
	taken := make([]bool, len(ms))
	for len(out) < len(ms) {
		i := 0
		for taken[i] || around[i] > 0 {
			i++
		}
		taken[i] = true
		out = append(out, ms[i])
		for k, o := range ms {
			if !taken[k] && o.path != ms[i].path && Within(o.path, ms[i].path) {
				around[k]--
			}
		}
	}
	return out
}

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// PolicyParams are the raw inputs of a [Policy]; [NewPolicy] checks and
// canonicalises them. The zero value is not valid (it has no Mode).
type PolicyParams struct {
	// Mode is required.
	Mode Mode
	// Workspace is the job's directory. Required for read_only and
	// workspace_write, optional for danger_full_access. Relative paths are
	// made absolute against the process's working directory, symlinks are
	// resolved; it must exist and be a directory. "/", system directories
	// (/usr, /etc, …), anything under /proc, /sys or /dev and paths with a
	// NUL byte are rejected.
	Workspace string
	// Cwd is the working directory of the command. Defaults to Workspace.
	// Canonicalised like Workspace, and it must be visible inside the
	// sandbox: under /tmp only inside the workspace or a writable root
	// (the sandbox's /tmp is a fresh tmpfs), never under /proc or /dev.
	Cwd string
	// Network true shares the host network (what jobs get by default);
	// false adds --unshare-net. The zero value (false) isolates. false is
	// refused for danger_full_access, which cannot isolate anything.
	// Either way a confined command makes sockets of AF_UNIX, AF_INET,
	// AF_INET6 and AF_NETLINK only (the seccomp layer): AF_VSOCK, which
	// no network namespace isolates, fails with EAFNOSUPPORT.
	Network bool
	// UnixSockets true lets the command create Unix sockets
	// (socket(AF_UNIX, ...)): the seccomp layer then lets the call
	// through, and the Landlock layer neither scopes abstract sockets nor
	// restricts connect(2) to path sockets made outside the sandbox. A
	// job with it can reach every host service behind a Unix socket it
	// can see (a path socket on the read-only root; an abstract one when
	// the network is shared). The zero value (false) refuses them;
	// socketpair(2) is allowed either way. danger_full_access always
	// has them.
	UnixSockets bool
	// Writable are extra writable roots (workspace_write only), bound
	// read-write at their own path after the workspace. Canonicalised and
	// checked like Workspace; duplicates are dropped. Defaults to none.
	Writable []string
	// Hide are directories made invisible to the command: each is covered
	// with an empty tmpfs after the read-only root and before any
	// workspace or writable root inside it is bound back, read-only when
	// it lies inside a root (elsewhere the job's writes to it reach
	// nothing outside the sandbox, as in /tmp) (paddock
	// hides its state directory this way, and binds a job's own default
	// workspace back inside it). Canonicalised like Workspace; they must
	// exist and be directories; "/", system directories and anything
	// under /proc, /sys or /dev are refused; duplicates are dropped.
	// Ignored for danger_full_access. Defaults to none.
	Hide []string
	// HideFiles are files made unreadable by the command: each is covered,
	// after every root is bound, with /dev/null bound read-only; bwrap's
	// binds are nodev, so opening it fails with EACCES, and a bind mount
	// point cannot be renamed or removed (EBUSY). Symlinks are resolved;
	// each must exist and not be a directory (use Hide); anything under
	// /proc, /sys or /dev is refused; duplicates are dropped. Ignored for
	// danger_full_access. Defaults to none.
	HideFiles []string
	// Protect are sub-paths kept read-only inside the writable roots
	// (workspace_write only; ignored otherwise): each relative entry
	// names a path below every root (a filepath.Match glob is expanded),
	// an absolute one itself; an entry ending in "/" is a directory. Each
	// is resolved as the host's tools reach it (symlinks and ".git"
	// files followed) and protected where it really is, when that is
	// inside a writable root: bound read-only onto itself, with every
	// directory between the root and it bound onto itself so that none
	// can be renamed away (EBUSY). A missing one is covered when its
	// parent exists and is not the root itself. The rules, and what they
	// leave behind, are in docs/policy.md. Defaults to none.
	Protect []string
}

// Policy is a checked, canonical sandbox policy built by [NewPolicy]. It is
// immutable and safe for concurrent use. The zero value is invalid:
// [Confine] refuses it.
type Policy struct {
	mode      Mode
	workspace string
	cwd       string
	network   bool
	unix      bool
	writable  []string
	hide      []string
	hideFiles []string
	protect   []protectMount
	links     []ProtectedLink
	repos     *gitRepos // nil when the policy protects no repository
	entries   []string  // the protect list resolved ([PolicyParams].Protect)
}

// Mode returns the policy's mode.
func (p Policy) Mode() Mode { return p.mode }

// Workspace returns the canonical workspace ("" only for danger_full_access
// without one).
func (p Policy) Workspace() string { return p.workspace }

// Cwd returns the canonical working directory of the command ("" only for
// danger_full_access without workspace or cwd: the caller's own).
func (p Policy) Cwd() string { return p.cwd }

// Network reports whether the host network is shared.
func (p Policy) Network() bool { return p.network }

// UnixSockets reports whether the command may create Unix sockets (see
// [PolicyParams].UnixSockets); always true for danger_full_access.
func (p Policy) UnixSockets() bool { return p.unix }

// Writable returns a copy of the canonical extra writable roots.
func (p Policy) Writable() []string { return slices.Clone(p.writable) }

// Hide returns a copy of the canonical hidden directories.
func (p Policy) Hide() []string { return slices.Clone(p.hide) }

// HideFiles returns a copy of the canonical hidden files.
func (p Policy) HideFiles() []string { return slices.Clone(p.hideFiles) }

// Protected returns the canonical paths the policy keeps read-only inside
// its writable roots ([PolicyParams].Protect, resolved), sorted; a path
// that did not exist is included (it is covered).
func (p Policy) Protected() []string {
	var out []string
	for _, m := range p.protect {
		if m.kind != protectKeep {
			out = append(out, m.path)
		}
	}
	return out
}

// protectPathsOf returns the protected paths of kind k, deepest first:
// the placeholders bwrap made (protectNewDir), removed after the command
// ([removePlaceholders]), or the missing paths watched (protectAbsent),
// whose creation is undone ([ProtectWatch], [moveCreatedUnder]).
func (p Policy) protectPathsOf(k protectKind) []string {
	var out []string
	for _, m := range slices.Backward(p.protect) {
		if m.kind == k {
			out = append(out, m.path)
		}
	}
	return out
}

// watchedPaths returns the missing protected paths, watched while the
// command runs and looked for after it: protectAbsent's and
// protectPending's, deepest first.
func (p Policy) watchedPaths() []string {
	return append(p.protectPathsOf(protectAbsent), p.protectPathsOf(protectPending)...)
}

// protectedLinks returns the symlinks inside the writable roots that lead
// to protected paths (see [ProtectedLink]): the caller checks each after
// the command has ended.
func (p Policy) protectedLinks() []ProtectedLink { return slices.Clone(p.links) }

// keepAroundHidden adds to pm (sorted, a directory before what it
// contains) a kept mount (bound onto itself, writable) for each directory
// between a writable root and a hidden path inside it (or a root inside
// it, whose binds a rename would carry away as well), as [resolveProtect]
// keeps the directories on the way to a protected path. A hidden path is
// covered in the sandbox's view only: a job that renamed a directory on
// its way would carry the cover along, leave the hidden path at a new
// name no later job's policy names, and could put a link to a decoy of
// its own at the old one for the next resolution to follow. A kept
// mount point cannot be renamed or removed (EBUSY). Directories that pm
// already mounts, or that lie below one of its read-only mounts (nothing
// can be renamed there), need nothing.
func keepAroundHidden(pm []protectMount, roots, hidden []string) []protectMount {
	have := make(map[string]bool, len(pm))
	for _, m := range pm {
		have[m.path] = true
	}
	n := len(pm)
	for _, h := range hidden {
		root := rootHolding(roots, h)
		if root == "" {
			continue
		}
		for a := filepath.Dir(h); a != root && Within(a, root); a = filepath.Dir(a) {
			if have[a] || slices.ContainsFunc(pm[:n], func(m protectMount) bool { return m.kind.readOnly() && a != m.path && Within(a, m.path) }) {
				continue
			}
			have[a] = true
			pm = append(pm, protectMount{path: a, kind: protectKeep})
		}
	}
	if len(pm) > n {
		slices.SortFunc(pm, func(a, b protectMount) int { return strings.Compare(a.path, b.path) })
	}
	return pm
}

// Roots returns the directories bound into the sandbox, in the order
// [ConfineParams].RootFDs follows: the workspace (read-only in read_only
// mode), then each writable root. Empty for danger_full_access.
func (p Policy) Roots() []string {
	if !p.mode.Confined() {
		return nil
	}
	return append([]string{p.workspace}, p.writable...)
}

// KeyError is a [NewPolicy] error about one of its parameters. Key names
// the parameter as a job file does ("workspace", "writable", "cwd",
// "network"), for a caller that says at which line of a file the error
// lies; Err is the error itself, which Error returns unchanged.
type KeyError struct {
	Key string
	Err error
}

func (e *KeyError) Error() string { return e.Err.Error() }

func (e *KeyError) Unwrap() error { return e.Err }

// keyed wraps err, when it is not nil, in a [KeyError] for key.
func keyed(key string, err error) error {
	if err == nil {
		return nil
	}
	return &KeyError{Key: key, Err: err}
}

// ErrBadPath is wrapped by every [NewPolicy] error about a path (missing,
// not a directory, "/", a system directory, NUL byte, hidden cwd).
var ErrBadPath = errors.New("bad path")

// systemDirs may not be a workspace or writable root themselves: binding
// one read-write hands the job the system. Their subdirectories are fine.
var systemDirs = []string{"/", "/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/usr", "/var", "/run"}

// SystemTrees are the host's directories whose whole tree the host runs
// or configures itself from (/etc/cron.d, /etc/systemd/system, /usr/bin,
// /var/spool/cron, /var/lib/dpkg, /run/systemd/system): a job that wrote
// there as a root worker's would have its code run by the host, outside
// every namespace. The queue's policy refuses a workspace_write root in
// one unless its workspace_roots name it (runner.Policy.Judge); unlike
// the system directories themselves, which no policy may bind writable,
// an operator may allow one deliberately.
var SystemTrees = []string{"/etc", "/usr", "/boot", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/run", "/var/spool", "/var/lib"}

// coveredByHide reports whether path lies in a hidden directory with no
// root bound back between them: the deepest of the hidden directories
// and roots around it is a hidden one. (A root inside a hidden directory
// shows its paths again, a hidden file in it among them.)
func (p Policy) coveredByHide(path string) bool {
	deepest, hidden := "", false
	for _, r := range p.Roots() {
		if Within(path, r) && len(r) > len(deepest) {
			deepest, hidden = r, false
		}
	}
	for _, h := range p.hide {
		if Within(path, h) && len(h) > len(deepest) {
			deepest, hidden = h, true
		}
	}
	return hidden
}

// IsSystemPath reports whether the canonical path c is "/", a system
// directory no root may be, lies under /proc, /sys or /dev, or lies in
// one of [SystemTrees]: a place whose hiding behind an empty tmpfs would
// break every job (a hidden path that a link made by a job leads to is
// not hidden there).
func IsSystemPath(c string) bool {
	if slices.Contains(systemDirs, c) {
		return true
	}
	for _, d := range append(slices.Clone(kernelDirs), SystemTrees...) {
		if Within(c, d) {
			return true
		}
	}
	return false
}

// kernelDirs and everything under them are refused as workspace, writable
// root or cwd: they are replaced inside the sandbox (/proc, /dev) or are
// kernel interfaces a writable bind would expose (/sys).
var kernelDirs = []string{"/proc", "/sys", "/dev"}

// NewPolicy checks p and returns the canonical policy. It touches the
// filesystem (Abs, EvalSymlinks, Stat) but runs nothing.
//
// # Errors
//
//   - the mode is not one of [Modes];
//   - workspace missing for a confined mode;
//   - a path that is empty, has a NUL byte, does not exist, is not a
//     directory, is "/" or a system directory, or lies under /proc, /sys or
//     /dev (these wrap [ErrBadPath]);
//   - a cwd the sandbox cannot show (wraps [ErrBadPath]);
//   - writable roots with a mode other than workspace_write;
//   - network = false with danger_full_access;
//   - a protected path that is a writable root or contains one (wraps
//     [ErrBadPath]).
//
// An error about the workspace, a writable root, the cwd or the network
// is a [*KeyError] naming it.
func NewPolicy(p PolicyParams) (Policy, error) {
	if _, err := ParseMode(string(p.Mode)); err != nil {
		return Policy{}, err
	}
	out := Policy{mode: p.Mode, network: p.Network, unix: p.UnixSockets || p.Mode == ModeDangerFullAccess}
	if p.Mode == ModeDangerFullAccess && !p.Network {
		return Policy{}, keyed("network", errors.New("sandbox: network = false needs a confined mode (read_only or workspace_write); danger_full_access cannot isolate the network"))
	}
	if len(p.Writable) > 0 && p.Mode != ModeWorkspaceWrite {
		return Policy{}, keyed("writable", fmt.Errorf("sandbox: writable roots need mode %s, not %s", ModeWorkspaceWrite, p.Mode))
	}
	if p.Workspace == "" && p.Mode.Confined() {
		return Policy{}, fmt.Errorf("sandbox: mode %s needs a workspace", p.Mode)
	}
	if p.Workspace != "" {
		ws, err := canonicalRoot("workspace", p.Workspace)
		if err != nil {
			return Policy{}, keyed("workspace", err)
		}
		out.workspace = ws
	}
	for _, w := range p.Writable {
		c, err := canonicalRoot("writable root", w)
		if err != nil {
			return Policy{}, keyed("writable", err)
		}
		if c != out.workspace && !slices.Contains(out.writable, c) {
			out.writable = append(out.writable, c)
		}
	}
	if p.Mode.Confined() {
		for _, h := range p.Hide {
			c, err := canonicalRoot("hidden path", h)
			if err != nil {
				return Policy{}, err
			}
			if slices.Contains(out.Roots(), c) {
				return Policy{}, fmt.Errorf("sandbox: %q is both hidden and bound into the sandbox: %w", c, ErrBadPath)
			}
			if !slices.Contains(out.hide, c) {
				out.hide = append(out.hide, c)
			}
		}
		for _, h := range p.HideFiles {
			c, err := canonicalFile("hidden file", h)
			if err != nil {
				return Policy{}, err
			}
			if out.coveredByHide(c) {
				continue // hidden with its directory already
			}
			if !slices.Contains(out.hideFiles, c) {
				out.hideFiles = append(out.hideFiles, c)
			}
		}
	}
	if p.Mode == ModeWorkspaceWrite {
		var pm []protectMount
		if len(p.Protect) > 0 {
			var err error
			out.entries = slices.Clone(p.Protect)
			if pm, out.links, out.repos, err = resolveProtect(out.Roots(), p.Protect); err != nil {
				if re := (*rootInProtectedError)(nil); errors.As(err, &re) {
					if re.root == out.workspace {
						return Policy{}, keyed("workspace", err)
					}
					return Policy{}, keyed("writable", err)
				}
				return Policy{}, err
			}
		}
		// A root inside another is kept in its place as a hidden path
		// is: a job that renamed a directory between the two would carry
		// the inner root's binds (its protected and hidden paths) away
		// and make new directories of its own at the inner root's name.
		pm = keepAroundHidden(pm, out.Roots(), slices.Concat(out.hide, out.hideFiles, out.Roots()))
		// What is hidden is out of reach already, and a hidden directory
		// inside a root is a read-only tmpfs that could take no mount
		// point.
		// (A root bound back inside a hidden directory shows its paths
		// again: what counts is the deepest of the two around a path.)
		out.protect = slices.DeleteFunc(pm, func(m protectMount) bool {
			return slices.Contains(out.hideFiles, m.path) || out.coveredByHide(m.path)
		})
	}
	cwd := p.Cwd
	if cwd == "" || cwd == p.Workspace {
		// The workspace itself (the usual case), canonical and checked
		// above: resolving it again would walk its path a second time.
		out.cwd = out.workspace
		return out, nil
	}
	c, err := canonicalDir("cwd", cwd)
	if err != nil {
		return Policy{}, keyed("cwd", err)
	}
	if p.Mode.Confined() {
		if err := out.visible(c); err != nil {
			return Policy{}, keyed("cwd", err)
		}
	}
	out.cwd = c
	return out, nil
}

// visible checks that dir (canonical) is shown inside the sandbox at the
// same path, whatever the grade.
func (p Policy) visible(dir string) error {
	if p.inBind(dir) {
		return nil
	}
	for _, h := range p.hide {
		if Within(dir, h) {
			return fmt.Errorf("sandbox: cwd %q is under %s, which is hidden from the command: %w", dir, h, ErrBadPath)
		}
	}
	for _, k := range kernelDirs {
		if Within(dir, k) {
			return fmt.Errorf("sandbox: cwd %q is under %s, which the sandbox replaces: %w", dir, k, ErrBadPath)
		}
	}
	if Within(dir, "/tmp") {
		return fmt.Errorf("sandbox: cwd %q is under /tmp, which is a fresh tmpfs inside the sandbox; use a directory inside the workspace or a writable root: %w", dir, ErrBadPath)
	}
	return nil
}

// inBind reports whether dir is the workspace, a writable root, or under
// one of them.
func (p Policy) inBind(dir string) bool {
	if p.workspace != "" && Within(dir, p.workspace) {
		return true
	}
	for _, w := range p.writable {
		if Within(dir, w) {
			return true
		}
	}
	return false
}

// Within reports whether path is dir or below it (both clean and
// absolute); everything is within "/".
func Within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// rootHolding returns the deepest of roots that holds p below it (p
// itself not counted), or "" when none does.
func rootHolding(roots []string, p string) string {
	root := ""
	for _, r := range roots {
		if p != r && Within(p, r) && len(r) > len(root) {
			root = r
		}
	}
	return root
}

// canonicalRoot is canonicalDir plus the checks for a directory that gets
// bound into the sandbox.
func canonicalRoot(field, raw string) (string, error) {
	c, err := canonicalDir(field, raw)
	if err != nil {
		return "", err
	}
	if c == "/" {
		return "", fmt.Errorf("sandbox: %s %q is the root directory; that would make the whole system writable: %w", field, raw, ErrBadPath)
	}
	if slices.Contains(systemDirs, c) {
		if slices.Contains(SystemTrees, c) {
			return "", fmt.Errorf("sandbox: %s %q is the system directory %s, whose tree the host runs or configures itself from: a job may not write there, nor in a directory below it that the queue's policy does not list in workspace_roots: %w", field, raw, c, ErrBadPath)
		}
		return "", fmt.Errorf("sandbox: %s %q is the system directory %s; use a directory below it: %w", field, raw, c, ErrBadPath)
	}
	for _, k := range kernelDirs {
		if Within(c, k) {
			return "", fmt.Errorf("sandbox: %s %q is under %s, which cannot be bound into the sandbox: %w", field, raw, k, ErrBadPath)
		}
	}
	return c, nil
}

// canonicalFile makes raw absolute, resolves symlinks and checks that it
// exists, is not a directory and is not under a kernel directory.
func canonicalFile(field, raw string) (string, error) {
	if raw == "" || strings.ContainsRune(raw, 0) {
		return "", fmt.Errorf("sandbox: %s %q is empty or contains a NUL byte: %w", field, raw, ErrBadPath)
	}
	c, err := Canonical(raw)
	if err != nil {
		return "", fmt.Errorf("sandbox: %s %q: %w: %w", field, raw, ErrBadPath, err)
	}
	fi, err := os.Stat(c)
	if err != nil {
		return "", fmt.Errorf("sandbox: %s %q: %w: %w", field, raw, ErrBadPath, err)
	}
	if fi.IsDir() {
		return "", fmt.Errorf("sandbox: %s %q is a directory: %w", field, raw, ErrBadPath)
	}
	for _, k := range kernelDirs {
		if Within(c, k) {
			return "", fmt.Errorf("sandbox: %s %q is under %s: %w", field, raw, k, ErrBadPath)
		}
	}
	return c, nil
}

// canonicalDir makes raw absolute, resolves symlinks and checks that it is
// an existing directory.
func canonicalDir(field, raw string) (string, error) {
	if raw == "" {
		return "", fmt.Errorf("sandbox: %s is empty: %w", field, ErrBadPath)
	}
	if strings.ContainsRune(raw, 0) {
		return "", fmt.Errorf("sandbox: %s %q contains a NUL byte: %w", field, raw, ErrBadPath)
	}
	abs, err := filepath.Abs(raw)
	if err != nil {
		return "", fmt.Errorf("sandbox: %s %q: %w: %w", field, raw, ErrBadPath, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("sandbox: %s %q does not exist: %w", field, raw, ErrBadPath)
		}
		return "", fmt.Errorf("sandbox: %s %q: %w: %w", field, raw, ErrBadPath, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("sandbox: %s %q: %w: %w", field, raw, ErrBadPath, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("sandbox: %s %q is not a directory: %w", field, raw, ErrBadPath)
	}
	return real, nil
}

// Canonical returns path made absolute (against the process's working
// directory) with every symlink resolved, as [NewPolicy] resolves a
// workspace or root. The path must exist. It reads the file system and
// is safe for concurrent use.
func Canonical(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("sandbox: %w", err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("sandbox: %w", err)
	}
	return real, nil
}

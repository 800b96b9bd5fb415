package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrRootChanged is wrapped by [PinRoots] when a root's path no longer
// leads to a directory without symlinks: something replaced a component
// of it since the policy was built (a concurrent job, typically).
var ErrRootChanged = errors.New("changed while it was being checked")

// Pinned holds one open descriptor per root of a [Policy]
// ([Policy.Roots] order), each opened without following any symlink.
// Bind them with [ConfineParams].RootFDs: what bwrap binds is then the
// directory checked, not whatever a path leads to later. Close releases
// the descriptors. A Pinned is not safe for concurrent use.
type Pinned struct {
	files   []*os.File
	protect []*os.File
}

// Files returns the descriptors in [Policy.Roots] order (none for a nil
// Pinned). The caller must not close them (use [Pinned.Close]).
func (p *Pinned) Files() []*os.File {
	if p == nil {
		return nil
	}
	return p.files
}

// Protected returns the descriptors of the policy's protected paths that
// exist (each kept directory and read-only path, in the order
// [ConfineParams].ProtectFDs follows). The caller must not close them.
func (p *Pinned) Protected() []*os.File {
	if p == nil {
		return nil
	}
	return p.protect
}

// Close closes every descriptor. It is safe to call more than once, and
// on a nil Pinned.
func (p *Pinned) Close() {
	if p == nil {
		return
	}
	for _, f := range p.files {
		f.Close()
	}
	for _, f := range p.protect {
		f.Close()
	}
	p.files, p.protect = nil, nil
}

// PinRoots opens every root of pol (O_PATH, O_DIRECTORY, close-on-exec),
// and then every protected path of pol that exists ([Pinned.Protected]),
// by its canonical path, resolving it with openat2(2)'s
// RESOLVE_NO_SYMLINKS and RESOLVE_NO_MAGICLINKS (on kernels before 5.6,
// an O_NOFOLLOW walk, one component at a time): a symlink anywhere on the
// path is an error, never followed. The canonical path was resolved when
// the policy was built, so a symlink found now was put there since.
//
// # Errors
//
//   - a root that is no longer a directory, or reached through a symlink
//     (wraps [ErrRootChanged]);
//   - a root that no longer exists or cannot be opened.
func PinRoots(pol Policy) (*Pinned, error) {
	pp := &Pinned{}
	for _, r := range pol.Roots() {
		f, err := OpenNoSymlinks(r)
		if err != nil {
			pp.Close()
			return nil, err
		}
		pp.files = append(pp.files, f)
	}
	for _, m := range pol.protect {
		if !m.kind.pinned() {
			continue
		}
		f, err := openNoSymlinksKind(m.path, m.kind != protectFile, false)
		if err != nil {
			pp.Close()
			return nil, fmt.Errorf("%w (a protected path)", err)
		}
		pp.protect = append(pp.protect, f)
	}
	return pp, nil
}

// OpenNoSymlinks opens the directory at the absolute path dir as an
// O_PATH descriptor without following any symlink on the way (see
// [PinRoots]). The error wraps [ErrRootChanged] when a component is a
// symlink or not a directory.
func OpenNoSymlinks(dir string) (*os.File, error) { return openNoSymlinks(dir, false) }

// openNoSymlinks is OpenNoSymlinks; walk forces the walk used on kernels
// without openat2 (for tests).
func openNoSymlinks(dir string, walk bool) (*os.File, error) {
	return openNoSymlinksKind(dir, true, walk)
}

// openNoSymlinksKind is openNoSymlinks for a directory (isDir) or for
// anything but a directory: a final component that is a symlink, or not
// of that kind, wraps [ErrRootChanged] too.
func openNoSymlinksKind(dir string, isDir, walk bool) (*os.File, error) {
	if !strings.HasPrefix(dir, "/") {
		return nil, fmt.Errorf("sandbox: %q is not an absolute path", dir)
	}
	flags := unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW
	if isDir {
		flags |= unix.O_DIRECTORY
	}
	how := &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := -1, error(unix.ENOSYS)
	if !walk {
		fd, err = unix.Openat2(unix.AT_FDCWD, dir, how)
		for err == unix.EINTR || err == unix.EAGAIN {
			fd, err = unix.Openat2(unix.AT_FDCWD, dir, how)
		}
	}
	if err == unix.ENOSYS || err == unix.EPERM {
		// No openat2 (Linux < 5.6), or a seccomp policy that refuses it.
		fd, err = walkNoSymlinks(dir, flags)
	}
	if err != nil {
		if err == unix.ELOOP || err == unix.ENOTDIR {
			return nil, fmt.Errorf("sandbox: %s: a component is now a symlink or not a directory: %w", dir, ErrRootChanged)
		}
		return nil, fmt.Errorf("sandbox: open %s: %w", dir, err)
	}
	if !isDir {
		// O_PATH|O_NOFOLLOW opens a final symlink itself rather than
		// failing; a directory is refused for a file's pin.
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			unix.Close(fd)
			return nil, fmt.Errorf("sandbox: %s: now a symlink or a directory: %w", dir, ErrRootChanged)
		}
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// walkNoSymlinks is OpenNoSymlinks for kernels without openat2: one
// openat(2) per component with O_NOFOLLOW, each relative to the last.
func walkNoSymlinks(dir string, flags int) (int, error) {
	fd, err := unix.Open("/", flags|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, err
	}
	parts := strings.Split(strings.Trim(dir, "/"), "/")
	for i, c := range parts {
		if c == "" || c == "." {
			continue
		}
		if c == ".." {
			unix.Close(fd)
			return -1, unix.ELOOP
		}
		f := flags
		if i < len(parts)-1 {
			f |= unix.O_DIRECTORY
		}
		next, err := unix.Openat(fd, c, f, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

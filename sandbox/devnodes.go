package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// A job of a worker that runs as root runs as host uid 0 (bwrap maps its
// uid onto the caller's), with no capabilities. It owns every file root
// owns, and an owner may chmod(2) and utimensat(2) a file without one:
// through the device nodes bwrap binds into the sandbox read-write
// (--dev's /dev/null, /dev/zero, ... and the partial grade's --dev-bind),
// such a job could set the host's /dev/null to mode 0000 or change its
// times. A read-only bind would stop that, but bwrap makes every
// read-only bind nodev, which makes a device unusable.
//
// Instead the job gets substitutes: device nodes with the same numbers,
// mode 0666, owned by nobody (uid and gid 65534), made once in a
// directory of the state directory (root's, hidden from every job) and
// bound over bwrap's. Reads and writes reach the same devices; chmod,
// chown and setting times fail with EPERM, since the job is not their
// owner and has no CAP_FOWNER.

// substituteNodes are the device nodes bwrap's --dev binds from the host
// (bubblewrap.c, "devnodes"), substituted at the full grade; the partial
// grade binds [devNodes], the same less /dev/tty.
var substituteNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// nobodyID is the owner of the substitutes: the overflow uid and gid,
// which owns nothing else a job could reach.
const nobodyID = 65534

// DevNull returns the substitute /dev/null in dir (a directory
// [PrepareDeviceNodes] made): what a job running as host root reads as
// its stdin, so that not even a descriptor it inherits is a host node it
// owns.
func DevNull(dir string) string { return filepath.Join(dir, "null") }

// PrepareDeviceNodes makes dir hold the substitutes for the device nodes a
// sandbox binds from the host ([ConfineParams].DeviceNodes): for each of
// null, zero, full, random, urandom and tty in the host's /dev, a
// character device with the same device number, mode 0666, owned by uid
// and gid 65534. It creates dir (mode 0755) when missing; a substitute
// that is already right is kept, and anything else at its name is
// replaced. It needs root (CAP_MKNOD, CAP_CHOWN), and dir must be on a
// file system that allows devices (not mounted nodev): it checks that the
// substitute /dev/null opens for writing.
//
// Errors: the host's node is missing or not a character device; dir
// cannot be created, or is not a directory or a symlink (refused); a node
// cannot be made, or the file system will not open it (nodev). Safe for
// concurrent use by processes sharing dir: each node is made under a
// temporary name and renamed into place.
func PrepareDeviceNodes(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sandbox: device nodes: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("sandbox: device nodes: %s is not a directory", dir)
	}
	for _, n := range substituteNodes {
		var host unix.Stat_t
		if err := unix.Stat("/dev/"+n, &host); err != nil {
			return fmt.Errorf("sandbox: device nodes: /dev/%s: %w", n, err)
		}
		if host.Mode&unix.S_IFMT != unix.S_IFCHR {
			return fmt.Errorf("sandbox: device nodes: /dev/%s is not a character device", n)
		}
		p := filepath.Join(dir, n)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err == nil && st.Mode == unix.S_IFCHR|0o666 && st.Rdev == host.Rdev &&
			st.Uid == nobodyID && st.Gid == nobodyID {
			continue
		}
		tmp := fmt.Sprintf("%s.%d.tmp", p, os.Getpid())
		_ = os.Remove(tmp)
		if err := unix.Mknod(tmp, unix.S_IFCHR|0o666, int(host.Rdev)); err != nil {
			return fmt.Errorf("sandbox: device nodes: mknod %s: %w", tmp, err)
		}
		// mknod applies the umask; the mode is set again, then the owner.
		err := unix.Chmod(tmp, 0o666)
		if err == nil {
			err = unix.Lchown(tmp, nobodyID, nobodyID)
		}
		if err == nil {
			err = os.Rename(tmp, p)
		}
		if err != nil {
			_ = os.Remove(tmp)
			return fmt.Errorf("sandbox: device nodes: %s: %w", p, err)
		}
	}
	f, err := os.OpenFile(DevNull(dir), os.O_WRONLY, 0)
	if err != nil {
		if errors.Is(err, unix.EACCES) {
			return fmt.Errorf("sandbox: device nodes: %s is on a file system mounted nodev: %w", dir, err)
		}
		return fmt.Errorf("sandbox: device nodes: %w", err)
	}
	return f.Close()
}

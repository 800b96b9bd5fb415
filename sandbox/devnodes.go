package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

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

// A DeviceNamespace starts processes in a mount namespace of their own
// (one for the whole worker, made once) in which the substitutes of a
// [PrepareDeviceNodes] directory are bound over the host's /dev/null,
// /dev/zero, /dev/full, /dev/random, /dev/urandom and /dev/tty. bwrap
// started there binds the substitutes where it binds the host's nodes
// (--dev, the partial grade's --dev-bind /dev/N), so the argv needs no
// bind of its own for them ([ConfineParams].DeviceNodes ""): each bwrap
// bind re-reads the whole mount table, about 0.2 ms of every job, six
// of them per job saved.
//
// The namespace belongs to one OS thread that a goroutine holds for the
// process's lifetime (runtime.LockOSThread, never unlocked): it unshares
// its file-system attributes and mount namespace (unshare(2), CLONE_FS |
// CLONE_NEWNS), makes every mount a slave of the host's (mount(2)
// MS_SLAVE: host mounts made later still appear; nothing made here
// reaches the host), then binds the substitutes. A process it starts is
// forked from that thread, so it inherits the namespace; so is the
// parent-death signal (PR_SET_PDEATHSIG follows the forking thread, which
// never ends before the process does). Nothing else in the process runs
// on that thread.
type DeviceNamespace struct {
	starts chan deviceStart
}

type deviceStart struct {
	cmd  *exec.Cmd
	done chan error
}

// NewDeviceNamespace makes the namespace for dir (a directory
// [PrepareDeviceNodes] filled) and the goroutine that starts processes in
// it. It needs root (CAP_SYS_ADMIN for unshare and mount).
//
// Errors: unshare, the change to slave or a bind fails, or the
// namespace's /dev/null afterwards is not dir's substitute (owner
// 65534); the thread is then discarded with its goroutine and nothing is
// left behind on the host. Safe for concurrent use; it lives until the
// process exits.
func NewDeviceNamespace(dir string) (*DeviceNamespace, error) {
	ns := &DeviceNamespace{starts: make(chan deviceStart)}
	ready := make(chan error)
	go ns.serve(dir, ready)
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("sandbox: device namespace: %w", err)
	}
	return ns, nil
}

// Start starts cmd (cmd.Start) in the namespace and returns its error.
// The caller waits for it as usual (cmd.Wait, from any goroutine).
func (ns *DeviceNamespace) Start(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	ns.starts <- deviceStart{cmd: cmd, done: done}
	return <-done
}

// serve runs on its own locked thread; it returns only when the
// namespace could not be made, which ends the thread (a goroutine that
// exits locked takes its thread with it).
func (ns *DeviceNamespace) serve(dir string, ready chan<- error) {
	runtime.LockOSThread()
	if err := enterDeviceNamespace(dir); err != nil {
		ready <- err
		return
	}
	ready <- nil
	for s := range ns.starts {
		s.done <- s.cmd.Start()
	}
}

// enterDeviceNamespace moves the calling thread into a new mount
// namespace with dir's substitutes over the host's nodes.
func enterDeviceNamespace(dir string) error {
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make / a slave: %w", err)
	}
	for _, n := range substituteNodes {
		if err := unix.Mount(filepath.Join(dir, n), "/dev/"+n, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s over /dev/%s: %w", filepath.Join(dir, n), n, err)
		}
		var st unix.Stat_t
		if err := unix.Stat("/dev/"+n, &st); err != nil || st.Uid != nobodyID {
			return fmt.Errorf("/dev/%s is not the substitute after the bind", n)
		}
	}
	return nil
}

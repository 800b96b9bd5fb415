package sandbox

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"

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
// and gid 65534. It creates dir when missing and makes its mode 0700 (only
// root reaches the substitutes: nobody, their owner, could change them); a substitute
// that is already right is kept, and anything else at its name is
// replaced. It needs root (CAP_MKNOD, CAP_CHOWN), and dir must be on a
// file system that allows devices (not mounted nodev): it checks that the
// substitute /dev/null opens for writing.
//
// Errors: the host's node is missing or not a character device; dir
// cannot be created, or is not a directory or a symlink (refused); a node
// cannot be made, or the file system will not open it (nodev). Safe for
// concurrent use, by goroutines and processes sharing dir: each node is
// made under a temporary name of its own and renamed into place.
func PrepareDeviceNodes(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("sandbox: device nodes: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("sandbox: device nodes: %s is not a directory", dir)
	}
	// Only root reaches the substitutes: nobody, their owner, could
	// change their mode otherwise.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("sandbox: device nodes: %w", err)
	}
	for _, n := range substituteNodes {
		host, err := hostDevice(n)
		if err != nil {
			return err
		}
		p := filepath.Join(dir, n)
		right := func() bool {
			var st unix.Stat_t
			return unix.Lstat(p, &st) == nil && st.Mode == unix.S_IFCHR|0o666 && st.Rdev == host.Rdev &&
				st.Uid == nobodyID && st.Gid == nobodyID
		}
		if right() {
			continue
		}
		// A name of its own: jobs of one worker prepare at once.
		tmp := fmt.Sprintf("%s.%d.%x.tmp", p, os.Getpid(), rand.Uint64())
		if err := unix.Mknod(tmp, unix.S_IFCHR|0o666, int(host.Rdev)); err != nil {
			return fmt.Errorf("sandbox: device nodes: mknod %s: %w", tmp, err)
		}
		// mknod applies the umask; the mode is set again, then the owner.
		err = unix.Chmod(tmp, 0o666)
		if err == nil {
			err = unix.Lchown(tmp, nobodyID, nobodyID)
		}
		if err == nil {
			// A right node another job made meanwhile is kept: a running
			// job's namespace may have it bound, and replacing it would
			// leave that bind on an unlinked node bwrap cannot bind.
			err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, p, unix.RENAME_NOREPLACE)
			if errors.Is(err, unix.EEXIST) {
				if right() {
					err = os.Remove(tmp)
				} else {
					err = os.Rename(tmp, p)
				}
			}
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

// hostDevice stats the host's /dev/n, which must be a character device:
// the node whose device number a substitute or a job's own node takes.
func hostDevice(n string) (unix.Stat_t, error) {
	var host unix.Stat_t
	if err := unix.Stat("/dev/"+n, &host); err != nil {
		return host, fmt.Errorf("sandbox: device nodes: /dev/%s: %w", n, err)
	}
	if host.Mode&unix.S_IFMT != unix.S_IFCHR {
		return host, fmt.Errorf("sandbox: device nodes: /dev/%s is not a character device", n)
	}
	return host, nil
}

// StartWithDeviceNodes starts cmd (cmd.Start) in a mount namespace of its
// own made for it, in which a job's devices are ready for bwrap without a
// bind in its argv: each bwrap bind re-reads the whole mount table, about
// 0.2 ms of every job, while a mount made here costs a system call.
//
// With tree false, the substitutes of dir (a [PrepareDeviceNodes]
// directory) are bound over the host's /dev/null, /dev/zero, /dev/full,
// /dev/random, /dev/urandom and /dev/tty, and bwrap binds them where it
// binds the host's nodes (the partial grade's --dev-bind /dev/N;
// [ConfineParams].DeviceNodes ""). With tree true, a whole /dev is made
// at dir instead, for bwrap to bind as the job's /dev at the full grade
// ([ConfineParams].DevTree, in place of --dev): what --dev makes
// (bubblewrap.c, SETUP_MOUNT_DEV), on a tmpfs of the job's own: the six
// nodes, made with the host's device numbers, mode 0666 and nobody as
// owner (like the substitutes: a job running as host root cannot change
// them), the stdin, stdout, stderr, fd and core symlinks, an empty shm
// directory, and a new devpts instance at pts with ptmx linked to it. The
// nodes are the job's own inodes, gone with its sandbox.
//
// The namespace is made afresh for each process, as bwrap makes its own,
// from the host's mount table as it is then: a namespace kept for longer
// would show, on a host whose mounts do not propagate (private), a file
// system unmounted since, and miss one mounted since. It belongs to a new
// OS thread (runtime.LockOSThread, never unlocked): it unshares its
// file-system attributes and mount namespace (unshare(2), CLONE_FS |
// CLONE_NEWNS), makes every mount a slave of the host's (mount(2)
// MS_SLAVE: nothing made there reaches the host), makes the devices and
// checks them, then forks cmd. The thread lives until release is called,
// which the caller does once cmd has been waited for: cmd's parent-death
// signal (PR_SET_PDEATHSIG) follows the thread that forked it. Nothing
// else runs on that thread.
//
// It needs root (CAP_SYS_ADMIN, CAP_MKNOD). Errors: unshare, the change
// to slave, a mount, a node or a check fails, or cmd.Start's; nothing is
// left behind then (the thread ends with its namespace). Safe for
// concurrent use.
func StartWithDeviceNodes(dir string, tree bool, cmd *exec.Cmd) (release func(), err error) {
	started := make(chan error)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		err := enterDeviceNamespace(dir, tree)
		if err == nil {
			err = cmd.Start()
		}
		started <- err
		if err == nil {
			<-done
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }, nil
}

// enterDeviceNamespace moves the calling thread into a new mount
// namespace with dir's substitutes over the host's nodes, or, with tree,
// a whole /dev made at dir ([makeDevTree]).
func enterDeviceNamespace(dir string, tree bool) error {
	if err := unix.Unshare(unix.CLONE_FS | unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("sandbox: device nodes: unshare: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("sandbox: device nodes: make / a slave: %w", err)
	}
	if tree {
		return makeDevTree(dir)
	}
	for _, n := range substituteNodes {
		src := filepath.Join(dir, n)
		if err := unix.Mount(src, "/dev/"+n, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("sandbox: device nodes: bind %s over /dev/%s: %w", src, n, err)
		}
		var st unix.Stat_t
		if err := unix.Stat("/dev/"+n, &st); err != nil || st.Uid != nobodyID || st.Mode != unix.S_IFCHR|0o666 {
			return fmt.Errorf("sandbox: device nodes: /dev/%s is not a substitute of mode 0666 owned by %d after the bind", n, nobodyID)
		}
	}
	return nil
}

// devTreeLinks are the symlinks bwrap's --dev makes in a fresh /dev
// (bubblewrap.c, SETUP_MOUNT_DEV), name and target.
var devTreeLinks = [][2]string{
	{"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
	{"fd", "/proc/self/fd"}, {"core", "/proc/kcore"}, {"ptmx", "pts/ptmx"},
}

// makeDevTree mounts, in the calling thread's own mount namespace, a
// tmpfs over dir holding what bwrap's --dev makes ([StartWithDeviceNodes]).
// The tmpfs is nosuid but allows devices; the job cannot make one of its
// own there (mknod(2) of a device needs CAP_MKNOD in the host's user
// namespace).
func makeDevTree(dir string) error {
	fail := func(what string, err error) error {
		return fmt.Errorf("sandbox: device nodes: %s: %w", what, err)
	}
	// The thread's own umask (CLONE_FS), cleared so that the modes below
	// are exact, and set back before bwrap is forked from this thread:
	// the job inherits it.
	defer unix.Umask(unix.Umask(0))
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
		return fail("mount a tmpfs for /dev on "+dir, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fail("open "+dir, err)
	}
	defer d.Close()
	dfd := int(d.Fd())
	var root unix.Statfs_t
	if err := unix.Fstatfs(dfd, &root); err != nil || root.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("sandbox: device nodes: %s is not the tmpfs just mounted there", dir)
	}
	for _, n := range substituteNodes {
		host, err := hostDevice(n)
		if err != nil {
			return err
		}
		if err := unix.Mknodat(dfd, n, unix.S_IFCHR|0o666, int(host.Rdev)); err != nil {
			return fail("mknod "+n, err)
		}
		// Owned by nobody, like the substitutes: the job reads and writes
		// them but cannot change their mode or times.
		if err := unix.Fchownat(dfd, n, nobodyID, nobodyID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fail("chown "+n, err)
		}
	}
	for _, l := range devTreeLinks {
		if err := unix.Symlinkat(l[1], dfd, l[0]); err != nil {
			return fail("symlink "+l[0], err)
		}
	}
	for _, sub := range []string{"shm", "pts"} {
		if err := unix.Mkdirat(dfd, sub, 0o755); err != nil {
			return fail("mkdir "+sub, err)
		}
	}
	pts := filepath.Join(dir, "pts")
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"); err != nil {
		return fail("mount devpts on "+pts, err)
	}
	return nil
}

// CheckDeviceNamespace reports whether [StartWithDeviceNodes] works here
// for dir, in both of its forms: it makes each namespace on a throw-away
// thread. Errors are enterDeviceNamespace's (no CAP_SYS_ADMIN, say).
func CheckDeviceNamespace(dir string) error {
	for _, tree := range []bool{false, true} {
		errc := make(chan error)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
			errc <- enterDeviceNamespace(dir, tree)
		}()
		if err := <-errc; err != nil {
			return err
		}
	}
	return nil
}

package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// syscallProbeArg makes this test binary run syscallProbe (see TestMain)
// instead of its tests: inside a sandbox, it tries each call of the
// seccomp program and prints what the kernel answered.
const syscallProbeArg = "__syscall-probe"

// syscallProbe makes each call with arguments that a kernel without the
// filter answers differently (an error of its own, or success) and
// prints a JSON object: call name → errno (0 = success).
func syscallProbe() {
	errno := func(_, _ uintptr, e syscall.Errno) int { return int(e) }
	high := uintptr(1) << 32 // garbage in the upper half of a 32-bit argument
	var c byte
	out := map[string]int{}
	closeIfOK := func(r, _ uintptr, e syscall.Errno) int {
		if e == 0 {
			unix.Close(int(r))
		}
		return int(e)
	}
	out["socket AF_UNIX"] = closeIfOK(unix.RawSyscall(unix.SYS_SOCKET, unix.AF_UNIX, unix.SOCK_STREAM, 0))
	out["socket AF_UNIX, upper half set"] = closeIfOK(unix.RawSyscall(unix.SYS_SOCKET, high|unix.AF_UNIX, unix.SOCK_STREAM, 0))
	out["socket AF_INET"] = closeIfOK(unix.RawSyscall(unix.SYS_SOCKET, unix.AF_INET, unix.SOCK_STREAM, 0))
	out["socket AF_INET, upper half set"] = closeIfOK(unix.RawSyscall(unix.SYS_SOCKET, high|unix.AF_INET, unix.SOCK_STREAM, 0))
	out["socket AF_INET6"] = closeIfOK(unix.RawSyscall(unix.SYS_SOCKET, unix.AF_INET6, unix.SOCK_DGRAM, 0))
	out["socket AF_NETLINK"] = closeIfOK(unix.RawSyscall(unix.SYS_SOCKET, unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE))
	// Without the filter: a vsock socket where the kernel has vsock (no
	// capability needed), EPERM for AF_PACKET (CAP_NET_RAW).
	out["socket AF_VSOCK"] = closeIfOK(unix.RawSyscall(unix.SYS_SOCKET, unix.AF_VSOCK, unix.SOCK_STREAM, 0))
	out["socket AF_VSOCK, upper half set"] = closeIfOK(unix.RawSyscall(unix.SYS_SOCKET, high|unix.AF_VSOCK, unix.SOCK_STREAM, 0))
	out["socket AF_ALG"] = closeIfOK(unix.RawSyscall(unix.SYS_SOCKET, unix.AF_ALG, unix.SOCK_SEQPACKET, 0))
	out["socket AF_PACKET"] = closeIfOK(unix.RawSyscall(unix.SYS_SOCKET, unix.AF_PACKET, unix.SOCK_RAW, 0))
	var pair [2]int32
	closePair := func(_, _ uintptr, e syscall.Errno) int {
		if e == 0 {
			unix.Close(int(pair[0]))
			unix.Close(int(pair[1]))
		}
		return int(e)
	}
	out["socketpair AF_UNIX"] = closePair(unix.RawSyscall6(unix.SYS_SOCKETPAIR, unix.AF_UNIX, unix.SOCK_STREAM, 0, uintptr(unsafe.Pointer(&pair)), 0, 0))
	out["socketpair AF_VSOCK"] = closePair(unix.RawSyscall6(unix.SYS_SOCKETPAIR, unix.AF_VSOCK, unix.SOCK_STREAM, 0, uintptr(unsafe.Pointer(&pair)), 0, 0))
	// fd 0 is /dev/null: without the filter, ENOTTY.
	out["ioctl TIOCSTI"] = errno(unix.RawSyscall(unix.SYS_IOCTL, 0, unix.TIOCSTI, uintptr(unsafe.Pointer(&c))))
	out["ioctl TIOCSTI, upper half set"] = errno(unix.RawSyscall(unix.SYS_IOCTL, 0, high|unix.TIOCSTI, uintptr(unsafe.Pointer(&c))))
	out["ioctl TIOCLINUX"] = errno(unix.RawSyscall(unix.SYS_IOCTL, 0, unix.TIOCLINUX, uintptr(unsafe.Pointer(&c))))
	out["ioctl TCGETS"] = errno(unix.RawSyscall(unix.SYS_IOCTL, 0, unix.TCGETS, uintptr(unsafe.Pointer(&[64]byte{}))))
	// Without the filter keyctl answers with the session keyring's id.
	out["keyctl"] = errno(unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0))
	typ, desc, payload := []byte("user\x00"), []byte("paddock-probe\x00"), []byte("x")
	out["add_key"] = errno(unix.RawSyscall6(unix.SYS_ADD_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])),
		uintptr(unsafe.Pointer(&payload[0])), 1, uintptr(0xfffffffe), 0))
	out["request_key"] = errno(unix.RawSyscall6(unix.SYS_REQUEST_KEY, uintptr(unsafe.Pointer(&typ[0])), uintptr(unsafe.Pointer(&desc[0])), 0, 0, 0, 0))
	// CLONE_FS with CLONE_NEWUSER is EINVAL without the filter: no child
	// is ever made.
	out["clone CLONE_NEWUSER"] = errno(unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_FS, 0, 0, 0, 0, 0))
	out["clone3"] = errno(unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0))
	out["unshare CLONE_NEWUSER"] = errno(unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER|unix.CLONE_FS|unix.CLONE_NEWNS|unix.CLONE_SYSVSEM, 0, 0))
	out["setns"] = errno(unix.RawSyscall(unix.SYS_SETNS, ^uintptr(0), 0, 0))
	// A NULL params pointer: EFAULT without the filter.
	out["io_uring_setup"] = errno(unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, 0, 0))
	out["io_uring_enter"] = errno(unix.RawSyscall6(unix.SYS_IO_URING_ENTER, ^uintptr(0), 0, 0, 0, 0, 0))
	out["bpf"] = errno(unix.RawSyscall(unix.SYS_BPF, ^uintptr(0), 0, 0))
	out["perf_event_open"] = errno(unix.RawSyscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0))
	out["userfaultfd"] = closeIfOK(unix.RawSyscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|1 /* UFFD_USER_MODE_ONLY */, 0, 0))
	out["mount"] = errno(unix.RawSyscall6(unix.SYS_MOUNT, 0, 0, 0, 0, 0, 0))
	out["fsopen"] = errno(unix.RawSyscall(unix.SYS_FSOPEN, 0, 0, 0))
	out["open_tree"] = errno(unix.RawSyscall(unix.SYS_OPEN_TREE, ^uintptr(0), 0, 0))
	out["syslog"] = errno(unix.RawSyscall(unix.SYS_SYSLOG, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, 0, 0))
	out["getpid"] = errno(unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0))
	if x32, ok := x32Getpid(); ok {
		out["x32 getpid"] = errno(unix.RawSyscall(x32, 0, 0, 0))
	}
	b, _ := json.Marshal(out)
	fmt.Println(string(b))
	os.Exit(0)
}

// x32Getpid is getpid(2) as an x32 call on x86-64 (__X32_SYSCALL_BIT |
// 39), and false elsewhere.
func x32Getpid() (uintptr, bool) {
	if _, ok := seccompArchs["amd64"]; ok && unix.SYS_GETPID == 39 {
		return x32SyscallBit | 39, true
	}
	return 0, false
}

// TestSeccompInBwrap hands the seccomp program to real bwrap on a
// descriptor (--seccomp), with nothing else of paddock's argv, and
// makes each refused call from inside: each fails as the program says
// (EPERM, clone3 ENOSYS), the kernel's own answer would differ, and the
// calls a job needs work. With unix_sockets, socket(AF_UNIX) works.
// Both as this user and, as root, as nobody.
func TestSeccompInBwrap(t *testing.T) {
	rep := requireBwrap(t)
	for _, u := range whos() {
		for _, unixSockets := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/unix_sockets=%v", u.name, unixSockets), func(t *testing.T) {
				t.Parallel()
				prog, err := SeccompBytes(SeccompParams{UnixSockets: unixSockets})
				require.NoError(t, err)
				got := probeSyscalls(t, rep.Executable, u, prog)
				want := map[string]syscall.Errno{
					"socket AF_UNIX": unix.EPERM, "socket AF_UNIX, upper half set": unix.EPERM,
					"socket AF_INET": 0, "socketpair AF_UNIX": 0,
					"socket AF_INET, upper half set": 0, "socket AF_INET6": 0, "socket AF_NETLINK": 0,
					"socket AF_VSOCK": unix.EAFNOSUPPORT, "socket AF_VSOCK, upper half set": unix.EAFNOSUPPORT,
					"socket AF_ALG": unix.EAFNOSUPPORT, "socket AF_PACKET": unix.EAFNOSUPPORT,
					"socketpair AF_VSOCK": unix.EAFNOSUPPORT,
					"ioctl TIOCSTI":       unix.EPERM, "ioctl TIOCSTI, upper half set": unix.EPERM, "ioctl TIOCLINUX": unix.EPERM,
					"ioctl TCGETS": unix.ENOTTY,
					"keyctl":       unix.EPERM, "add_key": unix.EPERM, "request_key": unix.EPERM,
					"clone CLONE_NEWUSER": unix.EPERM, "clone3": unix.ENOSYS, "unshare CLONE_NEWUSER": unix.EPERM,
					"setns":          unix.EPERM,
					"io_uring_setup": unix.EPERM, "io_uring_enter": unix.EPERM,
					"bpf": unix.EPERM, "perf_event_open": unix.EPERM, "userfaultfd": unix.EPERM,
					"mount": unix.EPERM, "fsopen": unix.EPERM, "open_tree": unix.EPERM, "syslog": unix.EPERM,
					"getpid": 0,
				}
				if unixSockets {
					want["socket AF_UNIX"], want["socket AF_UNIX, upper half set"] = 0, 0
				}
				if _, ok := x32Getpid(); ok {
					want["x32 getpid"] = unix.EPERM
				}
				for name, e := range want {
					require.Contains(t, got, name)
					require.Equal(t, e, got[name], "%s: %v, want %v", name, got[name], e)
				}
				if unixSockets {
					return
				}
				// Without the program the kernel answers the probes
				// differently, so the ones above are the filter's doing.
				plain := probeSyscalls(t, rep.Executable, u, nil)
				for _, name := range []string{"socket AF_UNIX", "socket AF_UNIX, upper half set", "ioctl TIOCSTI", "ioctl TIOCSTI, upper half set",
					"keyctl", "clone CLONE_NEWUSER", "clone3", "setns", "io_uring_enter", "socket AF_PACKET"} {
					require.NotEqual(t, want[name], plain[name], "%s: the kernel alone answers %v too", name, plain[name])
				}
				if plain["socket AF_VSOCK"] == unix.EAFNOSUPPORT {
					t.Logf("no vsock in this kernel: socket(AF_VSOCK) fails with EAFNOSUPPORT without the filter too")
				} else {
					require.Zero(t, plain["socket AF_VSOCK"], "without the filter a job makes a vsock socket")
					require.Zero(t, plain["socket AF_VSOCK, upper half set"])
				}
			})
		}
	}
}

// probeSyscalls runs syscallProbe as u in a minimal bwrap sandbox: the
// test binary bound from a descriptor, and prog (when not nil) on
// another as --seccomp.
func probeSyscalls(t *testing.T, bwrap string, u who, prog []byte) map[string]syscall.Errno {
	t.Helper()
	bin := openTestLauncher(t, GradePartial, u)
	defer bin.Close()
	files := []*os.File{bin}
	argv := []string{bwrap, "--unshare-user", "--unshare-pid", "--die-with-parent", "--new-session",
		"--ro-bind", "/", "/", "--dev-bind", "/dev/null", "/dev/null", "--tmpfs", "/tmp", "--ro-bind-fd", "3", "/tmp/probe"}
	if prog != nil {
		r, w, err := os.Pipe()
		require.NoError(t, err)
		defer r.Close()
		_, err = w.Write(prog)
		require.NoError(t, err)
		require.NoError(t, w.Close())
		files = append(files, r)
		argv = append(argv, "--seccomp", strconv.Itoa(3+len(files)-1))
	}
	argv = append(argv, "--", "/tmp/probe", syscallProbeArg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.cred}
	require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
	var got map[string]syscall.Errno
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &got), "stdout: %s stderr: %s", stdout.String(), stderr.String())
	return got
}

package sandbox

import (
	"encoding/binary"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// seccompCall is one system call as the filter sees it.
type seccompCall struct {
	arch uint32
	nr   uint32
	args [6]uint64
}

// data lays the call out as struct seccomp_data for golang.org/x/net/bpf's
// VM, whose 32-bit loads are big-endian: each 32-bit slot is written
// big-endian at the offset the kernel's little-endian layout gives it, so
// that a load at an offset sees the value the kernel's would.
func (c seccompCall) data() []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], c.nr)
	binary.BigEndian.PutUint32(b[4:], c.arch)
	for i, a := range c.args {
		off := 16 + 8*i
		binary.BigEndian.PutUint32(b[off:], uint32(a))       // low half first (little-endian)
		binary.BigEndian.PutUint32(b[off+4:], uint32(a>>32)) // then the high half
	}
	return b
}

func runFilter(t *testing.T, prog []bpf.Instruction, c seccompCall) uint32 {
	t.Helper()
	vm, err := bpf.NewVM(prog)
	require.NoError(t, err)
	v, err := vm.Run(c.data())
	require.NoError(t, err)
	return uint32(v)
}

const (
	retAllow  uint32 = unix.SECCOMP_RET_ALLOW
	retEPERM  uint32 = unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	retENOSYS uint32 = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	retEAFNO  uint32 = unix.SECCOMP_RET_ERRNO | uint32(unix.EAFNOSUPPORT)
)

// TestSeccompProgram runs the program of each architecture on the calls
// it must refuse and on their near misses, in a BPF VM.
func TestSeccompProgram(t *testing.T) {
	t.Parallel()
	for _, arch := range SeccompArchs() {
		t.Run(arch, func(t *testing.T) {
			t.Parallel()
			a := seccompArchs[arch]
			nr := func(name string) uint32 {
				n, ok := a.nr[name]
				require.True(t, ok, name)
				return n
			}
			prog, err := SeccompProgram(SeccompParams{Arch: arch})
			require.NoError(t, err)
			call := func(name string, args ...uint64) seccompCall {
				c := seccompCall{arch: a.audit, nr: nr(name)}
				copy(c.args[:], args)
				return c
			}
			const high = 0xdead_beef_0000_0000 // garbage in the upper half of a 32-bit argument
			for _, tc := range []struct {
				name string
				call seccompCall
				want uint32
			}{
				{"socket AF_UNIX", call("socket", unix.AF_UNIX, unix.SOCK_STREAM), retEPERM},
				{"socket AF_UNIX, upper half set", call("socket", high|unix.AF_UNIX, unix.SOCK_STREAM), retEPERM},
				{"socket AF_INET", call("socket", unix.AF_INET, unix.SOCK_STREAM), retAllow},
				{"socket AF_INET6", call("socket", unix.AF_INET6, unix.SOCK_DGRAM), retAllow},
				{"socket AF_NETLINK", call("socket", unix.AF_NETLINK, unix.SOCK_RAW), retAllow},
				{"socket AF_INET, upper half set", call("socket", high|unix.AF_INET, unix.SOCK_STREAM), retAllow},
				{"socket AF_VSOCK", call("socket", unix.AF_VSOCK, unix.SOCK_STREAM), retEAFNO},
				{"socket AF_VSOCK, upper half set", call("socket", high|unix.AF_VSOCK, unix.SOCK_STREAM), retEAFNO},
				{"socket AF_VSOCK, upper half AF_INET", call("socket", uint64(unix.AF_INET)<<32|unix.AF_VSOCK, unix.SOCK_STREAM), retEAFNO},
				{"socket AF_ALG", call("socket", unix.AF_ALG, unix.SOCK_SEQPACKET), retEAFNO},
				{"socket AF_PACKET", call("socket", unix.AF_PACKET, unix.SOCK_RAW), retEAFNO},
				{"socket AF_UNSPEC", call("socket", unix.AF_UNSPEC, unix.SOCK_STREAM), retEAFNO},
				{"socket AF_TIPC", call("socket", unix.AF_TIPC, unix.SOCK_RDM), retEAFNO},
				{"socket AF_BLUETOOTH", call("socket", unix.AF_BLUETOOTH, unix.SOCK_RAW), retEAFNO},
				{"socket family -1", call("socket", 0xffff_ffff, unix.SOCK_STREAM), retEAFNO},
				{"socket AF_MAX", call("socket", unix.AF_MAX, unix.SOCK_STREAM), retEAFNO},
				{"socketpair AF_UNIX", call("socketpair", unix.AF_UNIX, unix.SOCK_STREAM), retAllow},
				{"socketpair AF_UNIX, upper half set", call("socketpair", high|unix.AF_UNIX, unix.SOCK_STREAM), retAllow},
				{"socketpair AF_UNIX SOCK_SEQPACKET", call("socketpair", unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC), retAllow},
				{"socketpair AF_UNIX SOCK_DGRAM", call("socketpair", unix.AF_UNIX, unix.SOCK_DGRAM), retEPERM},
				{"socketpair AF_UNIX SOCK_DGRAM|SOCK_CLOEXEC|SOCK_NONBLOCK", call("socketpair", unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK), retEPERM},
				{"socketpair AF_UNIX SOCK_DGRAM, upper halves set", call("socketpair", high|unix.AF_UNIX, high|unix.SOCK_DGRAM), retEPERM},
				{"socketpair AF_UNIX SOCK_RAW (a datagram pair to the kernel)", call("socketpair", unix.AF_UNIX, unix.SOCK_RAW|unix.SOCK_CLOEXEC), retEPERM},
				{"socketpair AF_UNIX SOCK_RDM", call("socketpair", unix.AF_UNIX, unix.SOCK_RDM), retEPERM},
				{"socketpair AF_UNIX SOCK_STREAM|SOCK_NONBLOCK", call("socketpair", unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK), retAllow},
				{"socketpair AF_INET SOCK_DGRAM", call("socketpair", unix.AF_INET, unix.SOCK_DGRAM), retAllow},
				{"socketpair AF_TIPC", call("socketpair", unix.AF_TIPC, unix.SOCK_STREAM), retEAFNO},
				{"socketpair AF_VSOCK", call("socketpair", unix.AF_VSOCK, unix.SOCK_STREAM), retEAFNO},
				{"ioctl TIOCSTI", call("ioctl", 0, unix.TIOCSTI), retEPERM},
				{"ioctl TIOCSTI, upper half set (CVE-2019-10063)", call("ioctl", 0, high|unix.TIOCSTI), retEPERM},
				{"ioctl TIOCLINUX", call("ioctl", 0, unix.TIOCLINUX), retEPERM},
				{"ioctl TIOCLINUX, upper half set", call("ioctl", 0, high|unix.TIOCLINUX), retEPERM},
				{"ioctl TCGETS", call("ioctl", 0, unix.TCGETS), retAllow},
				{"ioctl TIOCGWINSZ", call("ioctl", 0, unix.TIOCGWINSZ), retAllow},
				{"clone CLONE_NEWUSER", call("clone", unix.CLONE_NEWUSER|uint64(unix.SIGCHLD)), retEPERM},
				{"clone CLONE_NEWUSER|CLONE_NEWNS", call("clone", unix.CLONE_NEWUSER|unix.CLONE_NEWNS), retEPERM},
				{"clone thread", call("clone", unix.CLONE_VM|unix.CLONE_FS|unix.CLONE_FILES|unix.CLONE_SIGHAND|unix.CLONE_THREAD), retAllow},
				{"clone fork", call("clone", uint64(unix.SIGCHLD)), retAllow},
				{"unshare CLONE_NEWUSER", call("unshare", unix.CLONE_NEWUSER), retEPERM},
				{"unshare CLONE_NEWNS", call("unshare", unix.CLONE_NEWNS), retAllow},
				{"clone3", call("clone3", 0, 88), retENOSYS},
				{"keyctl", call("keyctl", 0), retEPERM},
				{"add_key", call("add_key"), retEPERM},
				{"request_key", call("request_key"), retEPERM},
				{"setns", call("setns"), retEPERM},
				{"io_uring_setup", call("io_uring_setup", 8, 0), retEPERM},
				{"io_uring_enter", call("io_uring_enter"), retEPERM},
				{"io_uring_register", call("io_uring_register"), retEPERM},
				{"mount", call("mount"), retEPERM},
				{"umount2", call("umount2"), retEPERM},
				{"pivot_root", call("pivot_root"), retEPERM},
				{"open_tree", call("open_tree"), retEPERM},
				{"open_tree_attr", call("open_tree_attr"), retEPERM},
				{"move_mount", call("move_mount"), retEPERM},
				{"fsopen", call("fsopen"), retEPERM},
				{"fsconfig", call("fsconfig"), retEPERM},
				{"fsmount", call("fsmount"), retEPERM},
				{"fspick", call("fspick"), retEPERM},
				{"mount_setattr", call("mount_setattr"), retEPERM},
				{"bpf", call("bpf"), retEPERM},
				{"perf_event_open", call("perf_event_open"), retEPERM},
				{"userfaultfd", call("userfaultfd"), retEPERM},
				{"syslog", call("syslog"), retEPERM},
				{"kexec_load", call("kexec_load"), retEPERM},
				{"kexec_file_load", call("kexec_file_load"), retEPERM},
				{"init_module", call("init_module"), retEPERM},
				{"finit_module", call("finit_module"), retEPERM},
				{"delete_module", call("delete_module"), retEPERM},
				// Calls next to the refused ones in the tables stay allowed.
				{"the number before socket", seccompCall{arch: a.audit, nr: nr("socket") - 1, args: [6]uint64{unix.AF_VSOCK}}, retAllow},
				{"the number after socketpair", seccompCall{arch: a.audit, nr: nr("socketpair") + 1, args: [6]uint64{unix.AF_VSOCK}}, retAllow},
				{"the number before ioctl", seccompCall{arch: a.audit, nr: nr("ioctl") - 1}, retAllow},
				{"nr 0", seccompCall{arch: a.audit, nr: 0}, retAllow},
				// Another ABI: refused whatever the call.
				{"i386 ABI", seccompCall{arch: unix.AUDIT_ARCH_I386, nr: 3}, retEPERM},
				// socketcall(SYS_SOCKET, {AF_VSOCK, ...}) and socket(AF_VSOCK)
				// on i386 (102 and 359, arch/x86/entry/syscalls/syscall_32.tbl).
				{"i386 socketcall", seccompCall{arch: unix.AUDIT_ARCH_I386, nr: 102, args: [6]uint64{1 /* SYS_SOCKET */}}, retEPERM},
				{"i386 socket AF_VSOCK", seccompCall{arch: unix.AUDIT_ARCH_I386, nr: 359, args: [6]uint64{unix.AF_VSOCK}}, retEPERM},
				{"32-bit ARM socket AF_VSOCK", seccompCall{arch: unix.AUDIT_ARCH_ARM, nr: 281, args: [6]uint64{unix.AF_VSOCK}}, retEPERM},
				{"32-bit ARM ABI", seccompCall{arch: unix.AUDIT_ARCH_ARM, nr: 3}, retEPERM},
				{"unknown ABI", seccompCall{arch: 0, nr: 0}, retEPERM},
			} {
				require.Equal(t, tc.want, runFilter(t, prog, tc.call), "%s: %s", arch, tc.name)
			}
			// Every family of the allow-list but AF_UNIX makes a socket;
			// every family up to AF_MAX outside it is refused.
			for f := uint32(0); f <= unix.AF_MAX; f++ {
				want := retEAFNO
				if i := slices.IndexFunc(socketFamilies, func(s socketFamily) bool { return s.family == f }); i >= 0 {
					want = retAllow
					require.Equal(t, retAllow, runFilter(t, prog, call("socketpair", uint64(f), unix.SOCK_STREAM)), "socketpair(%s)", socketFamilies[i].name)
					if f == unix.AF_UNIX {
						continue
					}
				}
				require.Equal(t, want, runFilter(t, prog, call("socket", uint64(f), unix.SOCK_STREAM)), "%s: socket(%d)", arch, f)
			}
			other := map[string]uint32{"amd64": unix.AUDIT_ARCH_AARCH64, "arm64": unix.AUDIT_ARCH_X86_64}[arch]
			require.Equal(t, retEPERM, runFilter(t, prog, seccompCall{arch: other, nr: 0}), "the other 64-bit ABI")
			if a.x32 {
				// x32 shares the audit arch with x86-64 and sets a bit in
				// the number: read(2) and socket(2) as x32 calls.
				require.Equal(t, retEPERM, runFilter(t, prog, seccompCall{arch: a.audit, nr: x32SyscallBit}))
				require.Equal(t, retEPERM, runFilter(t, prog, seccompCall{arch: a.audit, nr: x32SyscallBit | 41, args: [6]uint64{unix.AF_INET}}))
				require.Equal(t, retEPERM, runFilter(t, prog, seccompCall{arch: a.audit, nr: x32SyscallBit | 41, args: [6]uint64{unix.AF_VSOCK}}))
			}

			// unix_sockets = true lets socket(AF_UNIX) through and
			// nothing else: the other families are as without it.
			open, err := SeccompProgram(SeccompParams{Arch: arch, UnixSockets: true})
			require.NoError(t, err)
			require.Equal(t, retAllow, runFilter(t, open, call("socket", unix.AF_UNIX, unix.SOCK_STREAM)))
			require.Equal(t, retAllow, runFilter(t, open, call("socket", high|unix.AF_UNIX, unix.SOCK_STREAM)))
			require.Equal(t, retAllow, runFilter(t, open, call("socket", unix.AF_INET6, unix.SOCK_STREAM)))
			require.Equal(t, retAllow, runFilter(t, open, call("socket", unix.AF_NETLINK, unix.SOCK_RAW)))
			require.Equal(t, retAllow, runFilter(t, open, call("socketpair", unix.AF_UNIX, unix.SOCK_STREAM)))
			require.Equal(t, retAllow, runFilter(t, open, call("socketpair", unix.AF_UNIX, unix.SOCK_DGRAM)))
			require.Equal(t, retEAFNO, runFilter(t, open, call("socket", unix.AF_VSOCK, unix.SOCK_STREAM)))
			require.Equal(t, retEAFNO, runFilter(t, open, call("socket", unix.AF_PACKET, unix.SOCK_RAW)))
			require.Equal(t, retEAFNO, runFilter(t, open, call("socketpair", unix.AF_TIPC, unix.SOCK_STREAM)))
			require.Equal(t, retEPERM, runFilter(t, open, call("keyctl")))
			require.Equal(t, retEPERM, runFilter(t, open, call("ioctl", 0, unix.TIOCSTI)))
		})
	}
}

// TestSeccompTable checks the syscall numbers of this machine's
// architecture against golang.org/x/sys/unix, which takes them from the
// kernel's headers.
func TestSeccompTable(t *testing.T) {
	t.Parallel()
	a, ok := seccompArchs[runtime.GOARCH]
	if !ok {
		unavailable(t, "no seccomp table for %s", runtime.GOARCH)
	}
	want := map[string]uint32{
		"ioctl": unix.SYS_IOCTL, "socket": unix.SYS_SOCKET, "socketpair": unix.SYS_SOCKETPAIR, "clone": unix.SYS_CLONE, "syslog": unix.SYS_SYSLOG,
		"pivot_root": unix.SYS_PIVOT_ROOT, "mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2,
		"init_module": unix.SYS_INIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE, "kexec_load": unix.SYS_KEXEC_LOAD,
		"add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY, "keyctl": unix.SYS_KEYCTL,
		"unshare": unix.SYS_UNSHARE, "perf_event_open": unix.SYS_PERF_EVENT_OPEN, "setns": unix.SYS_SETNS,
		"finit_module": unix.SYS_FINIT_MODULE, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "bpf": unix.SYS_BPF,
		"userfaultfd": unix.SYS_USERFAULTFD, "io_uring_setup": unix.SYS_IO_URING_SETUP,
		"io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER,
		"open_tree": unix.SYS_OPEN_TREE, "move_mount": unix.SYS_MOVE_MOUNT, "fsopen": unix.SYS_FSOPEN,
		"fsconfig": unix.SYS_FSCONFIG, "fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK,
		"clone3": unix.SYS_CLONE3, "mount_setattr": unix.SYS_MOUNT_SETATTR, "open_tree_attr": unix.SYS_OPEN_TREE_ATTR,
	}
	require.Equal(t, want, a.nr)
	for _, r := range seccompRules {
		require.Contains(t, want, r.name, "every rule names a call of the table")
	}
	for _, arch := range SeccompArchs() {
		require.Len(t, seccompArchs[arch].nr, len(seccompRules), "%s: one number per rule", arch)
	}
}

// TestSeccompBytes: the encoding bwrap reads is the assembled program,
// eight bytes per instruction in native order.
func TestSeccompBytes(t *testing.T) {
	t.Parallel()
	b, err := SeccompBytes(SeccompParams{})
	require.NoError(t, err)
	prog, err := SeccompProgram(SeccompParams{})
	require.NoError(t, err)
	raw, err := bpf.Assemble(prog)
	require.NoError(t, err)
	require.Len(t, b, 8*len(raw))
	for i, r := range raw {
		require.Equal(t, r.Op, binary.NativeEndian.Uint16(b[8*i:]))
		require.Equal(t, r.Jt, b[8*i+2])
		require.Equal(t, r.Jf, b[8*i+3])
		require.Equal(t, r.K, binary.NativeEndian.Uint32(b[8*i+4:]))
	}
	_, err = SeccompBytes(SeccompParams{Arch: "riscv64"})
	require.ErrorContains(t, err, "no seccomp syscall table for riscv64")
}

// BenchmarkSeccompFile is the seccomp layer's share of a job's start on
// the runner's side: the program built for the policy and put in a pipe.
func BenchmarkSeccompFile(b *testing.B) {
	p, err := NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: b.TempDir(), Network: true})
	require.NoError(b, err)
	for b.Loop() {
		f, err := SeccompFile(p)
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}

package sandbox

import (
	"encoding/binary"
	"fmt"
	"maps"
	"runtime"
	"slices"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// SeccompParams choose the seccomp program of a confined job
// ([SeccompProgram]).
type SeccompParams struct {
	// Arch is the GOARCH the program is for: "amd64" or "arm64".
	// Defaults to runtime.GOARCH.
	Arch string
	// UnixSockets lets socket(AF_UNIX, ...) through. Defaults to false:
	// refused with EPERM (socketpair(2) is always allowed). The other
	// address families are the same either way: AF_INET, AF_INET6 and
	// AF_NETLINK allowed, every other one refused with EAFNOSUPPORT.
	UnixSockets bool
}

// SeccompArchs returns the GOARCH values [SeccompProgram] has a syscall
// table for.
func SeccompArchs() []string { return []string{"amd64", "arm64"} }

// seccompArch is what the program checks and uses on one architecture.
type seccompArch struct {
	audit uint32 // AUDIT_ARCH_* value of seccomp_data.arch for the native ABI
	// x32 is true on x86-64, where a syscall number with
	// __X32_SYSCALL_BIT set is the x32 ABI (same audit arch).
	x32 bool
	nr  map[string]uint32 // syscall numbers, from the kernel's tables
}

// x32SyscallBit marks an x32 system call on x86-64
// (arch/x86/include/uapi/asm/unistd.h).
const x32SyscallBit = 0x40000000

// seccompArchs holds the native syscall numbers of the calls the program
// names (arch/x86/entry/syscalls/syscall_64.tbl and
// include/uapi/asm-generic/unistd.h, as golang.org/x/sys/unix spells them
// in zsysnum_linux_amd64.go and zsysnum_linux_arm64.go).
var seccompArchs = map[string]seccompArch{
	"amd64": {audit: unix.AUDIT_ARCH_X86_64, x32: true, nr: map[string]uint32{
		"ioctl": 16, "socket": 41, "socketpair": 53, "clone": 56, "syslog": 103, "pivot_root": 155, "mount": 165, "umount2": 166,
		"init_module": 175, "delete_module": 176, "kexec_load": 246, "add_key": 248, "request_key": 249,
		"keyctl": 250, "unshare": 272, "perf_event_open": 298, "setns": 308, "finit_module": 313,
		"kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
		"io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
		"fsmount": 432, "fspick": 433, "clone3": 435, "mount_setattr": 442, "open_tree_attr": 467,
	}},
	"arm64": {audit: unix.AUDIT_ARCH_AARCH64, nr: map[string]uint32{
		"ioctl": 29, "umount2": 39, "mount": 40, "pivot_root": 41, "unshare": 97, "kexec_load": 104,
		"init_module": 105, "delete_module": 106, "syslog": 116, "socket": 198, "socketpair": 199, "add_key": 217, "request_key": 218,
		"keyctl": 219, "clone": 220, "perf_event_open": 241, "setns": 268, "finit_module": 273, "bpf": 280,
		"userfaultfd": 282, "kexec_file_load": 294, "io_uring_setup": 425, "io_uring_enter": 426,
		"io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
		"fsmount": 432, "fspick": 433, "clone3": 435, "mount_setattr": 442, "open_tree_attr": 467,
	}},
}

// seccompRule refuses one system call, always or when an argument
// matches. Arguments are compared on their low 32 bits only: the ones
// named here are int or unsigned int in the kernel, which ignores the
// upper half of the register, so a filter comparing all 64 bits is
// bypassed by setting them (CVE-2019-10063, Flatpak's TIOCSTI filter).
type seccompRule struct {
	name string
	// arg is the argument index checked when anyOf or bits is set.
	arg int
	// anyOf refuses the call when the argument's low 32 bits equal one
	// of these.
	anyOf []uint32
	// bits refuses the call when the argument's low 32 bits have any of
	// these bits set.
	bits uint32
	// errno is the error returned; EPERM when 0.
	errno unix.Errno
	// unixSocket marks the anyOf of the rule as what
	// SeccompParams.UnixSockets lifts (the rest of the rule stays).
	unixSocket bool
	// allowOnly, when not empty, is checked after anyOf and bits: the
	// call is let through when the argument's low 32 bits equal one of
	// these, and refused with othersErrno otherwise.
	allowOnly   []uint32
	othersErrno unix.Errno
	// dgramUnix refuses, with EPERM unless SeccompParams.UnixSockets,
	// the call whose argument (arg) is AF_UNIX and whose next one, the
	// type, is not SOCK_STREAM or SOCK_SEQPACKET (SOCK_CLOEXEC and
	// SOCK_NONBLOCK aside): SOCK_DGRAM, and SOCK_RAW, which the kernel
	// makes a datagram socket (net/unix/af_unix.c, unix_create).
	dgramUnix bool
	why       string
}

// socketFamily is an address family a job may create sockets of.
type socketFamily struct {
	family uint32
	name   string
	why    string
}

// socketFamilies are the only address families socket(2) and
// socketpair(2) accept in a confined job, whatever its network key;
// every other family fails with EAFNOSUPPORT. The package documentation
// says why each is here and how the list differs from Flatpak's
// (common/flatpak-run.c, setup_seccomp, socket_family_allowlist).
var socketFamilies = []socketFamily{
	{unix.AF_UNIX, "AF_UNIX", "socketpair(2) and, with unix_sockets, socket(2); the AF_UNIX rule refuses socket(2) (EPERM) otherwise"},
	{unix.AF_INET, "AF_INET", "IPv4; the network namespace isolates it when network is false (a job then has only its own loopback)"},
	{unix.AF_INET6, "AF_INET6", "IPv6, isolated as AF_INET is"},
	{unix.AF_NETLINK, "AF_NETLINK", "the network namespace's own interfaces and routes (getaddrinfo's AI_ADDRCONFIG, ip(8)); isolated with it"},
}

// socketFamilyValues returns the family numbers of socketFamilies.
func socketFamilyValues() []uint32 {
	out := make([]uint32, len(socketFamilies))
	for i, f := range socketFamilies {
		out[i] = f.family
	}
	return out
}

// seccompRules are the refused calls, in the order the program checks
// them. The list follows Flatpak's (common/flatpak-run.c,
// setup_seccomp), anthropic's sandbox-runtime (socket(AF_UNIX)) and the
// kernel interfaces a job has no business with.
var seccompRules = []seccompRule{
	{name: "socket", arg: 0, anyOf: []uint32{unix.AF_UNIX}, unixSocket: true,
		allowOnly: socketFamilyValues(), othersErrno: unix.EAFNOSUPPORT,
		why: "a Unix socket reaches host services (a path socket through the read-only root, an abstract one through a shared network); socketpair(2) stays allowed; any family but socketFamilies' fails with EAFNOSUPPORT"},
	{name: "socketpair", arg: 0, allowOnly: socketFamilyValues(), othersErrno: unix.EAFNOSUPPORT, dgramUnix: true,
		why: "socketpair(2) creates sockets of its family too (AF_TIPC has pairs): the same families as socket(2); and an AF_UNIX datagram pair's sockets (SOCK_DGRAM, or SOCK_RAW, which the kernel makes one) can each sendto(2) or connect(2) to any path socket of the host, as a socket(AF_UNIX) could: only stream and seqpacket pairs, which stay connected to their peer"},
	{name: "ioctl", arg: 1, anyOf: []uint32{unix.TIOCSTI, unix.TIOCLINUX},
		why: "TIOCSTI pushes input into a terminal (CVE-2017-5226), TIOCLINUX does the same through a virtual console's selection (CVE-2023-28100)"},
	{name: "clone", arg: 0, bits: unix.CLONE_NEWUSER, why: "a new user namespace gives the job every capability again inside it"},
	{name: "unshare", arg: 0, bits: unix.CLONE_NEWUSER, why: "a new user namespace gives the job every capability again inside it"},
	{name: "clone3", errno: unix.ENOSYS,
		why: "seccomp cannot read clone3's flags (they are in memory); ENOSYS makes libc fall back to clone(2), which is checked (CVE-2021-41133)"},
	{name: "setns", why: "joining another namespace"},
	{name: "keyctl", why: "the kernel keyrings are shared with the host (the session and user keyrings)"},
	{name: "add_key", why: "the kernel keyrings are shared with the host"},
	{name: "request_key", why: "the kernel keyrings are shared with the host"},
	{name: "io_uring_setup", why: "io_uring runs file and network operations outside the system calls this filter sees"},
	{name: "io_uring_enter", why: "io_uring"},
	{name: "io_uring_register", why: "io_uring"},
	{name: "mount", why: "the mount table is the fence"},
	{name: "umount2", why: "the mount table is the fence"},
	{name: "pivot_root", why: "the mount table is the fence"},
	{name: "open_tree", why: "the new mount API (CVE-2021-41133)"},
	{name: "open_tree_attr", why: "the new mount API"},
	{name: "move_mount", why: "the new mount API"},
	{name: "fsopen", why: "the new mount API"},
	{name: "fsconfig", why: "the new mount API"},
	{name: "fsmount", why: "the new mount API"},
	{name: "fspick", why: "the new mount API"},
	{name: "mount_setattr", why: "the new mount API"},
	{name: "bpf", why: "kernel attack surface"},
	{name: "perf_event_open", why: "kernel attack surface and a side channel (many CVEs)"},
	{name: "userfaultfd", why: "a classic aid to kernel race exploits"},
	{name: "syslog", why: "the kernel log is the host's"},
	{name: "kexec_load", why: "loading a kernel"},
	{name: "kexec_file_load", why: "loading a kernel"},
	{name: "init_module", why: "loading kernel modules"},
	{name: "finit_module", why: "loading kernel modules"},
	{name: "delete_module", why: "unloading kernel modules"},
}

// seccomp_data offsets (include/uapi/linux/seccomp.h): int nr; __u32
// arch; __u64 instruction_pointer; __u64 args[6]. Both architectures are
// little-endian: an argument's low 32 bits come first.
const (
	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArgs = 16
)

// Return values of a seccomp filter (include/uapi/linux/seccomp.h).
const (
	seccompAllow = unix.SECCOMP_RET_ALLOW
	seccompErrno = unix.SECCOMP_RET_ERRNO
)

// SeccompProgram returns the classic BPF program every confined job runs
// under, passed to bwrap with --seccomp (see [SeccompBytes]). Refused
// calls fail with EPERM (clone3 with ENOSYS; socket(2) and socketpair(2)
// of an address family other than AF_UNIX, AF_INET, AF_INET6 and
// AF_NETLINK with EAFNOSUPPORT); nothing is killed. It refuses every
// call of another ABI than the native one of p.Arch: the
// i386 ABI on x86-64 (int 0x80), x32 (__X32_SYSCALL_BIT), 32-bit ARM on
// arm64, as Flatpak and runc do, so that the table cannot be sidestepped
// through a compat entry point (socketcall(2) on i386 is one way to
// make a socket the native rule never sees).
//
// The program is the same for every call with equal p; it is pure and
// safe for concurrent use. The package documentation lists the refused
// calls and why.
//
// # Errors
//
//   - p.Arch has no syscall table here (see [SeccompArchs]).
func SeccompProgram(p SeccompParams) ([]bpf.Instruction, error) {
	if p.Arch == "" {
		p.Arch = runtime.GOARCH
	}
	a, ok := seccompArchs[p.Arch]
	if !ok {
		return nil, fmt.Errorf("sandbox: no seccomp syscall table for %s (have %v)", p.Arch, SeccompArchs())
	}
	var prog program
	const refuse, allow = "refuse", "allow"
	prog.load(seccompDataArch)
	prog.jumpIf(bpf.JumpEqual, a.audit, "", refuse)
	prog.load(seccompDataNr)
	if a.x32 {
		prog.jumpIf(bpf.JumpGreaterOrEqual, x32SyscallBit, refuse, "")
	}
	errnos := map[unix.Errno]bool{}
	for i, r := range seccompRules {
		lifted := r.unixSocket && p.UnixSockets
		if lifted && len(r.allowOnly) == 0 {
			continue
		}
		nr, ok := a.nr[r.name]
		if !ok {
			return nil, fmt.Errorf("sandbox: seccomp table for %s has no %s", p.Arch, r.name)
		}
		next := fmt.Sprintf("rule%d", i+1)
		ret := errnoLabel(r.errno)
		errnos[r.errno] = true
		if len(r.anyOf) == 0 && r.bits == 0 && len(r.allowOnly) == 0 {
			prog.jumpIf(bpf.JumpEqual, nr, ret, "")
			continue
		}
		// A matched number with arguments that do not match is allowed
		// at once (or, with allowOnly, refused unless listed): each call
		// has one rule. The load takes the argument's low 32 bits.
		prog.jumpIf(bpf.JumpEqual, nr, "", next)
		prog.load(seccompDataArgs + 8*uint32(r.arg))
		if r.dgramUnix && !p.UnixSockets {
			// The accumulator keeps the family on the way to notUnix.
			notUnix := fmt.Sprintf("notunix%d", i)
			prog.jumpIf(bpf.JumpEqual, unix.AF_UNIX, "", notUnix)
			// Only the connected kinds: the kernel makes SOCK_RAW a
			// datagram socket too (unix_create), and a kind it adds
			// later is refused until known.
			prog.load(seccompDataArgs + 8*uint32(r.arg+1))
			prog.and(sockTypeMask)
			prog.jumpIf(bpf.JumpEqual, unix.SOCK_STREAM, allow, "")
			prog.jumpIf(bpf.JumpEqual, unix.SOCK_SEQPACKET, allow, errnoLabel(0))
			prog.label(notUnix)
		}
		if !lifted {
			for _, v := range r.anyOf {
				prog.jumpIf(bpf.JumpEqual, v, ret, "")
			}
		}
		if r.bits != 0 {
			prog.jumpIf(bpf.JumpBitsSet, r.bits, ret, "")
		}
		if len(r.allowOnly) == 0 {
			prog.ret(seccompAllow)
		} else {
			for _, v := range r.allowOnly {
				prog.jumpIf(bpf.JumpEqual, v, allow, "")
			}
			prog.ret(seccompErrno | uint32(r.othersErrno))
		}
		prog.label(next)
	}
	prog.label(allow)
	prog.ret(seccompAllow)
	prog.label(refuse)
	prog.label(errnoLabel(0))
	prog.ret(seccompErrno | uint32(unix.EPERM))
	for _, e := range slices.Sorted(maps.Keys(errnos)) {
		if e != 0 {
			prog.label(errnoLabel(e))
			prog.ret(seccompErrno | uint32(e))
		}
	}
	return prog.resolve()
}

func errnoLabel(e unix.Errno) string {
	if e == 0 || e == unix.EPERM {
		return "eperm"
	}
	return fmt.Sprintf("errno%d", int(e))
}

// SeccompBytes returns [SeccompProgram] encoded as the kernel's struct
// sock_filter array in native byte order: what bwrap reads, to its end,
// from the descriptor given to --seccomp. Errors are SeccompProgram's.
func SeccompBytes(p SeccompParams) ([]byte, error) {
	insns, err := SeccompProgram(p)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("sandbox: assembling the seccomp program: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

// program is a BPF program with forward jumps to labels, resolved into
// skip counts at the end (classic BPF jumps only forward, at most 255
// instructions).
type program struct {
	insns  []bpf.Instruction
	jumps  map[int][2]string // instruction index → labels for true, false ("" = next)
	labels map[string]int
}

func (p *program) load(off uint32) {
	p.insns = append(p.insns, bpf.LoadAbsolute{Off: off, Size: 4})
}

func (p *program) jumpIf(cond bpf.JumpTest, val uint32, ifTrue, ifFalse string) {
	if p.jumps == nil {
		p.jumps = map[int][2]string{}
	}
	p.jumps[len(p.insns)] = [2]string{ifTrue, ifFalse}
	p.insns = append(p.insns, bpf.JumpIf{Cond: cond, Val: val})
}

func (p *program) ret(v uint32) { p.insns = append(p.insns, bpf.RetConstant{Val: v}) }

// and ands the accumulator with v.
func (p *program) and(v uint32) {
	p.insns = append(p.insns, bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: v})
}

// sockTypeMask keeps a socket type's kind (SOCK_STREAM, SOCK_DGRAM, ...)
// of the type argument, without SOCK_CLOEXEC and SOCK_NONBLOCK
// (linux/net.h, SOCK_TYPE_MASK).
const sockTypeMask = 0xf

func (p *program) label(name string) {
	if p.labels == nil {
		p.labels = map[string]int{}
	}
	p.labels[name] = len(p.insns)
}

func (p *program) resolve() ([]bpf.Instruction, error) {
	out := slices.Clone(p.insns)
	for i, targets := range p.jumps {
		j := out[i].(bpf.JumpIf)
		for k, name := range targets {
			if name == "" {
				continue
			}
			at, ok := p.labels[name]
			if !ok {
				return nil, fmt.Errorf("sandbox: seccomp program: no label %q", name)
			}
			skip := at - i - 1
			if skip < 0 || skip > 255 {
				return nil, fmt.Errorf("sandbox: seccomp program: jump to %q out of range (%d)", name, skip)
			}
			if k == 0 {
				j.SkipTrue = uint8(skip)
			} else {
				j.SkipFalse = uint8(skip)
			}
		}
		out[i] = j
	}
	if len(out) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("sandbox: seccomp program has %d instructions, more than %d", len(out), unix.BPF_MAXINSNS)
	}
	return out, nil
}

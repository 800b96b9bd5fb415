// Package launch is the first program inside a confined job's sandbox:
// bwrap runs it in place of the job's argv; it applies the Landlock layer
// of the fence to itself (writes only to the job's writable set, and, on
// kernels with Landlock ABI 6, no abstract Unix sockets or signals that
// leave the sandbox), closes every descriptor but the standard three, and
// executes the job's argv as execvp(3) would. bwrap has already applied
// the seccomp filter, the namespaces and the mounts; Landlock is applied
// last because a Landlock domain forbids the mounts bwrap makes.
//
// paddock's own binary is the launcher: [Main] runs when its first
// argument is [Command] (a hidden subcommand), before anything else. The
// binary is bound into the sandbox by descriptor, at a fixed path, so it
// need not be visible there. The argv for it is built by [Spec.Args],
// which package sandbox calls; [Parse] reads it back.
//
// Nothing fails open: a ruleset that cannot be built or enforced exactly
// as asked (the ABI level the host's probe found) stops the launcher
// before the job runs, and the failure is reported on the report
// descriptor so that the runner records "the command never ran"
// (runner_failed), not the job's own failure. The same holds when the
// argv cannot be executed (not found, not executable).
//
// The package is safe for concurrent use; [Main] replaces the process.
package launch

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Command is the first argument that makes a binary the launcher.
const Command = "__sandbox-launch"

// ReportKey is the JSON key of the record the launcher writes on its
// report descriptor when the job's argv never ran: one line,
// {"paddock-launch-error": "<what failed>"}. bwrap's --json-status-fd
// stream and this record share one pipe in paddock's runner (see
// sandbox.WatchStatus).
const ReportKey = "paddock-launch-error"

// MaxLandlockABI is the highest Landlock ABI level this package knows the
// rights of (go-landlock's newest). A kernel with a newer one is used at
// this level.
const MaxLandlockABI = 11

// Spec is what the launcher does before it executes the job's argv.
type Spec struct {
	// LandlockABI is the Landlock ABI level whose rights are enforced,
	// 1 to [MaxLandlockABI]; 0 enforces no Landlock ruleset (a host
	// without Landlock, where the probe says so).
	LandlockABI int
	// WritableDirs are the directories (paths inside the sandbox) below
	// which the job may create, change, rename and remove files.
	WritableDirs []string
	// WritableFiles are files (the device nodes) the job may open for
	// writing, truncate and, from ABI 5, use ioctl(2) on.
	WritableFiles []string
	// UnixSockets leaves Unix sockets alone: no abstract-socket scope
	// (ABI 6) and no restriction of connect(2) to path sockets made
	// outside the sandbox (ABI 9). false (the default) restricts both.
	UnixSockets bool
	// Seccomp makes the launcher check that a seccomp filter is in force
	// (prctl(PR_GET_SECCOMP) says filter mode) before it runs anything:
	// bwrap applied the one it was given. false checks nothing.
	Seccomp bool
	// ReportFD is the descriptor the launcher reports a failure on (one
	// [ReportKey] record) and closes when the job's argv starts; -1 for
	// none (the failure then only goes to stderr).
	ReportFD int
	// Argv is the job's command; Argv[0] is looked up in $PATH when it
	// has no slash, as execvp(3) does.
	Argv []string
}

// Args returns the launcher's arguments for s, starting with [Command]:
// what follows the launcher's path in the sandbox's argv. Paths and argv
// elements are passed as they are, one argument each.
func (s Spec) Args() []string {
	out := make([]string, 0, 8+2*len(s.WritableDirs)+2*len(s.WritableFiles)+len(s.Argv))
	out = append(out, Command)
	if s.LandlockABI > 0 {
		out = append(out, "--landlock", strconv.Itoa(s.LandlockABI))
	}
	for _, d := range s.WritableDirs {
		out = append(out, "--dir", d)
	}
	for _, f := range s.WritableFiles {
		out = append(out, "--file", f)
	}
	if s.UnixSockets {
		out = append(out, "--unix-sockets")
	}
	if s.Seccomp {
		out = append(out, "--seccomp")
	}
	if s.ReportFD >= 0 {
		out = append(out, "--report", strconv.Itoa(s.ReportFD))
	}
	out = append(out, "--")
	return append(out, s.Argv...)
}

// Parse reads back what [Spec.Args] wrote, the leading [Command]
// included. The error names the argument at fault.
func Parse(args []string) (Spec, error) {
	s := Spec{ReportFD: -1}
	if len(args) == 0 || args[0] != Command {
		return s, fmt.Errorf("launch: the first argument is not %s", Command)
	}
	args = args[1:]
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			s.Argv = args[1:]
			if len(s.Argv) == 0 {
				return s, errors.New("launch: no command after --")
			}
			return s, nil
		}
		if a == "--unix-sockets" || a == "--seccomp" {
			if a == "--seccomp" {
				s.Seccomp = true
			} else {
				s.UnixSockets = true
			}
			args = args[1:]
			continue
		}
		if len(args) < 2 {
			return s, fmt.Errorf("launch: %s needs a value", a)
		}
		v := args[1]
		args = args[2:]
		switch a {
		case "--landlock":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxLandlockABI {
				return s, fmt.Errorf("launch: --landlock %q: want 1 to %d", v, MaxLandlockABI)
			}
			s.LandlockABI = n
		case "--dir", "--file":
			if !strings.HasPrefix(v, "/") {
				return s, fmt.Errorf("launch: %s %q is not an absolute path", a, v)
			}
			if a == "--dir" {
				s.WritableDirs = append(s.WritableDirs, v)
			} else {
				s.WritableFiles = append(s.WritableFiles, v)
			}
		case "--report":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return s, fmt.Errorf("launch: --report %q is not a descriptor", v)
			}
			s.ReportFD = n
		default:
			return s, fmt.Errorf("launch: unknown argument %q", a)
		}
	}
	return s, errors.New("launch: no -- before the command")
}

// writeRights are the Landlock filesystem rights the launcher handles
// (denies unless a rule grants them): every right that writes, and none
// that reads or executes (the fence is a write fence). From the Landlock
// documentation, "Filesystem flags".
const writeRights = ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
	ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock |
	ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym | ll.AccessFSRefer |
	ll.AccessFSTruncate | ll.AccessFSIoctlDev | ll.AccessFSResolveUnix

// fileRights are the rights that apply to a file (not a directory) and
// are granted on the writable files.
const fileRights = ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev

// abiConfigs are go-landlock's presets, indexed by ABI level.
var abiConfigs = [MaxLandlockABI + 1]landlock.Config{
	{}, landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
	landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// config returns the ruleset config of ABI level abi and the rights
// granted below the writable directories.
func config(abi int, unixSockets bool) (landlock.Config, landlock.AccessFSSet) {
	preset := abiConfigs[abi]
	handled := preset.HandledAccessFS & writeRights
	scoped := preset.Scoped
	if unixSockets {
		handled &^= ll.AccessFSResolveUnix
		scoped &^= ll.ScopeAbstractUnixSocket
	}
	// Connecting to a path socket made outside the sandbox is never
	// granted, not even in the writable set.
	return landlock.Config{HandledAccessFS: handled, Scoped: scoped}, handled &^ ll.AccessFSResolveUnix
}

// LandlockABI returns the highest ABI level, up to the kernel's and
// [MaxLandlockABI], at which this host builds the launcher's ruleset
// (go-landlock's view of the kernel, errata included: a kernel whose
// signal scope is broken is taken at level 5), and 0 when Landlock is
// missing or disabled. It
// creates and closes rulesets; it restricts nothing. Safe for concurrent
// use.
func LandlockABI() int {
	kernel, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	for abi := min(kernel, MaxLandlockABI); abi >= 1; abi-- {
		cfg, _ := config(abi, false)
		fd, _, err := cfg.NewRulesetFD()
		if err == nil && fd >= 0 {
			_ = unix.Close(fd)
			return abi
		}
	}
	return 0
}

// exitFailed is the launcher's exit status when the job never ran for a
// reason other than a command that was not found (126, as shells say
// "found but cannot run").
const (
	exitFailed   = 126
	exitNotFound = 127
)

// Main is the launcher: it parses args (which start with [Command]),
// enforces the Landlock ruleset, marks every descriptor above 2
// close-on-exec and executes the argv. It returns only on failure, with
// the exit status to use, after reporting what failed on the report
// descriptor and on stderr.
func Main(args []string) int {
	s, err := Parse(args)
	if err != nil {
		return fail(s.ReportFD, exitFailed, err.Error())
	}
	if s.ReportFD >= 0 {
		unix.CloseOnExec(s.ReportFD)
	}
	if s.Seccomp {
		// Filter mode is 2 (SECCOMP_MODE_FILTER, seccomp(2)).
		if mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil || mode != unix.SECCOMP_MODE_FILTER {
			return fail(s.ReportFD, exitFailed, fmt.Sprintf("seccomp: no filter is in force (mode %d, %v)", mode, err))
		}
	}
	// Landlock restricts the calling thread; execve(2) runs on the same
	// one. The thread is never unlocked.
	runtime.LockOSThread()
	if err := enforce(s); err != nil {
		return fail(s.ReportFD, exitFailed, err.Error())
	}
	if err := closeFrom(3); err != nil {
		return fail(s.ReportFD, exitFailed, "marking descriptors close-on-exec: "+err.Error())
	}
	err = execvp(s.Argv, os.Environ())
	code := exitFailed
	if errors.Is(err, syscall.ENOENT) {
		code = exitNotFound
	}
	return fail(s.ReportFD, code, fmt.Sprintf("execvp %s: %v", s.Argv[0], err))
}

// enforce applies the Landlock ruleset of s to the calling thread, which
// must be locked to its goroutine.
func enforce(s Spec) error {
	if s.LandlockABI == 0 {
		return nil
	}
	cfg, dirRights := config(s.LandlockABI, s.UnixSockets)
	var rules []landlock.Rule
	if len(s.WritableDirs) > 0 {
		rules = append(rules, landlock.PathAccess(dirRights, s.WritableDirs...))
	}
	if len(s.WritableFiles) > 0 {
		rules = append(rules, landlock.PathAccess(dirRights&fileRights, s.WritableFiles...))
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return fmt.Errorf("landlock ABI %d: %w", s.LandlockABI, err)
	}
	if fd < 0 {
		return fmt.Errorf("landlock ABI %d: nothing to enforce", s.LandlockABI)
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	// With the signal scope, the pid namespace's init (bwrap's, outside
	// the new domain) can no longer be signalled: proof that the domain
	// is in force.
	if cfg.Scoped&ll.ScopeSignal != 0 && os.Getpid() != 1 {
		if err := unix.Kill(1, 0); !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("landlock ABI %d: the signal scope does not hold (kill(1, 0): %v)", s.LandlockABI, err)
		}
	}
	return nil
}

// closeFrom marks every descriptor from lo up close-on-exec, so that
// nothing bwrap passed on (the report pipe, a bind source) reaches the
// job. Without close_range(2) (Linux < 5.11) it walks up to the
// descriptor limit.
func closeFrom(lo int) error {
	err := unix.CloseRange(uint(lo), ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) {
		return err
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	for fd := lo; uint64(fd) < lim.Cur; fd++ {
		unix.CloseOnExec(fd)
	}
	return nil
}

// execvp executes argv as execvp(3) does (glibc's __execvpe): a name
// without a slash is looked up in $PATH ("/bin:/usr/bin" when unset; an
// empty element is the working directory); a file the kernel cannot
// execute (ENOEXEC) is run by /bin/sh; EACCES on one candidate is
// remembered while the search goes on. It returns only on failure.
func execvp(argv, env []string) error {
	name := argv[0]
	if name == "" {
		return syscall.ENOENT
	}
	if strings.Contains(name, "/") {
		return execFile(name, argv, env)
	}
	path, ok := os.LookupEnv("PATH")
	if !ok {
		path = "/bin:/usr/bin"
	}
	sawEACCES := false
	for _, dir := range strings.Split(path, ":") {
		if dir == "" {
			dir = "."
		}
		err := execFile(dir+"/"+name, argv, env)
		switch {
		case errors.Is(err, syscall.EACCES):
			sawEACCES = true
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.ESTALE),
			errors.Is(err, syscall.ENODEV), errors.Is(err, syscall.ETIMEDOUT):
		default:
			return err
		}
	}
	if sawEACCES {
		return syscall.EACCES
	}
	return syscall.ENOENT
}

func execFile(file string, argv, env []string) error {
	err := syscall.Exec(file, argv, env)
	if errors.Is(err, syscall.ENOEXEC) {
		sh := append([]string{"/bin/sh", file}, argv[1:]...)
		if serr := syscall.Exec("/bin/sh", sh, env); serr != nil {
			return err
		}
	}
	return err
}

// fail reports msg on fd (when >= 0) and stderr and returns code.
func fail(fd, code int, msg string) int {
	if fd >= 0 {
		rec, _ := json.Marshal(map[string]string{ReportKey: msg})
		_, _ = unix.Write(fd, append(rec, '\n'))
	}
	fmt.Fprintf(os.Stderr, "paddock-launch: %s\n", msg)
	return code
}

// Dispatch runs the launcher when the process's first argument is
// [Command], and exits with [Main]'s status; it returns otherwise. Call
// it first in main (and in TestMain of tests that run confined jobs) of
// every program whose own executable is the launcher.
func Dispatch() {
	if len(os.Args) > 1 && os.Args[1] == Command {
		os.Exit(Main(os.Args[1:]))
	}
}

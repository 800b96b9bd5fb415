// Package launch is the first program inside a confined job's sandbox:
// bwrap runs it in place of the job's argv; it applies the Landlock layer
// of the fence to itself (writes only to the job's writable set, and, on
// kernels with Landlock ABI 6, no abstract Unix sockets or signals that
// leave the sandbox), closes every descriptor but the standard three, and
// executes the job's argv as execvp(3) would. bwrap has already applied
// the seccomp filter, the namespaces and the mounts; Landlock is applied
// last because a Landlock domain forbids the mounts bwrap makes.
//
// There are two launchers, which read the same arguments ([Spec.Args];
// [Parse] reads them back) and do the same: the [Image], a static
// executable of a few kilobytes whose code (image_amd64.s) makes the
// system calls itself and starts in a fraction of a millisecond, on
// x86-64; and paddock's own binary, where [Main] runs when its first
// argument is [Command] (a hidden subcommand), before anything else, on
// any architecture, at the cost of a Go program's start (several
// milliseconds). Package sandbox hands bwrap whichever it has, by
// descriptor, so that neither need be visible in the sandbox.
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

// Invocation is a [Spec] as the launcher receives it: the Landlock
// ruleset in the kernel's numbers, so that the launcher needs no table
// of rights per ABI level. Both launchers, [Main] and the [Image], read
// the same arguments ([Invocation.Args]).
type Invocation struct {
	// Handled and Scoped are struct landlock_ruleset_attr's
	// handled_access_fs and scoped (landlock(7)); Handled 0 enforces no
	// Landlock ruleset.
	Handled, Scoped uint64
	// DirRights and FileRights are the rights granted below each of
	// Dirs and on each of Files (LANDLOCK_RULE_PATH_BENEATH).
	DirRights, FileRights uint64
	// Dirs and Files are paths inside the sandbox.
	Dirs, Files []string
	// Seccomp: see [Spec].Seccomp.
	Seccomp bool
	// ReportFD is the report descriptor, >= 0.
	ReportFD int
	// Argv is the job's command.
	Argv []string
}

// Invocation returns s in the launcher's numbers: the ruleset of ABI
// level s.LandlockABI ([MaxLandlockABI] at most), Unix sockets as s says.
// A ReportFD below 0 becomes 2 (stderr).
func (s Spec) Invocation() Invocation {
	v := Invocation{Seccomp: s.Seccomp, ReportFD: s.ReportFD, Argv: s.Argv}
	if v.ReportFD < 0 {
		v.ReportFD = 2
	}
	if s.LandlockABI > 0 {
		cfg, dirRights := config(min(s.LandlockABI, MaxLandlockABI), s.UnixSockets)
		v.Handled, v.Scoped = uint64(cfg.HandledAccessFS), uint64(cfg.Scoped)
		v.DirRights, v.FileRights = uint64(dirRights), uint64(dirRights&fileRights)
		v.Dirs, v.Files = s.WritableDirs, s.WritableFiles
	}
	return v
}

// Args returns the launcher's arguments for s, starting with [Command]:
// what follows the launcher's path in the sandbox's argv
// (s.Invocation().Args()).
func (s Spec) Args() []string { return s.Invocation().Args() }

// flagSeccomp is bit 0 of the flags argument: [Invocation].Seccomp.
const flagSeccomp = 1

// Args returns v as the launcher's arguments:
//
//	__sandbox-launch HANDLED SCOPED DIRRIGHTS FILERIGHTS FLAGS REPORTFD
//	    [dPATH | fPATH]... -- ARGV...
//
// the six numbers in lowercase hexadecimal (FLAGS bit 0: [Invocation].Seccomp),
// each writable directory as "d" and its path, each file as "f" and its
// path. Argv elements are passed as they are.
func (v Invocation) Args() []string {
	out := make([]string, 0, 9+len(v.Dirs)+len(v.Files)+len(v.Argv))
	flags := uint64(0)
	if v.Seccomp {
		flags |= flagSeccomp
	}
	out = append(out, Command)
	for _, n := range []uint64{v.Handled, v.Scoped, v.DirRights, v.FileRights, flags, uint64(v.ReportFD)} {
		out = append(out, strconv.FormatUint(n, 16))
	}
	for _, d := range v.Dirs {
		out = append(out, "d"+d)
	}
	for _, f := range v.Files {
		out = append(out, "f"+f)
	}
	out = append(out, "--")
	return append(out, v.Argv...)
}

// Parse reads back what [Invocation.Args] wrote, the leading [Command]
// included. The error names the argument at fault.
func Parse(args []string) (Invocation, error) {
	v := Invocation{ReportFD: 2}
	if len(args) == 0 || args[0] != Command {
		return v, fmt.Errorf("launch: the first argument is not %s", Command)
	}
	if len(args) < 8 {
		return v, fmt.Errorf("launch: %d arguments; want at least 8", len(args))
	}
	names := []string{"handled", "scoped", "directory rights", "file rights", "flags", "report descriptor"}
	var n [6]uint64
	for i := range n {
		a := args[1+i]
		x, err := strconv.ParseUint(a, 16, 64)
		if err != nil || a != strconv.FormatUint(x, 16) {
			return v, fmt.Errorf("launch: %s %q is not a lowercase hexadecimal number", names[i], a)
		}
		n[i] = x
	}
	if n[5] > 1<<31-1 {
		return v, fmt.Errorf("launch: report descriptor %q is not a descriptor", args[6])
	}
	if n[4]&^flagSeccomp != 0 {
		return v, fmt.Errorf("launch: flags %q: unknown bits", args[5])
	}
	v.Handled, v.Scoped, v.DirRights, v.FileRights = n[0], n[1], n[2], n[3]
	v.Seccomp, v.ReportFD = n[4]&flagSeccomp != 0, int(n[5])
	for rest := args[7:]; len(rest) > 0; rest = rest[1:] {
		a := rest[0]
		if a == "--" {
			v.Argv = rest[1:]
			if len(v.Argv) == 0 {
				return v, errors.New("launch: no command after --")
			}
			return v, nil
		}
		if len(a) < 2 || (a[0] != 'd' && a[0] != 'f') || a[1] != '/' {
			return v, fmt.Errorf("launch: %q is not d or f and an absolute path", a)
		}
		if v.Handled == 0 {
			return v, fmt.Errorf("launch: %q: a writable path without a Landlock ruleset", a)
		}
		if a[0] == 'd' {
			v.Dirs = append(v.Dirs, a[1:])
		} else {
			v.Files = append(v.Files, a[1:])
		}
	}
	return v, errors.New("launch: no -- before the command")
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
	v, err := Parse(args)
	if err != nil {
		return fail(v.ReportFD, exitFailed, err.Error())
	}
	unix.CloseOnExec(v.ReportFD)
	if v.Seccomp {
		// Filter mode is 2 (SECCOMP_MODE_FILTER, seccomp(2)).
		if mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil || mode != unix.SECCOMP_MODE_FILTER {
			return fail(v.ReportFD, exitFailed, "seccomp: no filter is in force")
		}
	}
	// Landlock restricts the calling thread; execve(2) runs on the same
	// one. The thread is never unlocked.
	runtime.LockOSThread()
	if err := enforce(v); err != nil {
		return fail(v.ReportFD, exitFailed, err.Error())
	}
	if err := closeFrom(3); err != nil {
		return fail(v.ReportFD, exitFailed, "marking descriptors close-on-exec: "+err.Error())
	}
	err = execvp(v.Argv, os.Environ())
	code := exitFailed
	if errors.Is(err, syscall.ENOENT) {
		code = exitNotFound
	}
	return fail(v.ReportFD, code, fmt.Sprintf("execvp %s: %v", v.Argv[0], err))
}

// enforce applies the Landlock ruleset of v to the calling thread, which
// must be locked to its goroutine.
func enforce(v Invocation) error {
	if v.Handled == 0 {
		return nil
	}
	fd, err := ll.LandlockCreateRuleset(&ll.RulesetAttr{HandledAccessFS: v.Handled, Scoped: v.Scoped}, 0)
	if err != nil {
		return fmt.Errorf("landlock_create_ruleset: %w", err)
	}
	defer unix.Close(fd)
	for _, r := range []struct {
		paths  []string
		rights uint64
	}{{v.Dirs, v.DirRights}, {v.Files, v.FileRights}} {
		for _, p := range r.paths {
			if err := addRule(fd, p, r.rights); err != nil {
				return err
			}
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, 0); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	// With the signal scope, the pid namespace's init (bwrap's, outside
	// the new domain) can no longer be signalled: proof that the domain
	// is in force.
	if v.Scoped&ll.ScopeSignal != 0 && os.Getpid() != 1 {
		if err := unix.Kill(1, 0); !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("landlock: the signal scope does not hold: %v", err)
		}
	}
	return nil
}

// addRule grants rights below (or on) path in the ruleset fd.
func addRule(fd int, path string, rights uint64) error {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("landlock: opening %s: %w", path, err)
	}
	defer unix.Close(pfd)
	if err := ll.LandlockAddPathBeneathRule(fd, &ll.PathBeneathAttr{AllowedAccess: rights, ParentFd: pfd}, 0); err != nil {
		return fmt.Errorf("landlock_add_rule %s: %w", path, err)
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

// Describe returns a launcher's report in words: the [Image] ends a
// failed system call's message with ": errno N" (it has no table of
// error strings), which becomes ": " and the error's text, as [Main]
// writes it ("execvp x: errno 2" → "execvp x: no such file or
// directory"). Other messages are returned as they are.
func Describe(msg string) string {
	i := strings.LastIndex(msg, ": errno ")
	if i < 0 {
		return msg
	}
	n, err := strconv.ParseUint(msg[i+len(": errno "):], 10, 16)
	if err != nil || n == 0 {
		return msg
	}
	return msg[:i] + ": " + syscall.Errno(n).Error()
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

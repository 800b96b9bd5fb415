package sandbox

import (
	"os"
	"slices"
)

// KernelPaths are the kernel interfaces under /proc and /sys that a job
// sees read-only or not at all. They are the paths runc and Docker cover
// for every container (runc's readonlyPaths and maskedPaths, moby's
// oci/defaults.go), restricted to those that exist on the host: bwrap
// cannot mount over a path that is not there, and /proc and /sys show the
// same kernel inside the sandbox as outside. [FindKernelPaths] fills it; the
// probe keeps it in its report.
//
// It matters most for a job of a root worker: inside the sandbox its uid
// maps to host uid 0, and procfs lets the owner write most of /proc/sys
// without any capability (kernel.core_pattern, run by the kernel as root
// on the host, is one write away). bwrap's own cover of /proc/sys is
// skipped when access(2) finds the directory itself unwritable, which it
// always is.
type KernelPaths struct {
	// ReadOnly are kept read-only: under /proc by remounting the whole
	// fresh /proc read-only at the full grade (at the partial grade /proc
	// is an empty read-only tmpfs already), elsewhere by binding them
	// read-only over themselves.
	ReadOnly []string `json:"read_only,omitempty"`
	// MaskedFiles are covered with /dev/null bound read-only and nodev:
	// opening them fails.
	MaskedFiles []string `json:"masked_files,omitempty"`
	// MaskedDirs are covered with an empty tmpfs of the job's own: what
	// a job writes there reaches no kernel interface and ends with the
	// job (and the Landlock layer refuses it).
	MaskedDirs []string `json:"masked_dirs,omitempty"`
	// PrivateDirs get a fresh, empty, writable tmpfs at the partial grade,
	// whose /dev is the host's (read-only): /dev/shm and /dev/mqueue would
	// otherwise show other processes' POSIX shared memory and message
	// queues. The full grade's fresh /dev has its own.
	PrivateDirs []string `json:"private_dirs,omitempty"`
}

// kernelPath is one entry of the cover list, with why it is covered.
type kernelPath struct {
	path   string
	cover  string // "ro", "file", "dir" or "private"
	reason string
}

// kernelPathList is the cover list. Each entry says why; the /proc ones
// apply at the full grade only (the partial grade has no procfs).
// /proc/sysrq-trigger, /proc/bus and /proc/irq, on runc's list too, are
// left to bwrap: its --proc binds them read-only itself whenever they are
// writable (access(2) as the sandbox's root), which, unlike /proc/sys,
// they then are; each mount here costs a job about 0.2 ms.
var kernelPathList = []kernelPath{
	{"/proc/sys", "ro", "sysctls: the owner of a sysctl writes it without a capability, and a root worker's job is the owner (kernel.core_pattern runs a program as host root)"},
	{"/proc/fs", "ro", "file-system tunables (NFS, XFS, ext4) of the host"},
	{"/proc/kcore", "file", "the host's physical memory as an ELF core"},
	{"/proc/keys", "file", "the keys of every keyring the caller may view, the host user's included"},
	{"/proc/timer_list", "file", "host timers with kernel addresses and the tasks that set them"},
	{"/proc/timer_stats", "file", "host timer statistics with task names and pids (old kernels)"},
	{"/proc/sched_debug", "file", "every host task's scheduler state, with names and pids"},
	{"/proc/latency_stats", "file", "host latency records with kernel call chains"},
	{"/proc/interrupts", "file", "per-CPU interrupt counts of the host: a side channel on other tenants' activity"},
	{"/proc/acpi", "dir", "ACPI tables and controls of the host"},
	{"/proc/asound", "dir", "the host's sound devices"},
	{"/proc/scsi", "dir", "the host's SCSI devices; writing scsi/scsi adds and removes them"},
	{"/sys/firmware", "dir", "firmware tables (ACPI, DMI, EFI variables) of the host"},
	{"/dev/shm", "private", "the host's POSIX shared memory, readable at the partial grade through the host's /dev"},
	{"/dev/mqueue", "private", "the host's POSIX message queues, listed at the partial grade through the host's /dev"},
	{"/sys/devices/virtual/powercap", "dir", "RAPL energy counters: a power side channel on other processes (CVE-2020-8694)"},
}

// KernelPathReasons returns each covered path with why it is covered, for
// `paddock probe` and the documentation. The map is a new copy.
func KernelPathReasons() map[string]string {
	m := make(map[string]string, len(kernelPathList))
	for _, k := range kernelPathList {
		m[k.path] = k.reason
	}
	return m
}

// FindKernelPaths returns the entries of the cover list that exist on
// this host, sorted by kind. It reads the file system (Lstat of each
// candidate) and is safe for concurrent use. A symlink is skipped: bwrap
// would mount over its target.
func FindKernelPaths() KernelPaths {
	var kp KernelPaths
	for _, k := range kernelPathList {
		fi, err := os.Lstat(k.path)
		if err != nil || fi.Mode()&os.ModeSymlink != 0 {
			continue
		}
		switch {
		case k.cover == "ro":
			kp.ReadOnly = append(kp.ReadOnly, k.path)
		case k.cover == "dir" && fi.IsDir():
			kp.MaskedDirs = append(kp.MaskedDirs, k.path)
		case k.cover == "file" && !fi.IsDir():
			kp.MaskedFiles = append(kp.MaskedFiles, k.path)
		case k.cover == "private" && fi.IsDir():
			kp.PrivateDirs = append(kp.PrivateDirs, k.path)
		}
	}
	return kp
}

// defaultKernelPaths is the cover [Discovered] returns before a probe:
// /proc/sys, which every Linux with procfs has.
func defaultKernelPaths() KernelPaths {
	return KernelPaths{ReadOnly: []string{"/proc/sys"}}
}

// known reports whether every path in kp is on the cover list with the
// cover it is listed under: a probe cache file cannot add a mount of its
// own choosing.
func (kp KernelPaths) known() bool {
	check := func(paths []string, cover string) bool {
		for _, p := range paths {
			if !slices.ContainsFunc(kernelPathList, func(k kernelPath) bool { return k.path == p && k.cover == cover }) {
				return false
			}
		}
		return true
	}
	return check(kp.ReadOnly, "ro") && check(kp.MaskedFiles, "file") && check(kp.MaskedDirs, "dir") && check(kp.PrivateDirs, "private")
}

// appendCover appends the bwrap options that cover kp at grade g.
func (kp KernelPaths) appendCover(out []string, g Grade) []string {
	if g == GradePartial {
		for _, p := range kp.PrivateDirs {
			out = append(out, "--tmpfs", p)
		}
	}
	if g == GradeFull {
		for _, p := range kp.ReadOnly {
			if !Within(p, "/proc") { // /proc is remounted read-only below
				out = append(out, "--ro-bind", p, p)
			}
		}
	}
	for _, p := range kp.MaskedFiles {
		if g == GradeFull || !Within(p, "/proc") {
			out = append(out, "--ro-bind", "/dev/null", p)
		}
	}
	for _, p := range kp.MaskedDirs {
		if g == GradeFull || !Within(p, "/proc") {
			out = append(out, "--tmpfs", p)
		}
	}
	if g == GradeFull {
		// The whole fresh /proc read-only, after the masks below it (the
		// remount is not recursive): the ReadOnly entries, and every
		// global entry a job running as host root owns. chmod(2) on one
		// of those (/proc/slabinfo, /proc/meminfo) changes the mode the
		// kernel keeps for the entry itself, which every procfs, the
		// host's and other jobs', then shows. Writes to the job's own
		// /proc/self files (oom_score_adj, comm) fail too.
		out = append(out, "--remount-ro", "/proc")
	}
	return out
}

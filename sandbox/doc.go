// Package sandbox confines a command inside a bubblewrap (bwrap) write
// fence: the command can read the host filesystem but can write only its
// workspace, the extra writable roots it was given, a private /tmp and the
// standard device nodes.
//
// The package has five parts:
//
//   - [NewPolicy] checks and canonicalises what a job asks for (mode,
//     workspace, cwd, network, writable roots);
//   - [Build] (and [Confine] / [ConfineWith]) turn an argv and a [Policy]
//     into the bwrap argv. They are pure: no process is spawned, no file is
//     read, no PATH is searched, and they cost well under a microsecond;
//   - [PinRoots] opens a policy's roots without following any symlink, so
//     that Build binds those descriptors, not paths;
//   - [Probe] finds the absolute bwrap and the [Grade] this host supports,
//     by running real sandboxes, and memoizes a usable result, which
//     [Discovered] returns; [ProbeCached] also keeps a usable result in a
//     file and reuses it while the host key it was found for still holds
//     (failing closed: any doubt means a fresh probe);
//   - [ReadStatus] and [Classify] tell "bwrap failed, the command never ran"
//     from "the command ran and failed", by bwrap's --json-status-fd record,
//     never by text; [DenialScanner] finds the line for Classify's denial
//     hint in a stderr of any length, in bounded memory.
//
// # The argv
//
// Every confined argv has the shape
//
//	<bwrap> <namespaces and process> <base mounts> <mode mounts> --chdir <cwd> -- <argv...>
//
// and is the same for root and non-root: for root, --unshare-user and
// --cap-drop ALL are what make the fence hold (without them bwrap as root
// creates no user namespace and the job keeps every capability, so it can
// remount / read-write); for a non-root user they spell out what a
// non-setuid bwrap does anyway. --disable-userns is present when bwrap is
// 0.8.0 or newer and not setuid ([Discovery].DisableUserns).
//
// Namespaces and process, every grade:
//
//	--unshare-user [--disable-userns] --cap-drop ALL --unshare-pid [--unshare-net]
//	--die-with-parent --new-session --json-status-fd 3
//
// --unshare-net is added when the policy's Network is false.
//
// Base mounts, full grade:
//
//	--ro-bind / / --dev /dev --proc /proc <kernel paths>
//
// Base mounts, partial grade (a host that cannot mount a fresh /dev or
// /proc, such as an unprivileged container with masked /proc paths):
//
//	--ro-bind / /
//	--dev-bind /dev/null /dev/null   --dev-bind /dev/zero /dev/zero
//	--dev-bind /dev/full /dev/full   --dev-bind /dev/random /dev/random
//	--dev-bind /dev/urandom /dev/urandom
//	--tmpfs /proc --remount-ro /proc <kernel paths under /sys>
//
// The kernel paths ([KernelPaths], those of runc's and Docker's lists that
// exist on the host, found by the probe) follow: /proc/sys,
// /proc/sysrq-trigger, /proc/bus, /proc/fs and /proc/irq are bound
// read-only over themselves (--ro-bind P P); /proc/kcore, /proc/keys,
// /proc/timer_list, /proc/timer_stats, /proc/sched_debug,
// /proc/latency_stats and /proc/interrupts are covered with /dev/null
// (--ro-bind /dev/null P, nodev: opening them fails); /proc/acpi,
// /proc/asound, /proc/scsi, /sys/firmware and
// /sys/devices/virtual/powercap get an empty read-only tmpfs. Each
// entry's reason is in [KernelPathReasons].
//
// Mode mounts, after --tmpfs /tmp:
//
//	read_only:          --ro-bind WS WS
//	workspace_write:    --bind WS WS [--bind P P]...
//	danger_full_access: no bwrap at all; the argv is returned unchanged.
//
// WS is the canonical workspace and P each extra writable root. With
// [ConfineParams].RootFDs each becomes --ro-bind-fd FD WS or --bind-fd FD
// P: the directory bound is the one the caller opened ([PinRoots]), and
// bwrap fails ("Race condition binding dirfd") rather than bind anything
// else. Hidden directories ([PolicyParams].Hide) get --tmpfs H among the
// roots, ordered so that each mount comes after every one whose path
// contains it (a root inside H is bound back over the tmpfs; H inside a
// root is covered), and --remount-ro H after all of them. The read-only
// re-bind of WS in read_only mode keeps a workspace under /tmp visible
// under the fresh tmpfs.
//
// # Choices and why
//
//   - read_only gets a private tmpfs on /tmp. A read-only job that cannot
//     write /tmp breaks compilers, git, sort and most test runners; the
//     tmpfs is empty, private to the job and discarded at exit, so nothing
//     the job writes there reaches the host. It also hides the host's /tmp.
//   - The partial grade binds the five device nodes as devices because
//     bwrap's binds are nodev: without --dev-bind even /dev/null is
//     unwritable. /dev/tty is not bound: with --new-session the job has no
//     controlling terminal.
//   - The partial grade covers /proc with an empty read-only tmpfs: the
//     host's procfs, reachable through --ro-bind / /, lists host processes,
//     and /proc/<pid>/root of a host process resolves in the host's mount
//     namespace, where / is writable. With the user namespace the kernel
//     already refuses that to a capability-less job, but the tmpfs removes
//     the path instead of relying on one check. The cost: no /proc at all
//     (no ps, no /proc/self, no /dev/fd) at the partial grade.
//   - /proc/sys read-only at the full grade: inside the user namespace a
//     root worker's job is host uid 0, and procfs lets the owner of a
//     sysctl write it with no capability (kernel.core_pattern would run a
//     program as root on the host). bwrap covers /proc/sys itself only
//     when access(2) finds the directory writable, which it never is.
//   - Roots bound by descriptor: a path checked and then handed to bwrap
//     can be swapped in between (a concurrent job exchanging a directory
//     and a symlink with renameat2); a descriptor opened without following
//     symlinks cannot.
//   - --unshare-pid is kept at both grades: bwrap is then the init of the
//     job's pid namespace and, when it dies, the kernel kills every process
//     in it, including a grandchild that called setsid to leave the process
//     group. --die-with-parent alone only covers bwrap itself. A host that
//     cannot unshare the pid namespace is unusable (fail closed).
//   - --chdir is always passed: bwrap otherwise falls back to $HOME when the
//     working directory is hidden (for example under /tmp). [NewPolicy]
//     refuses such a cwd before anything runs.
//   - --new-session always: without it a job holding the terminal could push
//     input into it with TIOCSTI (CVE-2017-5226).
//   - --json-status-fd 3: bwrap writes an "exit-code" record only when the
//     command really ran; the caller passes a pipe as ExtraFiles[0]. The
//     record comes as soon as the command has exited, while other
//     processes of the sandbox may still run: bwrap's init reports through
//     an eventfd and goes on reaping. They die with the init, which the
//     kernel kills when bwrap exits. [InitWatch] tells when that has
//     happened, from the child-pid record's pid and pid namespace.
//
// # Running a confined argv
//
// The caller (the runner) starts the argv with the write end of a pipe as
// exec.Cmd.ExtraFiles[0] ([StatusFD]), closes its copy after Start, reads
// the read end with [ReadStatus] (or [WatchStatus], record by record)
// concurrently with Wait ([AwaitPidfd] waits without a blocked thread),
// and after Wait
// sets a read deadline on it: a sandbox child orphaned by a failing bwrap
// can hold the pipe open (observed with a setuid bwrap). It should start
// bwrap in its own process group and signal the group to stop it; the pid
// namespace takes the rest of the tree down. As root, the job runs as uid 0
// without capabilities: it cannot write files it does not own, so the
// workspace should belong to root (or be writable by it without
// CAP_DAC_OVERRIDE).
//
// # What the fence does not do
//
//   - Reads are not fenced: the job reads everything the user can read on the
//     host (except the host's /tmp, hidden by the tmpfs). It is not a
//     confidentiality boundary.
//   - The network is shared unless the policy sets Network false (and the
//     probe found --unshare-net working). Abstract Unix sockets, which live
//     in the network namespace, are reachable whenever the network is
//     shared.
//   - Unix sockets of the host stay reachable: a socket file under the
//     read-only root (the Docker socket, the D-Bus and systemd sockets, an
//     ssh-agent socket) can be connected to, and a service behind it can
//     write anywhere on the job's behalf. A read-only mount does not stop
//     connect().
//   - The IPC, UTS and cgroup namespaces are the host's: SysV IPC and POSIX
//     message queues are shared, the hostname is the host's.
//   - No resource limits: CPU, memory, processes and the size of the /tmp
//     tmpfs (RAM-backed) are unbounded; a runner must use timeouts or
//     cgroups.
//   - No system-call filter (no seccomp): the kernel's whole attack surface
//     inside an unprivileged user namespace is reachable.
//   - Writable roots and the workspace are bound as they are: a hard link in
//     the workspace to a file elsewhere, made before the job starts, lets the
//     job write that file. Symlinks inside the sandbox resolve inside it and
//     are fenced normally.
//   - It does not judge which directories a job may write: only "/", the
//     top-level system directories (/usr, /etc, /var, …) and anything under
//     /proc, /sys or /dev are refused as workspace or writable root;
//     /etc/ssh or $HOME are accepted. Deciding that is the hooks' job.
//   - Roots given by path (no RootFDs, as `paddock confine` prints them)
//     are resolved again by bwrap when it starts: a component replaced by
//     a symlink in between changes what is bound. Runners pass RootFDs.
//   - Hidden directories are hidden at their canonical path only: another
//     mount of the same directory elsewhere on the host (a bind mount)
//     stays visible through the read-only root.
//   - A setuid bwrap builds the sandbox with real root privileges; it cannot
//     apply --disable-userns, so nested user namespaces stay possible (they
//     still cannot unlock the read-only mounts). On this project's test host
//     a setuid bwrap cannot build the full base ("setting up uid map:
//     Invalid argument") and falls back to the partial grade.
//   - At the partial grade the job has no procfs, and there is no fresh
//     /dev: the rest of the host's /dev is visible read-only and nodev
//     (device nodes there cannot be opened).
//
// # Concurrency and state
//
// Everything here is safe for concurrent use. The only mutable package
// state is the memoized result of the first usable [Probe] or
// [ProbeCached]; a failed probe is not memoized. The probe cache file is
// replaced by rename, so processes sharing it see a whole file.
// [Discovered] returns the defaults (/usr/bin/bwrap, full grade, network
// isolation, --disable-userns) until a probe succeeds.
package sandbox

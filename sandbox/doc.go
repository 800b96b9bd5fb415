// Package sandbox confines a command inside a bubblewrap (bwrap) write
// fence: the command can read the host filesystem but can write only its
// workspace, the extra writable roots it was given, a private /tmp and the
// standard device nodes. Under bwrap's mounts stand two more layers, so
// that one mistake of bwrap's is not a way out and a command that talks
// instead of writing reaches nothing: a seccomp program ([SeccompProgram])
// and, where the kernel has it, a Landlock ruleset that the sandbox's
// first program enforces before it executes the command (package
// sandbox/launch).
//
// The package has six parts:
//
//   - [NewPolicy] checks and canonicalises what a job asks for (mode,
//     workspace, cwd, network, writable roots);
//   - [Build] (and [Confine] / [ConfineWith]) turn an argv and a [Policy]
//     into the bwrap argv. They are pure: no process is spawned, no file is
//     read, no PATH is searched, and they cost well under a microsecond;
//   - [PinRoots] opens a policy's roots without following any symlink, so
//     that Build binds those descriptors, not paths;
//   - [SeccompProgram] builds the seccomp filter (pure Go BPF), and
//     [Inherited] lays out the descriptors a confined argv names: the
//     status pipe, the seccomp program ([SeccompFile]), the launcher
//     binary ([OpenLauncher]) and the pinned roots;
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
//	<bwrap> <namespaces and process> <base mounts> <mode mounts> --chdir <cwd> -- [<launcher>] <argv...>
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
//	--unshare-user [--disable-userns] --cap-drop ALL --unshare-pid --unshare-ipc
//	[--unshare-net] --die-with-parent --new-session --json-status-fd 3 [--seccomp 4]
//
// --unshare-net is added when the policy's Network is false, --seccomp
// [SeccompFD] when the probe found seccomp working ([Discovery].Seccomp).
//
// Base mounts, full grade:
//
//	--ro-bind / / --dev /dev [--dev-bind <nodes>/N /dev/N]... --proc /proc <kernel paths>
//	  (a root worker's jobs: --ro-bind / / --dev-bind <dev tree> /dev --proc /proc ...)
//	--remount-ro /proc
//
// The fresh /proc is read-only once the kernel paths below it are
// masked (see kernelpaths.go).
// The --dev-bind entries, with [ConfineParams].DeviceNodes (a root
// worker), put substitutes over the six nodes --dev binds from the host
// (null, zero, full, random, urandom, tty): see devnodes.go. At the partial
// grade the same directory is the source of the five --dev-bind below.
// A root worker starts bwrap in a mount namespace made for the job, where
// the substitutes are bound over the host's nodes already or, at the full
// grade, a whole /dev is made for bwrap to bind as one mount (the <dev
// tree>, [ConfineParams].DevTree): each bind in the argv re-reads the
// mount table, so neither form binds nodes in the argv.
//
// Base mounts, partial grade (a host that cannot mount a fresh /dev or
// /proc, such as an unprivileged container with masked /proc paths):
//
//	--ro-bind / /
//	--dev-bind /dev/null /dev/null   --dev-bind /dev/zero /dev/zero
//	--dev-bind /dev/full /dev/full   --dev-bind /dev/random /dev/random
//	--dev-bind /dev/urandom /dev/urandom
//	--tmpfs /proc [--ro-bind-fd 6 /proc/.paddock-launch] --remount-ro /proc
//	<kernel paths under /sys>
//
// The kernel paths ([KernelPaths], those of runc's and Docker's lists that
// exist on the host, found by the probe) follow: /proc/sys and /proc/fs
// stay read-only with the rest of /proc (--remount-ro /proc, last, which
// also covers /proc/sysrq-trigger, /proc/bus, /proc/irq and every global
// entry whose mode a job running as host root could change for the
// kernel); /proc/kcore, /proc/keys,
// /proc/timer_list, /proc/timer_stats, /proc/sched_debug,
// /proc/latency_stats and /proc/interrupts are covered with /dev/null
// (--ro-bind /dev/null P, nodev: opening them fails); /proc/acpi,
// /proc/asound, /proc/scsi, /sys/firmware and
// /sys/devices/virtual/powercap get an empty tmpfs of the job's own (--tmpfs
// P: what the job writes there reaches no kernel interface; bwrap's
// --remount-ro reads the whole mount table, so each one saved is ~0.2 ms
// of every job). Each entry's reason is in [KernelPathReasons].
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
// root is covered), and, for each H inside a root, --remount-ro H after
// all of them (so that writes there fail rather than vanish; elsewhere the
// job's writes to H reach nothing outside the sandbox). The read-only
// re-bind of WS in read_only mode keeps a workspace under /tmp visible
// under the fresh tmpfs.
//
// Protected paths ([PolicyParams].Protect, workspace_write only) follow,
// each directory before what it contains: --bind K K for each directory
// K between a writable root and a protected path (a mount point cannot be
// renamed away), --ro-bind P P for each existing protected path, and for
// a missing one --tmpfs P --remount-ro P (a directory) or --ro-bind
// /dev/null P (a file). With RootFDs the existing ones are bound from
// [ConfineParams].ProtectFDs (--bind-fd, --ro-bind-fd). A missing file
// directly in a root, or below it where a placeholder would break
// programs (.git/commondir), and a symlink on the way to a protected
// path get no mount: [ProtectWatchers.Watch] watches their directories
// while the command runs, undoing a change as soon as inotify(7) reports
// it, and [Policy.AfterCommand] checks them again once it has ended.
//
// With the Landlock layer ([Discovery].LandlockABI > 0) the argv after
// "--" is
//
//	<launcher program> __sandbox-launch HANDLED SCOPED DIRRIGHTS FILERIGHTS
//	    FLAGS 5 [dD]... [fF]... -- <argv...>
//
// where the launcher program ([LauncherProgram]) is /proc/self/fd/6 at the
// full grade (executed from [LauncherFD], no mount) and [LauncherPath] at
// the partial grade (bound there from [LauncherFD]); the numbers are the
// Landlock ruleset in hexadecimal (launch.Invocation); the d entries are
// the writable set (the workspace and each writable root in
// workspace_write mode, /tmp, and /dev at the full grade) and the f
// entries the five device nodes at the partial grade. The launcher
// (package sandbox/launch: the launcher image at the full grade on
// x86-64, paddock's own binary otherwise) enforces that set with Landlock, checks that a seccomp filter is in
// force, marks every descriptor above 2 close-on-exec and executes the
// argv as execvp(3) does; when it cannot, it writes a
// {"paddock-launch-error": ...} record on [LaunchReportFD] (the status
// pipe again), which [WatchStatus] reads into [Status].LaunchError: the
// command never ran.
//
// # The seccomp program
//
// A classic BPF program (golang.org/x/net/bpf), built per architecture
// (x86-64, arm64) from the kernel's syscall numbers. It refuses with
// EPERM, never by killing: socket(AF_UNIX), and socketpair(AF_UNIX)
// other than of SOCK_STREAM or SOCK_SEQPACKET, unless the policy has
// UnixSockets (each socket of a datagram pair, SOCK_DGRAM or SOCK_RAW,
// which the kernel makes one, can sendto(2) or connect(2) to any path
// socket; a stream or seqpacket pair stays connected to its peer and is
// always allowed);
// ioctl TIOCSTI and
// TIOCLINUX; clone and unshare with CLONE_NEWUSER; setns; keyctl,
// add_key, request_key; io_uring_setup, _enter, _register; mount,
// umount2, pivot_root and the new mount API (open_tree, open_tree_attr,
// move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr); bpf,
// perf_event_open, userfaultfd, syslog; kexec_load, kexec_file_load,
// init_module, finit_module, delete_module. clone3 fails with ENOSYS:
// seccomp cannot read its flags (they are in memory), and libc then
// falls back to clone(2), which is checked (Flatpak's choice,
// CVE-2021-41133). socket(2) and socketpair(2) take four address
// families, whatever the policy's Network, and fail with EAFNOSUPPORT
// (the kernel's answer for a family it lacks) for every other one:
//
//   - AF_UNIX: socketpair(2), pipes between a job's own processes
//     (SOCK_DGRAM pairs under UnixSockets only); and socket(2) under
//     UnixSockets (the EPERM rules above are checked first);
//   - AF_INET, AF_INET6: TCP and UDP; without Network the job has its own
//     network namespace (--unshare-net) with only a loopback;
//   - AF_NETLINK: the network namespace's own interfaces and routes,
//     which getaddrinfo(3) (AI_ADDRCONFIG), ip(8) and language runtimes
//     read; isolated with the namespace.
//
// Refused so: AF_VSOCK, which a network namespace does not isolate (the
// hypervisor, CID 2, and a host's virtual machines), and the families
// that only widen the kernel a job reaches (AF_PACKET, AF_ALG, AF_KEY,
// AF_TIPC, AF_RDS, AF_CAN, AF_BLUETOOTH, AF_XDP, ...); socketpair(2) is
// checked too, since it creates sockets of its family (AF_TIPC has
// pairs). The list is Flatpak's (socket_family_allowlist in
// setup_seccomp) less AF_UNSPEC, which names no family (the kernel
// answers EAFNOSUPPORT too, after asking for a module net-pf-0), and
// less AF_CAN and AF_BLUETOOTH, which Flatpak lets through on request
// and a job cannot ask for.
//
// Arguments are compared on their low 32 bits only: the kernel reads an
// int argument from the low half of the register, so a 64-bit
// comparison is bypassed by setting the high half (CVE-2019-10063,
// Flatpak's TIOCSTI filter). Every call of another ABI than the native
// one is refused: the i386 ABI on x86-64 (int 0x80, where socketcall(2)
// would make a socket the native rule never sees), x32
// (__X32_SYSCALL_BIT), 32-bit ARM on arm64. The list follows Flatpak's
// (common/flatpak-run.c) and anthropic's sandbox-runtime (AF_UNIX,
// io_uring); ptrace stays allowed (the pid namespace limits it to the
// job's own processes, and debuggers in jobs keep working).
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
//   - --unshare-ipc always: SysV IPC objects and POSIX message queues a
//     job creates stay in its own IPC namespace, and it cannot attach to
//     the host's (40 serial spawns showed no cost; paddock-bench's layers
//     scenario measures it).
//   - Landlock is enforced by a program inside the sandbox, after bwrap's
//     mounts: a Landlock domain forbids mounting, so bwrap cannot run
//     under one. The launcher is handed over by descriptor because it
//     may live where the sandbox hides (paddock in the state directory or
//     the host's /tmp; the image in a memfd). At the full grade bwrap
//     executes /proc/self/fd/6, the sandbox's own /proc showing its
//     inherited descriptor: no mount, and the image, a few kilobytes of
//     raw system calls, starts in well under a millisecond where a Go
//     program takes several. At the partial grade (no /proc of its own)
//     paddock's binary is bound by descriptor in the empty /proc tmpfs,
//     where no workspace or writable root can be (they are refused under
//     /dev and /proc); bwrap resolves the descriptor's path as the user
//     it runs as, who ran paddock, so can reach it. Landlock
//     rules cover everything mounted below their directory: the /tmp rule
//     covers a workspace bound under /tmp too, read-only in read_only mode
//     by its mount alone.
//   - The launcher's rights are the write rights of the probe's ABI level,
//     exactly (not best effort): a ruleset the kernel refuses stops the job
//     before it runs, and the probe checks that a write outside the
//     writable set is refused on this host. Reads and execution are not
//     handled: the fence is a write fence. From ABI 6 the scopes keep
//     abstract Unix sockets and signals inside the sandbox; from ABI 9 so
//     is connect(2) to path sockets made outside it. UnixSockets lifts the
//     socket restrictions of both layers, not the signal scope.
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
// The caller (the runner) starts the argv with [Inherited.ExtraFiles]: the
// write end of a pipe ([StatusFD], and again [LaunchReportFD]), the
// seccomp program ([SeccompFD], a fresh [SeccompFile] for every spawn),
// the launcher ([LauncherFD]) and the pinned roots ([FirstRootFD] on). It
// closes its copies after Start, reads
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
//     probe found --unshare-net working).
//   - With UnixSockets, Unix sockets of the host stay reachable: a socket
//     file under the read-only root (the Docker socket, the D-Bus and
//     systemd sockets, an ssh-agent socket) can be connected to, and a
//     service behind it can write anywhere on the job's behalf (a
//     read-only mount does not stop connect()); an abstract socket, when
//     the network is shared.
//   - The UTS and cgroup namespaces are the host's: the hostname is the
//     host's.
//   - Where the Landlock layer holds, POSIX message queues cannot be
//     created (mq_open fails with EACCES: Landlock takes it for creating a
//     file outside the writable set).
//   - Without Landlock (kernels before 5.13, or without landlock in the
//     lsm= list) the write fence is bwrap's mounts alone, and a FIFO on
//     the read-only root can be opened for writing; the probe says so.
//   - No resource limits: CPU, memory, processes and the size of the /tmp
//     tmpfs (RAM-backed) are unbounded; a runner must use timeouts or
//     cgroups.
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
// [ProbeCached] (a failed probe is not memoized) and the memoized seccomp
// programs of this machine's architecture ([SeccompFile]). The probe cache file is
// replaced by rename, so processes sharing it see a whole file.
// [Discovered] returns the defaults (/usr/bin/bwrap, full grade, network
// isolation, --disable-userns, seccomp, no Landlock) until a probe
// succeeds.
package sandbox

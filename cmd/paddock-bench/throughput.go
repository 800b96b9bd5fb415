package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"paddock/runner"
	"paddock/sandbox"
)

// install is one paddock installation: a state directory and a config.
type install struct {
	paddock string
	dir     string
	state   string
	config  string
}

// newInstall writes config into a fresh directory.
func (b *bench) newInstall(prefix, config string) (*install, error) {
	dir, err := b.dir(prefix)
	if err != nil {
		return nil, err
	}
	in := &install{paddock: b.o.paddock, dir: dir, state: filepath.Join(dir, "state"), config: filepath.Join(dir, "config.toml")}
	return in, os.WriteFile(in.config, []byte(config), 0o600)
}

func (in *install) cmd(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, in.paddock, append([]string{"--state-dir", in.state, "--config", in.config}, args...)...)
	c.Env = append(os.Environ(), "PADDOCK_STATE_DIR=")
	return c
}

// run runs paddock to completion and fails with its stderr.
func (in *install) run(ctx context.Context, args ...string) error {
	c := in.cmd(ctx, args...)
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Run(); err != nil {
		return fmt.Errorf("paddock %s: %w: %s", strings.Join(args, " "), err, lastLines(errb.String(), 5))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// runSampled starts c, samples its peak RSS (VmHWM) and its own CPU time
// (utime + stime of /proc/<pid>/stat: its threads, not its children) every
// 20ms until it exits, and returns the peak in MiB, the CPU seconds of the
// last sample (up to 20ms short) and the wait error.
func runSampled(c *exec.Cmd) (float64, float64, error) {
	if err := c.Start(); err != nil {
		return 0, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", c.Process.Pid)
	stat := fmt.Sprintf("/proc/%d/stat", c.Process.Pid)
	peak, cpu := 0, 0.0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if kib := vmHWM(status); kib > peak {
			peak = kib
		}
		if s, ok := cpuSeconds(stat); ok {
			cpu = s
		}
		select {
		case err := <-done:
			return float64(peak) / 1024, cpu, err
		case <-tick.C:
		}
	}
}

// cpuSeconds reads utime + stime from a /proc/<pid>/stat file (fields 14
// and 15, in clock ticks of 1/100 s: proc(5)).
func cpuSeconds(path string) (float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	k, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return float64(u+k) / 100, true
}

// vmHWM reads the VmHWM line of a /proc/<pid>/status file, in KiB, or 0.
func vmHWM(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}

// throughputConfig is the config of the throughput installation: one
// reactor hook (tighten), the cost of a real policy on every job.
func (b *bench) throughputConfig() string {
	return fmt.Sprintf("[[hook]]\nname = \"tighten\"\npath = %q\nsettings = { dry_run = [\"rsync\"] }\n", filepath.Join(b.o.hooksDir, "tighten.wasm"))
}

// trivialBatch writes n /bin/true jobs sharing workspace ws.
func trivialBatch(path, ws string, n int) error {
	var s strings.Builder
	fmt.Fprintf(&s, "[defaults]\nmode = \"workspace_write\"\nworkspace = %q\n\n", ws)
	for i := range n {
		fmt.Fprintf(&s, "[[job]]\nname = \"true-%d\"\ncommand = [\"/bin/true\"]\n", i)
	}
	return os.WriteFile(path, []byte(s.String()), 0o600)
}

// throughputInstall makes an installation with the throughput config, a
// workspace and the batch file (returned), and warms its compilation
// cache with `paddock check` of one job: a worker restart, not a first
// install (scenario 4 measures compilation).
func (b *bench) throughputInstall(ctx context.Context, prefix string) (*install, string, error) {
	in, err := b.newInstall(prefix, b.throughputConfig())
	if err != nil {
		return nil, "", err
	}
	ws := filepath.Join(in.dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return nil, "", err
	}
	jobs := filepath.Join(in.dir, "jobs.toml")
	if err := trivialBatch(jobs, ws, b.o.jobs); err != nil {
		return nil, "", err
	}
	one := filepath.Join(in.dir, "one.toml")
	if err := trivialBatch(one, ws, 1); err != nil {
		return nil, "", err
	}
	if err := in.run(ctx, "check", one); err != nil { // warms <state>/cache/wazero
		return nil, "", err
	}
	return in, jobs, nil
}

// throughputPaddock is one run: submit the batch, then worker --drain at
// concurrency conc; wall seconds from submit to the worker's exit, and the
// worker's peak RSS and own CPU seconds, on an install from
// throughputInstall.
func (b *bench) throughputPaddock(ctx context.Context, conc, run int) (wall, rssMiB, cpu float64, err error) {
	in, jobs, err := b.throughputInstall(ctx, "tp-paddock")
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	if err := in.run(ctx, "submit", jobs); err != nil {
		return 0, 0, 0, err
	}
	args := []string{"worker", "--drain", "--concurrency", strconv.Itoa(conc), "--log-level", "warn"}
	if b.o.workerProfile != "" {
		args = append(args, "--cpuprofile", fmt.Sprintf("%s.c%d.r%d.pprof", b.o.workerProfile, conc, run+1))
	}
	w := in.cmd(ctx, args...)
	var errb bytes.Buffer
	w.Stderr = &errb
	rssMiB, cpu, err = runSampled(w)
	wall = time.Since(start).Seconds()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("worker --drain: %w: %s", err, lastLines(errb.String(), 5))
	}
	return wall, rssMiB, cpu, nil
}

// throughputService is one run with the worker already running, as a
// paddock service runs: `paddock worker --concurrency conc` is started
// and given time to load its hooks (its event log appears), then the
// clock runs from `paddock submit --wait` of the batch until it returns,
// every job final. The worker's start is not in it (scenario 4 measures
// that); the submit, the worker's wake-up and every job's path are.
func (b *bench) throughputService(ctx context.Context, conc int) (float64, error) {
	in, jobs, err := b.throughputInstall(ctx, "tp-service")
	if err != nil {
		return 0, err
	}
	w := in.cmd(ctx, "worker", "--concurrency", strconv.Itoa(conc), "--log-level", "warn")
	var errb bytes.Buffer
	w.Stderr = &errb
	if err := w.Start(); err != nil {
		return 0, err
	}
	defer func() {
		_ = w.Process.Signal(syscall.SIGTERM)
		_ = w.Wait()
	}()
	events := runner.StateDir{Root: in.state}.EventLog()
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := os.Stat(events); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("worker not ready after a minute: %s", lastLines(errb.String(), 5))
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // past its first (empty) claim pass
	start := time.Now()
	if err := in.run(ctx, "submit", "--wait", jobs); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// confinedTrue is the confined argv of /bin/true in workspace ws as the
// worker builds it, less --seccomp: bwrap reads the program to the end of
// its descriptor, so every bwrap needs a stream of its own, which a tool
// that execs the same argv many times cannot give. The launcher, handed
// over by descriptor, is kept: the baselines inherit the one the worker
// uses ([sandbox.OpenLauncher]) at sandbox.LauncherFD.
func (b *bench) confinedTrue(ws string) ([]string, error) {
	pol, err := sandbox.NewPolicy(sandbox.PolicyParams{Mode: sandbox.ModeWorkspaceWrite, Workspace: ws, Network: true})
	if err != nil {
		return nil, err
	}
	d := b.probe.Discovery()
	d.Seccomp = false
	return sandbox.ConfineWith([]string{"/bin/true"}, pol, d)
}

// shellQuote quotes argv for sh.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// throughputTool runs the confined argv n times with a baseline tool at
// concurrency conc and returns the wall seconds.
func (b *bench) throughputTool(ctx context.Context, tool string, conc int) (float64, error) {
	dir, err := b.dir("tp-" + tool)
	if err != nil {
		return 0, err
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return 0, err
	}
	argv, err := b.confinedTrue(ws)
	if err != nil {
		return 0, err
	}
	// bwrap writes its status to fd 3 (--json-status-fd 3), the launcher
	// a failure to fd 5 (sandbox.LaunchReportFD), and the launcher is fd
	// 6 (sandbox.LauncherFD): every tool gets them, as
	// inherited fds or by redirection.
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	launcher, err := sandbox.OpenLauncher(b.probe.Discovery().Grade)
	if err != nil {
		return 0, err
	}
	defer launcher.Close()
	// A shell opens the launcher through this process's descriptor (it
	// may be a memfd, which has no other name).
	self := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), launcher.Fd())
	redirect := fmt.Sprintf(" 3>/dev/null %d>/dev/null %d<%s", sandbox.LaunchReportFD, sandbox.LauncherFD, shellQuote([]string{self}))
	var lines strings.Builder
	for i := range b.o.jobs {
		fmt.Fprintf(&lines, "%d\n", i)
	}
	n := strconv.Itoa(b.o.jobs)
	c := strconv.Itoa(conc)
	start := time.Now()
	switch tool {
	case "xargs":
		cmd := exec.CommandContext(ctx, "xargs", append([]string{"-P", c, "-I{}", "--"}, argv...)...)
		cmd.Stdin = strings.NewReader(lines.String())
		cmd.ExtraFiles = (sandbox.Inherited{Status: devnull, Launcher: launcher}).ExtraFiles()
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("xargs: %w: %s", err, out)
		}
	case "parallel":
		// GNU parallel runs each command line through a shell.
		cmd := exec.CommandContext(ctx, "parallel", "--will-cite", "-j", c, "-N0", shellQuote(argv)+redirect, ":::")
		for i := range b.o.jobs {
			cmd.Args = append(cmd.Args, strconv.Itoa(i))
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("parallel: %w: %s", err, out)
		}
	case "tsp":
		env := append(os.Environ(), "TS_SOCKET="+filepath.Join(dir, "ts.sock"), "TMPDIR="+dir, "TS_MAXFINISHED="+n)
		tsp := func(args ...string) (string, error) {
			cmd := exec.CommandContext(ctx, "tsp", args...)
			cmd.Env = env
			out, err := cmd.Output()
			return strings.TrimSpace(string(out)), err
		}
		defer tsp("-K") //nolint:errcheck // the server goes with its socket
		if _, err := tsp("-S", c); err != nil {
			return 0, fmt.Errorf("tsp -S: %w", err)
		}
		start = time.Now() // the server start is not the jobs' cost
		// tsp execs the command without a shell and without fd 3: one sh
		// opens it, and counts the job done in a file this process polls
		// (tsp -w on the last id does not always wait, seen with 1.0.1, and
		// polling tsp -l costs a process per look).
		done := filepath.Join(dir, "done")
		script := shellQuote(argv) + redirect + " && echo >> " + shellQuote([]string{done})
		for range b.o.jobs {
			if _, err := tsp("-n", "sh", "-c", script); err != nil {
				return 0, fmt.Errorf("tsp: %w", err)
			}
		}
		last, lastChange := -1, time.Now()
		for {
			data, _ := os.ReadFile(done)
			if len(data) >= b.o.jobs {
				break
			}
			if len(data) != last {
				last, lastChange = len(data), time.Now()
			}
			if time.Since(lastChange) > time.Minute {
				list, _ := tsp("-l")
				return 0, fmt.Errorf("tsp: %d of %d jobs succeeded, no progress for a minute:\n%s", last, b.o.jobs, lastLines(list, 5))
			}
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			time.Sleep(2 * time.Millisecond)
		}
	default:
		return 0, fmt.Errorf("unknown tool %q", tool)
	}
	return time.Since(start).Seconds(), nil
}

// throughput is scenario 1 (and the first half of scenario 5).
func (b *bench) throughput(ctx context.Context) error {
	tools := []string{"xargs", "parallel", "tsp"}
	wanted := map[string]bool{"xargs": true}
	for _, t := range strings.Split(b.o.baselines, ",") {
		if t = strings.TrimSpace(t); t != "" && !slices.Contains(tools, t) {
			return fmt.Errorf("--baselines: unknown tool %q (xargs, parallel, tsp)", t)
		}
		wanted[t] = true
	}
	installed := map[string]bool{}
	for _, t := range tools {
		_, err := exec.LookPath(t)
		installed[t] = err == nil && wanted[t]
	}
	if !installed["xargs"] {
		return fmt.Errorf("xargs is needed: it is the baseline")
	}
	if installed["parallel"] {
		// moreutils also ships a "parallel"; only GNU parallel is measured.
		out, _ := exec.Command("parallel", "--version").CombinedOutput()
		installed["parallel"] = bytes.Contains(out, []byte("GNU parallel"))
	}
	var rss []float64
	for _, conc := range []int{1, 2} {
		samples := map[string][]float64{}
		for r := range b.o.runs {
			// Interleave the tools so that load changes hit them alike.
			for _, t := range tools {
				if !installed[t] {
					continue
				}
				s, err := b.throughputTool(ctx, t, conc)
				if err != nil {
					return err
				}
				samples[t] = append(samples[t], s)
			}
			s, m, cpu, err := b.throughputPaddock(ctx, conc, r)
			if err != nil {
				return err
			}
			samples["paddock"] = append(samples["paddock"], s)
			samples["cpu"] = append(samples["cpu"], cpu*1000/float64(b.o.jobs))
			sv, err := b.throughputService(ctx, conc)
			if err != nil {
				return err
			}
			samples["service"] = append(samples["service"], sv)
			if conc == 2 {
				rss = append(rss, m)
			}
			b.logf("throughput -P %d run %d/%d: paddock %.2fs (worker running %.2fs) xargs %.2fs", conc, r+1, b.o.runs, s, sv, samples["xargs"][r])
		}
		base := fmt.Sprintf("xargs -P %d", conc)
		b.add("throughput", base, "s", samples["xargs"], "", fmt.Sprintf("%d × confined /bin/true", b.o.jobs))
		b.add("throughput", fmt.Sprintf("paddock -c %d", conc), "s", samples["paddock"], base, "submit + worker --drain, 1 reactor hook")
		b.add("throughput", fmt.Sprintf("paddock -c %d, worker running", conc), "s", samples["service"], base, "submit --wait to a running worker, 1 reactor hook")
		b.add("throughput", fmt.Sprintf("paddock -c %d, worker CPU per job", conc), "ms", samples["cpu"], "", "the worker's own threads, start-up included, over the batch")
		for _, t := range []string{"parallel", "tsp"} {
			name := fmt.Sprintf("%s -j %d", t, conc)
			if t == "tsp" {
				name = fmt.Sprintf("tsp -S %d", conc)
			}
			if !wanted[t] {
				continue
			}
			if !installed[t] {
				b.note("throughput", name, "not installed")
				continue
			}
			b.add("throughput", name, "s", samples[t], base, "")
		}
	}
	b.add("memory", "worker peak RSS, throughput -c 2", "MiB", rss, "", fmt.Sprintf("%d jobs", b.o.jobs))
	return nil
}

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"paddock/hooks"
	"paddock/queue"
	"paddock/queue/postgres"
	"paddock/runner"
	"paddock/sandbox"
)

// WorkerOptions are the flags of `paddock worker`.
type WorkerOptions struct {
	// Concurrency overrides the config's concurrency when > 0.
	Concurrency int
	// Drain exits once nothing is queued or running and no inbox file waits to settle.
	Drain bool
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// CPUProfile, when not "", is a file the worker writes a CPU profile
	// of its whole run to, start-up included (hidden flag: for
	// paddock-bench and for profiling by hand).
	CPUProfile string
	// MetricsAddr, when not "", is the host:port the worker serves its
	// Prometheus metrics on, at /metrics (runner.Metrics).
	MetricsAddr string
}

// AddFlags registers the worker flags.
func (o *WorkerOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVarP(&o.Concurrency, "concurrency", "c", 0, fmt.Sprintf("jobs run at once (default: the config's concurrency, else the number of CPUs, %d)", runtime.NumCPU()))
	f.BoolVar(&o.Drain, "drain", false, "exit once nothing is queued or running and no inbox file waits to settle: 0 if every job this worker finished succeeded, 1 otherwise")
	f.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn, error (logs go to stderr; JSON with --json)")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run, start-up included, to this file (pprof format)")
	_ = f.MarkHidden("cpuprofile")
	f.StringVar(&o.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464): claims, attempts by outcome, queue depth by state, claim and hook latency, lease recoveries, store errors")
}

func newWorkerCommand(gopts *GlobalOptions) *cobra.Command {
	var opts WorkerOptions
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Claim queued jobs and run them through the hooks and the sandbox",
		Long: `Claim queued jobs and run them: hook chain, sandbox, logs, retries.

At start-up the worker loads the config, probes the sandbox once, compiles
the hook chain (cached under the state directory), recovers expired leases,
then claims. On a host where bwrap is unusable it still runs
danger_full_access jobs; every confined job fails closed with the probe's
explanation and never runs unconfined.

SIGTERM or SIGINT: stop claiming, let running jobs finish within
shutdown_grace, then stop them and give them back to the queue (their
attempts interrupted). A second signal stops at once. A signal while the
worker starts (loading its hooks) stops it before it claims anything; with
--drain it then exits 1 if jobs are left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runWorker(cmd.Context(), cmd, opts, gopts)
		},
	}
	opts.AddFlags(cmd)
	return cmd
}

func runWorker(ctx context.Context, cmd *cobra.Command, opts WorkerOptions, gopts *GlobalOptions) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(opts.LogLevel)); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", opts.LogLevel)
	}
	var handler slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})
	if gopts.JSON {
		handler = slog.NewJSONHandler(termSafeWriter{os.Stderr}, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(handler)

	if opts.CPUProfile != "" {
		f, err := os.Create(opts.CPUProfile)
		if err != nil {
			return usagef("--cpuprofile: %v", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	a, err := newApp(cmd, gopts)
	if err != nil {
		return err
	}
	if opts.Concurrency < 0 || opts.Concurrency == 0 && cmd.Flags().Changed("concurrency") {
		return usagef("--concurrency %d: must be at least 1", opts.Concurrency)
	}

	// Every signal reaches this channel once, from the start on. The
	// first stops the worker gracefully (main's NotifyContext cancels ctx
	// too; either is enough), the second stops it at once: its running
	// jobs, or its start (nothing runs yet; loading hooks without the
	// compilation cache takes seconds and cannot be interrupted). Counting
	// here, rather than watching ctx, cannot mistake the first signal for
	// the second.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, stopGraceful := context.WithCancel(ctx)
	defer stopGraceful()
	var running atomic.Pointer[runner.Worker]
	go func() {
		if _, ok := <-sigs; !ok {
			return
		}
		stopGraceful()
		if _, ok := <-sigs; ok {
			if w := running.Load(); w != nil {
				log.Warn("second signal: stopping running jobs now")
				w.Abort()
				return
			}
			log.Warn("second signal while starting: exiting now")
			os.Exit(exitFailure)
		}
	}()
	// A signal during the start makes its steps fail with "context
	// canceled"; say what happened instead.
	stoppedStarting := func() error {
		log.Info("worker stopped while starting")
		if !opts.Drain {
			return nil
		}
		if a.store == nil {
			// The signal came while the store was opening: open it
			// anyway to say what is left, as a later signal would.
			if err := a.openStore(context.WithoutCancel(ctx)); err != nil {
				return &exitCodeError{code: exitFailure, err: errors.New("stopped by a signal while starting: the queue was not drained")}
			}
			defer a.Close()
		}
		return drainLeft(ctx, a.store)
	}

	// The queue's policy names the chain, the ceilings and the fence:
	// read it first. Loading the hook chain (~0.1 s, nearly all of it
	// wazero reading and checking its compiled code) is the long pole of a
	// start; the probe (cached: a few file reads) goes beside it.
	if err := a.openStore(ctx); err != nil {
		if ctx.Err() != nil {
			return stoppedStarting()
		}
		return err
	}
	defer a.Close()
	// Which queue, said first: a worker pointed at a mistyped state
	// directory makes an empty queue there and finds nothing to do.
	switch db := (runner.StateDir{Root: a.StateDir}).Database(); {
	case a.Config.Store != "":
		log.Info("queue", "store", postgres.Redact(a.Config.Store), "state_dir", a.StateDir)
	case a.created:
		log.Warn("queue created: there was none in this state directory; check --state-dir (or $PADDOCK_STATE_DIR) if jobs were expected here", "db", db)
	default:
		log.Info("queue", "db", db)
	}
	if err := a.loadPolicy(ctx, "not running the queue's jobs"); err != nil {
		return err
	}
	type probed struct {
		rep sandbox.ProbeReport
		err error
	}
	type chained struct {
		chain *hooks.Chain
		err   error
	}
	_ = a.Fence() // built once, before the goroutines share it
	probeDone := make(chan probed, 1)
	go func() {
		rep, err := a.Probe(ctx)
		probeDone <- probed{rep, err}
	}()
	chainDone := make(chan chained, 1)
	go func() {
		chain, err := a.newChain(ctx, true) // one instance per reactor hook made ahead
		chainDone <- chained{chain, err}
	}()
	cr, pr := <-chainDone, <-probeDone
	if cr.err == nil {
		defer cr.chain.Close(context.Background())
	}
	if ctx.Err() != nil {
		return stoppedStarting()
	}
	if cr.err != nil {
		return cr.err
	}
	chain := cr.chain
	probe, probeErr := pr.rep, pr.err
	if probeErr != nil {
		log.Warn("sandbox unusable: confined jobs will fail closed; danger_full_access jobs still run", "err", probeErr, "hint", probe.Hint)
	} else {
		log.Info("sandbox", "grade", probe.Grade, "executable", probe.Executable, "version", probe.Version, "network_isolation", probe.NetworkIsolation, "cached", probe.Cached)
	}
	log.Info("policy", "sha256", cmp.Or(a.Policy.SHA256, "none set: defaults"), "max_mode", cmp.Or(a.Policy.MaxMode, string(runner.DefaultMaxMode)), "allow_network", a.Policy.AllowNetwork)
	for _, h := range chain.Hooks() {
		log.Info("hook", "name", h.Config.Name, "abi", h.ABI, "sha256", h.SHA256, "mode", h.Config.Mode)
		if h.ABI == hooks.ABINone {
			log.Warn("hook exports neither ABI: every job it sees is denied", "name", h.Config.Name, "path", h.Config.Path)
		}
	}

	// The event log wakes waits; the store is the record. A log that
	// cannot be opened does not stop the jobs (a nil log discards).
	events, err := a.Events()
	if err != nil {
		log.Warn("event log unusable: waits will poll the store instead", "err", err)
		events = nil
	}
	defer events.Close()
	in, err := a.Inbox(a.store)
	if err != nil {
		return err
	}

	ex := a.Executor(chain, probe, probeErr)
	var metrics *runner.Metrics
	if opts.MetricsAddr != "" {
		stop, m, err := serveMetrics(opts.MetricsAddr, a.store, log)
		if err != nil {
			return err
		}
		defer stop()
		metrics, ex.Metrics = m, m
	}
	w := runner.NewWorker(runner.WorkerOptions{
		Store:       a.store,
		Executor:    ex,
		Metrics:     metrics,
		Inbox:       in,
		Concurrency: opts.Concurrency,
		Drain:       opts.Drain,
		Logger:      log,
		Events:      events,
	})

	// Set after the start, whose steps (hook chain, probe, store) run side
	// by side.
	concurrency := w.Concurrency()
	if procs, set := workerProcs(concurrency, runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS")); set {
		runtime.GOMAXPROCS(procs)
		log.Debug("processors for the worker's own code", "gomaxprocs", runtime.GOMAXPROCS(0), "concurrency", concurrency)
	} else {
		log.Debug("processors for the worker's own code: as the environment says", "env", "GOMAXPROCS="+os.Getenv("GOMAXPROCS"), "processors", runtime.GOMAXPROCS(0))
	}

	running.Store(w)
	sum, err := w.Run(ctx)
	if errors.Is(err, runner.ErrPolicyMismatch) {
		return &usageError{err}
	}
	if errors.Is(err, runner.ErrDrainPaused) {
		return &exitCodeError{code: exitFailure, err: err}
	}
	if err != nil {
		return err
	}
	// The worker's own CPU time (its threads, not the jobs'): what running
	// jobs through paddock costs beside them.
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	log.Info("worker stopped", "finished", finishedText(sum.Finished), "not_succeeded", len(sum.Failed),
		"cpu_user_s", time.Duration(ru.Utime.Nano()).Seconds(), "cpu_system_s", time.Duration(ru.Stime.Nano()).Seconds())
	if opts.Drain && (len(sum.Failed) > 0 || len(sum.Rejected) > 0) {
		var why []string
		if len(sum.Failed) > 0 {
			why = append(why, fmt.Sprintf("%d job(s) did not succeed: %s", len(sum.Failed), strings.Join(sum.Failed, ", ")))
		}
		if len(sum.Rejected) > 0 {
			why = append(why, fmt.Sprintf("%d inbox file(s) were refused (the reason is in the .error file beside each): %s", len(sum.Rejected), strings.Join(sum.Rejected, ", ")))
		}
		return &exitCodeError{code: exitFailure, err: errors.New(strings.Join(why, "; "))}
	}
	if opts.Drain && ctx.Err() != nil {
		return drainLeft(ctx, a.store)
	}
	return nil
}

// finishedText says how many jobs ended in each final state, in
// lifecycle order: "succeeded=22 failed=1"; "none" when there were none.
func finishedText(finished map[queue.JobState]int) string {
	var parts []string
	for _, st := range queue.JobStates() {
		if n := finished[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", st, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// jobsPerProc is how many job slots one processor of the worker's own
// code serves when the slots fill the CPUs (see workerProcs).
const jobsPerProc = 4

// workerProcs is the GOMAXPROCS a worker of concurrency job slots runs
// with, given defaultProcs (the runtime's default: the CPUs, or the
// cgroup's CPU limit): the processors the slots leave free plus one, and
// at least one per [jobsPerProc] slots; never more than defaultProcs.
// With 2 CPUs: 2 at concurrency 1, 1 at concurrency 2 or more. set is
// false, and the runtime left alone, when the user set the GOMAXPROCS
// environment variable (env is its value) to a number the runtime takes
// (a positive integer; it ignores anything else).
//
// Why: the jobs run in their own processes; the worker's code is a few
// milliseconds of bookkeeping per job (claim, hook decision, spawn,
// record) in short bursts. With idle processors, each burst wakes the Go
// scheduler's spinning threads, which look for work to steal and sleep
// 3 µs at a time in between. When the jobs fill the CPUs, that is about
// a sixth of the worker's CPU time, taken from the jobs (docs/performance.md).
// When CPUs are left over, a second processor lets the
// worker record one job while it starts the next. One processor per four
// slots keeps up with ~250 jobs a second (at ~4 ms of CPU per job), and
// hook decisions (~0.2 ms) rarely wait for each other.
func workerProcs(concurrency, defaultProcs int, env string) (procs int, set bool) {
	if n, err := strconv.Atoi(env); err == nil && n > 0 {
		return 0, false
	}
	procs = max(defaultProcs-concurrency+1, (concurrency+jobsPerProc-1)/jobsPerProc, 1)
	return min(procs, max(defaultProcs, 1)), true
}

// drainLeft is the end of a `worker --drain` stopped by a signal: an
// exit-1 error when jobs are still queued or running, so that
// `worker --drain && next-step` does not go on while they wait.
func drainLeft(ctx context.Context, st queue.Store) error {
	counts, err := st.JobCounts(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	if left := counts[queue.StateQueued] + counts[queue.StateRunning]; left > 0 {
		return &exitCodeError{code: exitFailure, err: fmt.Errorf("stopped before the queue was drained: %d job(s) queued or running", left)}
	}
	return nil
}

// serveMetrics registers the worker's metrics (runner.Metrics) with the
// Go runtime's and the process's, and serves them at http://addr/metrics
// until stop is called. A listen failure is a usage error (exit 2).
func serveMetrics(addr string, st queue.Store, log *slog.Logger) (stop func(), m *runner.Metrics, err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if m, err = runner.NewMetrics(reg, st); err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, usagef("--metrics-addr %q: %v", addr, err)
	}
	mux := http.NewServeMux()
	// A store that cannot answer (its server down) leaves the queue's
	// depth out of the scrape; the rest, store errors included, is served.
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() { _ = srv.Close() }, m, nil
}

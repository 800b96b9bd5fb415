// Command paddock-bench measures what paddock costs, side by side with what
// a user would otherwise run, and prints one row per measurement: the
// median of several runs, the min and the max, and where there is a
// baseline, the ratio to it: the ratio of the medians, and the paired
// ratio (the median of each run's ratio to the baseline's sample of the
// same run, with their range), which the load's drift moves less.
//
// Scenarios (docs/performance.md shows a table and how to reproduce
// it):
//
//  1. throughput: N trivial confined jobs (/bin/true, workspace_write) at
//     concurrency 1 and 2 through the whole path (paddock submit, then
//     paddock worker --drain with one reactor hook and bwrap), against the
//     same confined argv run by xargs -P (the floor), GNU parallel and tsp
//     (task-spooler) when installed;
//  2. hooks: median and p99 of single decisions for the reactor (tighten),
//     command (denylist) and minimal hooks, and the chain of the three;
//  3. queue: a 10,000-job batch enqueue, claim latency with 100,000 jobs
//     queued, enqueue latency on an empty queue and on a 100,000-job one;
//  4. start: paddock worker from exec to its first claim with three hooks,
//     with and without the compilation cache;
//  5. memory: the worker's peak RSS through scenario 1 and through a job
//     that writes 2 GiB to stdout;
//  6. layers: the per-job cost of each layer of the fence (bwrap alone,
//     + --unshare-ipc, + seccomp, + the Landlock launcher, and the same
//     with paddock's binary as the launcher), the confined /bin/true argv
//     spawned as the worker spawns it, the variants in turn job by job;
//  7. hosts: 1, 2 and 4 worker processes draining one batch on one
//     SQLite state directory and, with --store postgres://..., on one
//     PostgreSQL database from state directories of their own (as
//     several hosts), with the NOTIFYs they send;
//  8. notify (with --store): 1,000 jobs/s enqueued for 5 s as single
//     jobs and in batches of 10 and 100, with 4 listening workers: the
//     NOTIFYs sent and received, each enqueue's latency to its commit and
//     the server's commits per second, against the same load on a
//     poll-only store (no NOTIFY) in the same run;
//  9. claims (not run by default): claim latency with 100,000 jobs
//     queued, plain, with a group limit that has room, and with 999 and
//     100,000 jobs the claim may not take first in claim order (of a full
//     group, of a paused group, not yet due).
//
// With --store, scenarios 3 and 9 also run on fresh PostgreSQL databases.
//
// It runs the real binaries (--paddock, default bin/paddock) and the
// example hooks (--hooks-dir, default bin/hooks): build them first with
// `make build hooks`, or run `make bench`, which does.
//
// paddock-bench is a measuring tool, not a test: it asserts no speed. The
// machine it runs on is usually shared, so it reports medians and ratios
// measured in the same run, which travel better than absolute numbers.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"paddock/sandbox"
	"paddock/sandbox/launch"
)

// options are the command-line flags.
type options struct {
	paddock    string
	hooksDir   string
	runs       int
	jobs       int
	bigRuns    int
	scenarios  string
	store      string
	baselines  string
	jsonOut    bool
	cpuProfile string
	// workerProfile, when not "", is a path prefix: each throughput run's
	// paddock worker writes its own CPU profile, start-up included, to
	// PREFIX.c<concurrency>.r<run>.pprof (the worker's hidden --cpuprofile).
	workerProfile string
	keep          bool
}

func main() {
	// The in-process worker (--cpuprofile) binds this binary into its
	// confined jobs as their launcher.
	launch.Dispatch()
	var o options
	flag.StringVar(&o.paddock, "paddock", "bin/paddock", "the paddock binary to measure")
	flag.StringVar(&o.hooksDir, "hooks-dir", "bin/hooks", "directory of the example hook modules (make hooks)")
	flag.IntVar(&o.runs, "runs", 5, "runs per measurement; each row is their median, min and max")
	flag.IntVar(&o.jobs, "jobs", 200, "jobs per throughput run")
	flag.IntVar(&o.bigRuns, "big-runs", 3, "runs of the 2 GiB-output job")
	flag.StringVar(&o.scenarios, "scenarios", "throughput,hooks,queue,start,memory,layers,hosts,notify", "comma-separated scenarios to run (claims, not run by default, too)")
	flag.StringVar(&o.baselines, "baselines", "xargs,parallel,tsp", "comma-separated tools the throughput scenario measures beside paddock, when installed; xargs, the floor, is always measured (GNU parallel takes ~3× its time)")
	flag.StringVar(&o.store, "store", "", "a PostgreSQL server (postgres://USER@HOST/DB, a user with CREATEDB): the queue and hosts scenarios also run on fresh databases there")
	flag.BoolVar(&o.jsonOut, "json", false, "print JSON lines (message_type bench_env, bench_row) instead of a markdown table")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of an in-process worker running the throughput batch (concurrency 2) to this file, and nothing else")
	flag.StringVar(&o.workerProfile, "worker-cpuprofile", "", "path prefix: each throughput run's paddock worker writes a CPU profile of its whole run (start-up included) to PREFIX.c<concurrency>.r<run>.pprof; the figures are measured as usual")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "paddock-bench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.runs < 1 || o.jobs < 1 || o.bigRuns < 1 {
		return fmt.Errorf("--runs, --jobs and --big-runs must be at least 1")
	}
	var err error
	if o.paddock, err = filepath.Abs(o.paddock); err != nil {
		return err
	}
	if o.hooksDir, err = filepath.Abs(o.hooksDir); err != nil {
		return err
	}
	probe, err := sandbox.Probe(ctx)
	if err != nil {
		return fmt.Errorf("bwrap is needed to measure confined jobs: %w", err)
	}
	scratch, err := os.MkdirTemp("", "paddock-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "scratch directory:", scratch)
	} else {
		defer os.RemoveAll(scratch)
	}
	b := &bench{o: o, scratch: scratch, probe: probe, progress: os.Stderr}

	if o.cpuProfile != "" {
		return b.profileWorker(ctx, o.cpuProfile)
	}
	for _, s := range strings.Split(o.scenarios, ",") {
		var err error
		switch strings.TrimSpace(s) {
		case "throughput":
			err = b.throughput(ctx)
		case "hooks":
			err = b.hookLatency(ctx)
		case "queue":
			err = b.queue(ctx)
		case "start":
			err = b.start(ctx)
		case "memory":
			err = b.memory(ctx)
		case "layers":
			err = b.layers(ctx)
		case "hosts":
			err = b.hosts(ctx)
		case "notify":
			err = b.notifyLoad(ctx)
		case "claims":
			err = b.claims(ctx)
		case "":
		default:
			return fmt.Errorf("--scenarios: unknown scenario %q (throughput, hooks, queue, start, memory, layers, hosts, notify, claims)", s)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	env := b.env()
	if o.jsonOut {
		return printJSON(os.Stdout, env, b.rows)
	}
	printMarkdown(os.Stdout, env, b.rows)
	return nil
}

// bench holds what every scenario shares and the rows measured so far.
type bench struct {
	o        options
	scratch  string
	probe    sandbox.ProbeReport
	rows     []Row
	progress io.Writer
	seq      int
}

// dir returns a fresh scratch subdirectory.
func (b *bench) dir(prefix string) (string, error) {
	b.seq++
	d := filepath.Join(b.scratch, fmt.Sprintf("%s-%d", prefix, b.seq))
	return d, os.MkdirAll(d, 0o755)
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "paddock-bench: "+format+"\n", args...)
}

// Env describes the machine and the run, printed above the table.
type Env struct {
	MessageType  string `json:"message_type"`
	Date         string `json:"date"`
	Host         string `json:"host"`
	CPUs         int    `json:"cpus"`
	Kernel       string `json:"kernel"`
	GoVersion    string `json:"go_version"`
	BwrapVersion string `json:"bwrap_version"`
	Grade        string `json:"grade"`
	Runs         int    `json:"runs"`
	Jobs         int    `json:"jobs"`
	Load1        string `json:"load1"`
}

func (b *bench) env() Env {
	host, _ := os.Hostname()
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	load, _ := os.ReadFile("/proc/loadavg")
	return Env{
		MessageType: "bench_env", Date: time.Now().UTC().Format(time.RFC3339), Host: host, CPUs: runtime.NumCPU(),
		Kernel: strings.TrimSpace(string(kernel)), GoVersion: runtime.Version(), BwrapVersion: b.probe.Version,
		Grade: string(b.probe.Grade), Runs: b.o.runs, Jobs: b.o.jobs, Load1: firstField(string(load)),
	}
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

// Row is one measurement: the median, min and max of Runs runs.
type Row struct {
	MessageType string  `json:"message_type"`
	Scenario    string  `json:"scenario"`
	Name        string  `json:"name"`
	Unit        string  `json:"unit"`
	Median      float64 `json:"median"`
	Min         float64 `json:"min"`
	Max         float64 `json:"max"`
	Runs        int     `json:"runs"`
	// Baseline names the row this one is compared to; Ratio is
	// Median / the baseline's Median. Empty and 0 when there is none.
	Baseline string  `json:"baseline,omitempty"`
	Ratio    float64 `json:"ratio,omitempty"`
	// PairedRatio is the median, and PairedMin and PairedMax the range,
	// of the per-run ratios: each run's sample over the baseline's sample
	// of the same run, measured minutes or seconds apart rather than
	// across the whole scenario. On a shared machine, whose load drifts
	// from minute to minute, it moves less than Ratio. 0 when the two
	// rows do not have a sample for each run.
	PairedRatio float64 `json:"paired_ratio,omitempty"`
	PairedMin   float64 `json:"paired_min,omitempty"`
	PairedMax   float64 `json:"paired_max,omitempty"`
	Note        string  `json:"note,omitempty"`

	samples []float64 // in run order
}

// add appends a row summarising samples; baseline, when not "", names an
// earlier row of the same scenario to divide by.
func (b *bench) add(scenario, name, unit string, samples []float64, baseline, note string) Row {
	r := Row{MessageType: "bench_row", Scenario: scenario, Name: name, Unit: unit, Runs: len(samples), Note: note, samples: slices.Clone(samples)}
	if len(samples) > 0 {
		s := slices.Clone(samples)
		slices.Sort(s)
		r.Median, r.Min, r.Max = median(s), s[0], s[len(s)-1]
	}
	if baseline != "" {
		for _, br := range b.rows {
			if br.Scenario != scenario || br.Name != baseline || br.Median <= 0 {
				continue
			}
			r.Baseline, r.Ratio = baseline, r.Median/br.Median
			if len(br.samples) == len(samples) && len(samples) > 0 && !slices.Contains(br.samples, 0) {
				ratios := make([]float64, len(samples))
				for i := range samples {
					ratios[i] = samples[i] / br.samples[i]
				}
				slices.Sort(ratios)
				r.PairedRatio, r.PairedMin, r.PairedMax = median(ratios), ratios[0], ratios[len(ratios)-1]
			}
		}
	}
	b.rows = append(b.rows, r)
	b.logf("%-10s %-44s median %s %s (min %s, max %s)%s", scenario, name, num(r.Median), unit, num(r.Min), num(r.Max), ratioText(r))
	return r
}

// note appends a row that carries only a note (a baseline not installed).
func (b *bench) note(scenario, name, note string) {
	b.rows = append(b.rows, Row{MessageType: "bench_row", Scenario: scenario, Name: name, Note: note})
	b.logf("%-10s %-44s %s", scenario, name, note)
}

func ratioText(r Row) string {
	if r.Baseline == "" {
		return ""
	}
	return ", " + ratioCell(r)
}

// ratioCell is the ratio column of a row with a baseline: the ratio of
// the medians, and the paired ratio when there is one.
func ratioCell(r Row) string {
	s := fmt.Sprintf("%.2f× %s", r.Ratio, r.Baseline)
	if r.PairedRatio > 0 {
		s += fmt.Sprintf("; paired %.2f× (%.2f–%.2f)", r.PairedRatio, r.PairedMin, r.PairedMax)
	}
	return s
}

// median of sorted s.
func median(s []float64) float64 {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile of sorted s (nearest rank), p in (0,100].
func percentile(s []float64, p float64) float64 {
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

// num formats a figure with three significant digits.
func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

func printJSON(w io.Writer, env Env, rows []Row) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(env); err != nil {
		return err
	}
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

func printMarkdown(w io.Writer, env Env, rows []Row) {
	fmt.Fprintf(w, "%s, %d CPUs, Linux %s, %s, bwrap %s (grade %s), load %s; median of %d runs (min–max), %d jobs per throughput run\n\n",
		env.Date[:10], env.CPUs, env.Kernel, env.GoVersion, env.BwrapVersion, env.Grade, env.Load1, env.Runs, env.Jobs)
	fmt.Fprintln(w, "| scenario | measurement | median | min – max | ratio |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: |")
	for _, r := range rows {
		if r.Runs == 0 {
			fmt.Fprintf(w, "| %s | %s | %s | | |\n", r.Scenario, r.Name, r.Note)
			continue
		}
		ratio := ""
		if r.Baseline != "" {
			ratio = ratioCell(r)
		}
		name := r.Name
		if r.Note != "" {
			name += " (" + r.Note + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s %s | %s – %s | %s |\n", r.Scenario, name, num(r.Median), r.Unit, num(r.Min), num(r.Max), ratio)
	}
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"paddock/cmd/internal/compose"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/runner"
)

// start is scenario 4.
func (b *bench) start(ctx context.Context) error {
	in, err := b.newInstall("start", b.startConfig())
	if err != nil {
		return err
	}
	var cold, warm []float64
	for i := range b.o.runs {
		c, err := b.startOnceNamed(ctx, in, true, fmt.Sprintf("cold-%d", i))
		if err != nil {
			return err
		}
		w, err := b.startOnceNamed(ctx, in, false, fmt.Sprintf("warm-%d", i))
		if err != nil {
			return err
		}
		cold = append(cold, c*1e3)
		warm = append(warm, w*1e3)
	}
	b.add("start", "exec → first claim, 3 hooks, no compilation cache", "ms", cold, "", "")
	b.add("start", "exec → first claim, 3 hooks, warm compilation cache", "ms", warm, "exec → first claim, 3 hooks, no compilation cache", "")
	return nil
}

// startOnceNamed is one run of scenario 4: a worker started on a state
// directory with one queued job (named name); seconds from exec to its
// "claimed" log line. With cold, the compilation cache is removed first.
func (b *bench) startOnceNamed(ctx context.Context, in *install, cold bool, name string) (float64, error) {
	if cold {
		if err := os.RemoveAll((&compose.Install{StateDir: in.state}).HookCacheDir()); err != nil {
			return 0, err
		}
	}
	// The workspace must not contain the state directory: paddock
	// refuses such a job (it could rewrite the queue).
	ws := filepath.Join(in.dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return 0, err
	}
	job := filepath.Join(in.dir, name+".toml")
	if err := os.WriteFile(job, fmt.Appendf(nil, "name = %q\nmode = \"workspace_write\"\nworkspace = %q\ncommand = [\"/bin/true\"]\n", name, ws), 0o600); err != nil {
		return 0, err
	}
	if err := in.run(ctx, "submit", job); err != nil {
		return 0, err
	}
	w := in.cmd(ctx, "worker", "--drain", "--concurrency", "1", "--log-level", "info")
	pipe, err := w.StderrPipe()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := w.Start(); err != nil {
		return 0, err
	}
	var took float64
	sc := bufio.NewScanner(pipe)
	var seen []string
	for sc.Scan() {
		line := sc.Text()
		if took == 0 && strings.Contains(line, "msg=claimed") {
			took = time.Since(t0).Seconds()
		}
		seen = append(seen, line)
	}
	if err := w.Wait(); err != nil {
		return 0, fmt.Errorf("worker: %w: %s", err, strings.Join(seen, "\n"))
	}
	if took == 0 {
		return 0, fmt.Errorf("the worker never logged a claim: %s", strings.Join(seen, "\n"))
	}
	return took, nil
}

// memory is the second half of scenario 5: a job that writes 2 GiB to
// stdout (the log keeps log_max_bytes of it).
func (b *bench) memory(ctx context.Context) error {
	var rss, wall []float64
	for i := range b.o.bigRuns {
		in, err := b.newInstall("memory", "")
		if err != nil {
			return err
		}
		job := filepath.Join(in.dir, "big.toml")
		if err := os.WriteFile(job, []byte("name = \"two-gib\"\nmode = \"read_only\"\ncommand = \"head -c 2147483648 /dev/zero\"\n"), 0o600); err != nil {
			return err
		}
		if err := in.run(ctx, "submit", job); err != nil {
			return err
		}
		w := in.cmd(ctx, "worker", "--drain", "--concurrency", "1", "--log-level", "warn")
		t0 := time.Now()
		m, _, err := runSampled(w)
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		wall = append(wall, time.Since(t0).Seconds())
		rss = append(rss, m)
		b.logf("memory run %d/%d: %.1f MiB, %.1fs", i+1, b.o.bigRuns, m, wall[len(wall)-1])
		_ = os.RemoveAll(in.dir)
	}
	b.add("memory", "worker peak RSS, one job writing 2 GiB to stdout", "MiB", rss, "", "log capped at 16 MiB")
	b.add("memory", "wall time of that job", "s", wall, "", "")
	return nil
}

// profileWorker runs the throughput batch (concurrency 2) through a worker
// built in this process exactly as `paddock worker` builds it, under a CPU
// profile written to path (and an execution trace beside it, path+".trace").
func (b *bench) profileWorker(ctx context.Context, path string) error {
	in, err := b.newInstall("profile", b.throughputConfig())
	if err != nil {
		return err
	}
	ws := filepath.Join(in.dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return err
	}
	jobs := filepath.Join(in.dir, "jobs.toml")
	if err := trivialBatch(jobs, ws, b.o.jobs); err != nil {
		return err
	}
	cfg, err := runner.LoadConfig(in.config, false)
	if err != nil {
		return err
	}
	cfg.Concurrency = 2
	if err := os.MkdirAll(in.state, 0o700); err != nil {
		return err
	}
	// Assembled as `paddock worker` assembles it (compose).
	inst := &compose.Install{Config: cfg, StateDir: in.state}
	st, err := inst.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := inst.LoadPolicy(ctx, st); err != nil {
		return err
	}
	specs, data, err := jobspec.ParseFile(jobs)
	if err != nil {
		return err
	}
	if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: string(data), SourcePath: jobs}); err != nil {
		return err
	}
	chain, err := inst.Chain(ctx, true)
	if err != nil {
		return err
	}
	defer chain.Close(context.Background())
	events, err := inst.Events()
	if err != nil {
		return err
	}
	defer events.Close()
	probe, probeErr := inst.Probe(ctx)
	w := runner.NewWorker(runner.WorkerOptions{
		Store:    st,
		Executor: inst.Executor(chain, probe, probeErr),
		Drain:    true, Concurrency: 2, Events: events,
	})
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tf, err := os.Create(path + ".trace")
	if err != nil {
		return err
	}
	defer tf.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	if err := trace.Start(tf); err != nil {
		return err
	}
	t0 := time.Now()
	sum, err := w.Run(ctx)
	took := time.Since(t0)
	trace.Stop()
	pprof.StopCPUProfile()
	if err != nil {
		return err
	}
	b.logf("in-process worker: %d jobs in %.2fs (%d succeeded); profile %s, trace %s.trace", b.o.jobs, took.Seconds(), sum.Finished[queue.StateSucceeded], path, path)
	return nil
}

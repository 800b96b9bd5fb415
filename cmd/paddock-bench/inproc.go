package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"paddock/hooks"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/sqlite"
	"paddock/runner"
)

// benchJob is a realistic job as the chain sees it.
func benchJob(ws string) hooks.Job {
	return hooks.Job{
		ID: "0123456789abcdef", Name: "nightly-report", Argv: []string{"git", "-C", ws, "log", "--oneline", "-n", "20"},
		Env: map[string]string{"LANG": "C.UTF-8", "TZ": "UTC"}, Cwd: ws, Workspace: ws,
		Mode: "workspace_write", Network: true, TimeoutS: 300, Attempt: 1,
		Labels: map[string]string{"team": "infra"},
	}
}

func (b *bench) hookConfig(name string) hooks.Config {
	cfg := hooks.Config{Name: name, Path: filepath.Join(b.o.hooksDir, name+".wasm")}
	switch name {
	case "denylist":
		cfg.Settings = map[string]any{"deny": []string{"curl", "wget", "nc", "ssh", "scp"}}
	case "tighten":
		cfg.Settings = map[string]any{"dry_run": []string{"rsync"}}
	}
	return cfg
}

// hookLatency is scenario 2: single decisions through hooks.Chain with the
// worker's sandbox callback, in this process.
func (b *bench) hookLatency(ctx context.Context) error {
	ws, err := b.dir("hooks-ws")
	if err != nil {
		return err
	}
	cases := []struct {
		name  string
		hooks []string
	}{
		{"reactor (tighten)", []string{"tighten"}},
		{"minimal reactor (minimal-reactor)", []string{"minimal-reactor"}},
		{"command (denylist)", []string{"denylist"}},
		{"minimal command (minimal)", []string{"minimal"}},
		{"chain of three (denylist, tighten, minimal)", []string{"denylist", "tighten", "minimal"}},
	}
	for _, c := range cases {
		var cfgs []hooks.Config
		for _, h := range c.hooks {
			cfgs = append(cfgs, b.hookConfig(h))
		}
		ch, err := hooks.NewChain(ctx, hooks.ChainOptions{Hooks: cfgs, Sandbox: runner.SandboxInfo})
		if err != nil {
			return err
		}
		p := hooks.DecideParams{Job: benchJob(ws)}
		if res, err := ch.Decide(ctx, p); err != nil || res.Verdict != hooks.VerdictAllow {
			ch.Close(ctx)
			return fmt.Errorf("%s: warm-up decision: %v %s", c.name, err, res.Reason)
		}
		var p50s, p99s []float64
		var count int
		for range b.o.runs {
			// Each run: decisions for 1s of wall time, at least 50.
			var d []float64
			end := time.Now().Add(time.Second)
			for len(d) < 50 || time.Now().Before(end) {
				t0 := time.Now()
				if _, err := ch.Decide(ctx, p); err != nil {
					ch.Close(ctx)
					return err
				}
				d = append(d, float64(time.Since(t0).Nanoseconds())/1e3)
			}
			slices.Sort(d)
			p50s = append(p50s, median(d))
			p99s = append(p99s, percentile(d, 99))
			count = len(d)
		}
		ch.Close(ctx)
		b.add("hooks", c.name+" p50", "µs", p50s, "", "")
		b.add("hooks", c.name+" p99", "µs", p99s, "", fmt.Sprintf("~%d decisions per run", count))
	}
	return nil
}

// queue is scenario 3, on the SQLite store in this process.
func (b *bench) queue(ctx context.Context) error {
	spec := func(i int, prefix string) jobspec.Spec {
		return jobspec.Spec{Name: fmt.Sprintf("%s%d", prefix, i), Command: []string{"/usr/bin/env", "echo", "job"}, Mode: "workspace_write", Retries: 2, Labels: map[string]string{"batch": "bench"}}
	}
	batch := func(n int, prefix string) []jobspec.Spec {
		s := make([]jobspec.Spec, n)
		for i := range s {
			s[i] = spec(i, prefix)
		}
		return s
	}
	// 10,000-job batch: one JobEnqueue on a fresh store per run.
	var enq10k []float64
	specs := batch(10_000, "b")
	for range b.o.runs {
		dir, err := b.dir("queue")
		if err != nil {
			return err
		}
		st, err := sqlite.Open(ctx, filepath.Join(dir, "q.db"), sqlite.Options{})
		if err != nil {
			return err
		}
		t0 := time.Now()
		_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: "bench"})
		enq10k = append(enq10k, time.Since(t0).Seconds()*1e3)
		st.Close()
		if err != nil {
			return err
		}
	}
	b.add("queue", "enqueue a 10,000-job batch", "ms", enq10k, "", "one transaction")

	// One store grown to 100,000 queued jobs; single-job enqueues are
	// timed on the empty store and on the full one, claims on the full one.
	dir, err := b.dir("queue-100k")
	if err != nil {
		return err
	}
	st, err := sqlite.Open(ctx, filepath.Join(dir, "q.db"), sqlite.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	const ops = 200
	single := func(prefix string) ([]float64, error) {
		var p50s []float64
		for r := range b.o.runs {
			d := make([]float64, 0, ops)
			for i := range ops {
				s := []jobspec.Spec{spec(i, fmt.Sprintf("%s-%d-", prefix, r))}
				t0 := time.Now()
				if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: s, Source: "bench"}); err != nil {
					return nil, err
				}
				d = append(d, float64(time.Since(t0).Nanoseconds())/1e3)
			}
			slices.Sort(d)
			p50s = append(p50s, median(d))
		}
		return p50s, nil
	}
	empty, err := single("empty")
	if err != nil {
		return err
	}
	b.add("queue", "enqueue 1 job, queue empty", "µs", empty, "", fmt.Sprintf("median of %d per run", ops))
	for i := range 10 {
		if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: batch(10_000, fmt.Sprintf("fill%d-", i)), Source: "bench"}); err != nil {
			return err
		}
	}
	full, err := single("full")
	if err != nil {
		return err
	}
	b.add("queue", "enqueue 1 job, 100,000 queued", "µs", full, "enqueue 1 job, queue empty", fmt.Sprintf("median of %d per run; ratio = flatness", ops))
	var claims, claimsP99 []float64
	for range b.o.runs {
		d := make([]float64, 0, ops)
		for range ops {
			t0 := time.Now()
			jobs, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "bench", Limit: 1, Lease: time.Minute})
			if err != nil {
				return err
			}
			if len(jobs) != 1 {
				return fmt.Errorf("claim returned %d jobs", len(jobs))
			}
			d = append(d, float64(time.Since(t0).Nanoseconds())/1e3)
		}
		slices.Sort(d)
		claims = append(claims, median(d))
		claimsP99 = append(claimsP99, percentile(d, 99))
	}
	b.add("queue", "claim 1 job, 100,000 queued, p50", "µs", claims, "", "")
	b.add("queue", "claim 1 job, 100,000 queued, p99", "µs", claimsP99, "", fmt.Sprintf("%d claims per run", ops))
	return nil
}

// startConfig is a config with three hooks.
func (b *bench) startConfig() string {
	var s strings.Builder
	for _, h := range []string{"denylist", "tighten", "minimal"} {
		cfg := b.hookConfig(h)
		fmt.Fprintf(&s, "[[hook]]\nname = %q\npath = %q\n", cfg.Name, cfg.Path)
		switch h {
		case "denylist":
			s.WriteString("settings = { deny = [\"curl\", \"wget\"] }\n")
		case "tighten":
			s.WriteString("settings = { dry_run = [\"rsync\"] }\n")
		}
	}
	return s.String()
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"paddock/hooks"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/postgres"
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

// storeOpener opens the store of a scenario in dir (a scratch directory;
// a paddock state directory for the reads of the SQLite queue); close
// releases it.
type storeOpener func(ctx context.Context, dir string) (st queue.Store, close func(), err error)

// queue is scenario 3 on the SQLite store in this process, and, with
// --store, on a fresh PostgreSQL database of that server per store (rows
// prefixed "postgres: "; the reads through the binary run on SQLite
// only).
func (b *bench) queue(ctx context.Context) error {
	sqliteOpen := func(ctx context.Context, dir string) (queue.Store, func(), error) {
		st, err := sqlite.Open(ctx, filepath.Join(dir, "paddock.db"), sqlite.Options{})
		if err != nil {
			return nil, nil, err
		}
		return st, func() { st.Close() }, nil
	}
	if err := b.queueOn(ctx, "", sqliteOpen); err != nil {
		return err
	}
	if b.o.store == "" {
		return nil
	}
	pgOpen := func(ctx context.Context, _ string) (queue.Store, func(), error) {
		url, drop, err := b.pgDatabase(ctx)
		if err != nil {
			return nil, nil, err
		}
		st, err := postgres.Open(ctx, url, postgres.Options{})
		if err != nil {
			drop()
			return nil, nil, err
		}
		return st, func() { st.Close(); drop() }, nil
	}
	return b.queueOn(ctx, "postgres: ", pgOpen)
}

// queueOn measures scenario 3 on the stores open makes, naming rows with
// prefix; with prefix "" it also times the reads (queueReads).
func (b *bench) queueOn(ctx context.Context, prefix string, open storeOpener) error {
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
		st, closeStore, err := open(ctx, dir)
		if err != nil {
			return err
		}
		t0 := time.Now()
		_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: "bench"})
		enq10k = append(enq10k, time.Since(t0).Seconds()*1e3)
		closeStore()
		if err != nil {
			return err
		}
	}
	b.add("queue", prefix+"enqueue a 10,000-job batch", "ms", enq10k, "", "one transaction")

	// One store grown to 100,000 queued jobs; single-job enqueues are
	// timed on the empty store and on the full one, claims on the full
	// one. It is a paddock state directory, so that the reads below run
	// the real binary on it.
	big, err := b.newInstall("queue-100k", "")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(big.state, 0o700); err != nil {
		return err
	}
	st, closeStore, err := open(ctx, big.state)
	if err != nil {
		return err
	}
	defer closeStore()
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
	b.add("queue", prefix+"enqueue 1 job, queue empty", "µs", empty, "", fmt.Sprintf("median of %d per run", ops))
	for i := range 10 {
		if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: batch(10_000, fmt.Sprintf("fill%d-", i)), Source: "bench"}); err != nil {
			return err
		}
	}
	full, err := single("full")
	if err != nil {
		return err
	}
	b.add("queue", prefix+"enqueue 1 job, 100,000 queued", "µs", full, prefix+"enqueue 1 job, queue empty", fmt.Sprintf("median of %d per run; ratio = flatness", ops))
	// Claims, in turn within each run: plain; with a group limit in force
	// (a limited group with slots left makes the claim count each job
	// against it: the claim's second form); with 1,000 jobs of a full
	// group ahead of every other in claim order (the claim walks past
	// them in the index).
	claimOnce := func() (float64, error) {
		t0 := time.Now()
		jobs, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "bench", Limit: 1, Lease: time.Minute})
		if err != nil {
			return 0, err
		}
		if len(jobs) != 1 {
			return 0, fmt.Errorf("claim returned %d jobs", len(jobs))
		}
		return float64(time.Since(t0).Nanoseconds()) / 1e3, nil
	}
	claimRun := func() ([]float64, error) {
		d := make([]float64, 0, ops)
		for range ops {
			us, err := claimOnce()
			if err != nil {
				return nil, err
			}
			d = append(d, us)
		}
		slices.Sort(d)
		return d, nil
	}
	limit := func(name string, n int) error {
		_, err := st.GroupLimitSet(ctx, &queue.GroupLimitSetParams{Name: name, Limit: n})
		return err
	}
	var claims, claimsP99, limited, blocked []float64
	for r := range b.o.runs {
		d, err := claimRun()
		if err != nil {
			return err
		}
		claims = append(claims, median(d))
		claimsP99 = append(claimsP99, percentile(d, 99))
		if err := limit("bench-room", 1_000_000); err != nil {
			return err
		}
		if d, err = claimRun(); err != nil {
			return err
		}
		limited = append(limited, median(d))
		if err := limit("bench-room", 0); err != nil {
			return err
		}
		full := batch(1_000, fmt.Sprintf("gpu%d-", r))
		for i := range full {
			full[i].Group, full[i].Priority = fmt.Sprintf("gpu%d", r), 1
		}
		if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: full, Source: "bench"}); err != nil {
			return err
		}
		if err := limit(fmt.Sprintf("gpu%d", r), 1); err != nil {
			return err
		}
		if _, err := claimOnce(); err != nil { // takes the group's one slot
			return err
		}
		if d, err = claimRun(); err != nil {
			return err
		}
		blocked = append(blocked, median(d))
		// Out of the next run's way.
		left, err := st.JobList(ctx, &queue.JobListParams{NameGlob: fmt.Sprintf("gpu%d-*", r), States: []queue.JobState{queue.StateQueued}})
		if err != nil {
			return err
		}
		for _, j := range left {
			if _, err := st.JobCancel(ctx, j.ID); err != nil {
				return err
			}
		}
	}
	b.add("queue", prefix+"claim 1 job, 100,000 queued, p50", "µs", claims, "", "")
	b.add("queue", prefix+"claim 1 job, 100,000 queued, p99", "µs", claimsP99, "", fmt.Sprintf("%d claims per run", ops))
	b.add("queue", prefix+"claim 1 job, 100,000 queued, a group limit with room, p50", "µs", limited, prefix+"claim 1 job, 100,000 queued, p50", "the claim counts each job against the limit")
	b.add("queue", prefix+"claim 1 job, 100,000 queued, 999 of a full group first, p50", "µs", blocked, prefix+"claim 1 job, 100,000 queued, p50", "the claim walks past them in its index")
	if prefix != "" {
		return nil
	}
	return b.queueReads(ctx, big)
}

// queueReads times the reads a user runs, through the real binary: ls
// (the newest 50), show and ls --json --limit 0 on the 100,000-job state
// directory of big, against ls and show on a 1-job one, in turn. The job
// shown came from a 5 MB job file, which show does not read.
func (b *bench) queueReads(ctx context.Context, big *install) error {
	small, err := b.newInstall("queue-1", "")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(small.state, 0o700); err != nil {
		return err
	}
	bigFile := "# " + strings.Repeat("x", 5<<20) + "\n"
	for _, in := range []*install{big, small} {
		st, err := sqlite.Open(ctx, filepath.Join(in.state, "paddock.db"), sqlite.Options{})
		if err != nil {
			return err
		}
		// Held open while the reads run, as a running worker holds its
		// queue (the 100,000-job store is open in this process too): the
		// last process to close a database removes its WAL, and the next
		// one to open it pays to make it again.
		defer st.Close()
		if _, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "big-file", Command: []string{"true"}}}, Source: bigFile}); err != nil {
			return err
		}
	}
	timed := func(in *install, args ...string) (float64, error) {
		c := in.cmd(ctx, args...)
		var errb bytes.Buffer
		c.Stdout, c.Stderr = io.Discard, &errb
		t0 := time.Now()
		if err := c.Run(); err != nil {
			return 0, fmt.Errorf("paddock %s: %w: %s", strings.Join(args, " "), err, lastLines(errb.String(), 5))
		}
		return time.Since(t0).Seconds() * 1e3, nil
	}
	const per = 5 // invocations per run; the run's figure is their median
	type read struct {
		name, baseline, note string
		in                   *install
		args                 []string
		samples              []float64
	}
	reads := []*read{
		{name: "ls (newest 50), 1 job", in: small, args: []string{"ls"}},
		{name: "ls (newest 50), 100,000 jobs", baseline: "ls (newest 50), 1 job", in: big, args: []string{"ls"}},
		{name: "show, 1 job (5 MB job file)", in: small, args: []string{"show", "big-file"}},
		{name: "show, 100,000 jobs (5 MB job file)", baseline: "show, 1 job (5 MB job file)", in: big, args: []string{"show", "big-file"}},
		{name: "ls --json --limit 0, 1 job", in: small, args: []string{"--json", "ls", "--limit", "0"}},
		{name: "ls --json --limit 0, 100,000 jobs", baseline: "ls --json --limit 0, 1 job", in: big, args: []string{"--json", "ls", "--limit", "0"}, note: "every job, with created, started, finished"},
	}
	// Each read and its baseline run in turn, invocation by invocation,
	// so that the machine's drift falls on both alike.
	for range b.o.runs {
		d := make([][]float64, len(reads))
		for range per {
			for i, rd := range reads {
				ms, err := timed(rd.in, rd.args...)
				if err != nil {
					return err
				}
				d[i] = append(d[i], ms)
			}
		}
		for i, rd := range reads {
			rd.samples = append(rd.samples, medianOf(d[i]))
		}
	}
	for _, rd := range reads {
		b.add("queue", rd.name, "ms", rd.samples, rd.baseline, strings.TrimPrefix(rd.note+fmt.Sprintf("; median of %d invocations of the paddock binary per run", per), "; "))
	}
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

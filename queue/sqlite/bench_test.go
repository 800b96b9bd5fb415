package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/sqlite"
)

// cpuTime is the process's user+system CPU time. Benchmarks report it per
// operation beside wall time because the development machine is shared:
// wall time grows with other people's load, CPU time much less.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// batchTOML returns a file of n [[job]] tables like a real batch.
func batchTOML(n int, prefix string) []byte {
	var b strings.Builder
	b.WriteString("[defaults]\nmode = \"workspace_write\"\nretries = 2\nlabels = { batch = \"bench\" }\n\n")
	for i := range n {
		fmt.Fprintf(&b, "[[job]]\nname = \"%s%d\"\ncommand = [\"/usr/bin/env\", \"echo\", \"job %d\"]\ntimeout = \"5m\"\npriority = %d\n\n", prefix, i, i, i%4)
	}
	return []byte(b.String())
}

func openBench(b *testing.B) *sqlite.Store {
	b.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "q.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// BenchmarkEnqueueBatch10k: a 10,000-job TOML file from text to commit
// (Parse, then one JobEnqueue transaction).
func BenchmarkEnqueueBatch10k(b *testing.B) {
	ctx := context.Background()
	data := batchTOML(10_000, "j")
	b.SetBytes(int64(len(data)))
	var cpu time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		st := openBench(b) // fresh store: the names must be free
		b.StartTimer()
		c0 := cpuTime()
		specs, err := jobspec.Parse("bench.toml", data, "/srv")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: string(data)}); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - c0
		n++
		b.StopTimer()
		st.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Milliseconds())/float64(n), "cpu-ms/op")
}

// BenchmarkClaim100k: claim latency (one job per claim) with 100,000 jobs
// queued. Reports the median as p50-ns.
func BenchmarkClaim100k(b *testing.B) {
	ctx := context.Background()
	st := openBench(b)
	fill := func() {
		for i := range 10 {
			specs := make([]jobspec.Spec, 10_000)
			for j := range specs {
				specs[j] = jobspec.Spec{Command: []string{"true"}, Priority: (i*10_000 + j) % 4, Labels: map[string]string{"b": "c"}}
			}
			if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs}); err != nil {
				b.Fatal(err)
			}
		}
	}
	fill()
	var lat []time.Duration
	claimed := 0
	var cpu time.Duration
	c0 := cpuTime()
	for b.Loop() {
		if claimed == 50_000 {
			b.StopTimer()
			cpu += cpuTime() - c0
			fill()
			claimed = 0
			c0 = cpuTime()
			b.StartTimer()
		}
		t0 := time.Now()
		got, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 1})
		lat = append(lat, time.Since(t0))
		if err != nil || len(got) != 1 {
			b.Fatal(err, len(got))
		}
		claimed++
	}
	cpu += cpuTime() - c0
	slices.Sort(lat)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(len(lat)), "cpu-ns/op")
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkEnqueueFlat enqueues 100,000 named jobs one per transaction and
// compares the first and the last 1,000: median latency (robust to other
// people's load spikes), mean latency, and CPU time. The last/first ratio
// must stay under 1.5.
func BenchmarkEnqueueFlat(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		st := openBench(b)
		b.StartTimer()
		const n, w = 100_000, 1000
		var first, last []time.Duration
		var cpuFirst, cpuLast, c0 time.Duration
		for i := range n {
			if i == 0 || i == n-w {
				c0 = cpuTime()
			}
			spec := jobspec.Spec{Name: fmt.Sprintf("job-%d", i), Command: []string{"echo", "x"}, Priority: i % 4, Labels: map[string]string{"k": "v"}}
			t0 := time.Now()
			if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{spec}, Source: "name = \"x\"\ncommand = [\"echo\", \"x\"]\n"}); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			switch {
			case i < w:
				first = append(first, d)
				if i == w-1 {
					cpuFirst = cpuTime() - c0
				}
			case i >= n-w:
				last = append(last, d)
				if i == n-1 {
					cpuLast = cpuTime() - c0
				}
			}
		}
		p50 := func(d []time.Duration) float64 {
			slices.Sort(d)
			return float64(d[len(d)/2].Nanoseconds()) / 1e3
		}
		mean := func(d []time.Duration) float64 {
			var t time.Duration
			for _, x := range d {
				t += x
			}
			return float64(t.Nanoseconds()) / float64(len(d)) / 1e3
		}
		pf, pl := p50(first), p50(last)
		b.ReportMetric(pf, "first1k-p50-µs")
		b.ReportMetric(pl, "last1k-p50-µs")
		b.ReportMetric(pl/pf, "p50-last/first")
		b.ReportMetric(mean(last)/mean(first), "mean-last/first")
		b.ReportMetric(float64(cpuLast)/float64(cpuFirst), "cpu-last/first")
		b.StopTimer()
		st.Close()
		b.StartTimer()
	}
}

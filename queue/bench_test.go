package queue_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"paddock/queue"
)

// batchTOML returns a file of n [[job]] tables like a real batch.
func batchTOML(n int, prefix string) []byte {
	var b strings.Builder
	b.WriteString("[defaults]\nmode = \"workspace_write\"\nretries = 2\nlabels = { batch = \"bench\" }\n\n")
	for i := range n {
		fmt.Fprintf(&b, "[[job]]\nname = \"%s%d\"\ncommand = [\"/usr/bin/env\", \"echo\", \"job %d\"]\ntimeout = \"5m\"\npriority = %d\n\n", prefix, i, i, i%4)
	}
	return []byte(b.String())
}

func openBench(b *testing.B) *queue.SQLiteStore {
	b.Helper()
	st, err := queue.OpenSQLite(context.Background(), filepath.Join(b.TempDir(), "q.db"), queue.SQLiteOptions{})
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
	for b.Loop() {
		b.StopTimer()
		st := openBench(b) // fresh store: the names must be free
		b.StartTimer()
		specs, err := queue.Parse("bench.toml", data, "/srv")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: string(data)}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		st.Close()
		b.StartTimer()
	}
}

// BenchmarkClaim100k: claim latency (one job per claim) with 100,000 jobs
// queued. Reports the median as p50-ns.
func BenchmarkClaim100k(b *testing.B) {
	ctx := context.Background()
	st := openBench(b)
	fill := func() {
		for i := range 10 {
			specs := make([]queue.Spec, 10_000)
			for j := range specs {
				specs[j] = queue.Spec{Command: []string{"true"}, Priority: (i*10_000 + j) % 4, Labels: map[string]string{"b": "c"}}
			}
			if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs}); err != nil {
				b.Fatal(err)
			}
		}
	}
	fill()
	var lat []time.Duration
	claimed := 0
	for b.Loop() {
		if claimed == 50_000 {
			b.StopTimer()
			fill()
			claimed = 0
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
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// BenchmarkEnqueueFlat enqueues 100,000 named jobs one per transaction and
// compares the mean latency of the first and last 1,000 (ratio must stay
// under 1.5).
func BenchmarkEnqueueFlat(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		st := openBench(b)
		b.StartTimer()
		const n = 100_000
		var first, last time.Duration
		for i := range n {
			spec := queue.Spec{Name: fmt.Sprintf("job-%d", i), Command: []string{"echo", "x"}, Priority: i % 4, Labels: map[string]string{"k": "v"}}
			t0 := time.Now()
			if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []queue.Spec{spec}, Source: "name = \"x\"\ncommand = [\"echo\", \"x\"]\n"}); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t0)
			if i < 1000 {
				first += d
			} else if i >= n-1000 {
				last += d
			}
		}
		b.ReportMetric(float64(first.Microseconds())/1000, "first1k-µs/op")
		b.ReportMetric(float64(last.Microseconds())/1000, "last1k-µs/op")
		b.ReportMetric(float64(last)/float64(first), "last/first")
		b.StopTimer()
		st.Close()
		b.StartTimer()
	}
}

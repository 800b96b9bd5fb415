package queue_test

import (
	"testing"

	"github.com/BurntSushi/toml"

	"paddock/queue"
)

func BenchmarkParse10k(b *testing.B) {
	data := batchTOML(10_000, "j")
	for b.Loop() {
		if _, err := queue.Parse("bench.toml", data, "/srv"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTOMLDecode10k(b *testing.B) {
	data := string(batchTOML(10_000, "j"))
	for b.Loop() {
		var m map[string]any
		if _, err := toml.Decode(data, &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnqueueOnly10k(b *testing.B) {
	data := batchTOML(10_000, "j")
	specs, err := queue.Parse("bench.toml", data, "/srv")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		st := openBench(b)
		b.StartTimer()
		if _, err := st.JobEnqueue(b.Context(), &queue.JobEnqueueParams{Specs: specs, Source: string(data)}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		st.Close()
		b.StartTimer()
	}
}

package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPairedRatio: a row with a baseline gets the ratio of the medians,
// and the median and range of the per-run ratios, which cancel a load
// that drifts across runs; without a sample per run there is no paired
// ratio.
func TestPairedRatio(t *testing.T) {
	b := &bench{progress: io.Discard}
	// The machine slows down run by run; the tool costs 10% more than
	// the baseline in every run.
	b.add("throughput", "xargs", "s", []float64{10, 20, 30, 40, 50}, "", "")
	r := b.add("throughput", "paddock", "s", []float64{11, 22, 33, 44, 55}, "xargs", "")
	require.InDelta(t, 1.10, r.Ratio, 1e-9)
	require.InDelta(t, 1.10, r.PairedRatio, 1e-9)
	require.InDelta(t, 1.10, r.PairedMin, 1e-9)
	require.InDelta(t, 1.10, r.PairedMax, 1e-9)

	// Run order matters: the same samples, shuffled against the runs.
	r = b.add("throughput", "shuffled", "s", []float64{55, 11, 44, 22, 33}, "xargs", "")
	require.InDelta(t, 1.10, r.Ratio, 1e-9, "the medians do not see the order")
	require.InDelta(t, 0.66, r.PairedRatio, 1e-9) // per-run ratios 5.5, 0.55, 1.47, 0.55, 0.66
	require.InDelta(t, 0.55, r.PairedMin, 1e-9)
	require.InDelta(t, 5.5, r.PairedMax, 1e-9)

	r = b.add("throughput", "fewer runs", "s", []float64{11, 22}, "xargs", "")
	require.Zero(t, r.PairedRatio, "no sample for each run")
	require.Equal(t, "1.10× xargs; paired 1.10× (1.10–1.10)", ratioCell(b.rows[1]))
}

package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
)

// worker --metrics-addr serves Prometheus metrics: a claimed and
// succeeded job shows in the claim and attempt counters, the queue depth
// and the hook decision and claim latency histograms.
func TestE2EWorkerMetrics(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	ids := b.Submit(b.WriteJob("one.toml", "name = \"counted\"\ncommand = [\"true\"]\n"))
	require.Len(t, ids, 1)
	b.StartWorker("--metrics-addr", "127.0.0.1:0")
	b.WaitState("counted", 30*time.Second, "succeeded")

	// The worker logs where it serves them (port 0: any free port).
	var url string
	re := regexp.MustCompile(`msg=metrics url=(\S+)`)
	for deadline := time.Now().Add(10 * time.Second); url == ""; time.Sleep(20 * time.Millisecond) {
		log, _ := os.ReadFile(filepath.Join(b.Dir, "worker.log"))
		if m := re.FindSubmatch(log); m != nil {
			url = string(m[1])
		}
		require.True(t, time.Now().Before(deadline), "no metrics line in the worker log:\n%s", log)
	}
	var body string
	// The attempt is recorded before the state is visible; counters are
	// updated right after: look again briefly.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(url)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		body = string(b)
		if regexp.MustCompile(`(?m)^paddock_attempts_finished_total\{outcome="succeeded"\} 1$`).MatchString(body) || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range []string{
		`(?m)^paddock_jobs_claimed_total 1$`,
		`(?m)^paddock_attempts_finished_total\{outcome="succeeded"\} 1$`,
		`(?m)^paddock_attempts_finished_total\{outcome="failed"\} 0$`,
		`(?m)^paddock_queue_jobs\{state="succeeded"\} 1$`,
		`(?m)^paddock_queue_jobs\{state="queued"\} 0$`,
		`(?m)^paddock_hook_decision_duration_seconds_count 1$`,
		`(?m)^paddock_claim_duration_seconds_count [1-9][0-9]*$`,
		`(?m)^paddock_lease_recoveries_total 0$`,
		`(?m)^paddock_store_errors_total\{op="claim"\} 0$`,
		`(?m)^go_goroutines `,
	} {
		require.Regexp(t, want, body)
	}
}

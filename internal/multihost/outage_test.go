package multihost_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/pgtest"
	"paddock/queue"
	"paddock/queue/postgres"
)

// A worker whose database stops says once that the store is unreachable
// (since when, the error, that it retries and for how long each call)
// and once that it is back; meanwhile neither the scheduler (there are
// no schedules) nor the claim logs errors of its own, and
// paddock_store_errors_total{op="retried"} counts the retried tries. A
// job submitted after the restart runs.
//
// The worker runs outside a network namespace here, so that the test can
// read its metrics on 127.0.0.1; it reaches the server through its Unix
// socket as in the other tests.
func TestStoreOutageLoggedOnce(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t, "outage")
	ctx := context.Background()
	st, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer st.Close()
	h := newHost(t, url)
	h.Env = append(h.Env, "PADDOCK_STORE="+url)
	h.StartWorker("--metrics-addr", "127.0.0.1:0")
	logPath := filepath.Join(h.Dir, "worker.log")
	readLog := func() string {
		b, err := os.ReadFile(logPath)
		require.NoError(t, err)
		return string(b)
	}
	waitLog := func(re *regexp.Regexp, timeout time.Duration) []string {
		t.Helper()
		for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
			if m := re.FindStringSubmatch(readLog()); m != nil {
				return m
			}
			require.True(t, time.Now().Before(deadline), "no %s in the worker log after %s:\n%s", re, timeout, readLog())
		}
	}
	metricsURL := waitLog(regexp.MustCompile(`msg=metrics url=(\S+)`), 30*time.Second)[1]
	retried := func() int {
		t.Helper()
		resp, err := http.Get(metricsURL)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		m := regexp.MustCompile(`(?m)^paddock_store_errors_total\{op="retried"\} (\d+)$`).FindSubmatch(body)
		require.NotNil(t, m, "no retried counter in:\n%s", body)
		n, err := strconv.Atoi(string(m[1]))
		require.NoError(t, err)
		return n
	}
	// The worker is polling: its first claim has been made.
	waitLog(regexp.MustCompile(`msg=policy `), 30*time.Second)
	time.Sleep(1500 * time.Millisecond)
	require.Zero(t, retried(), "no outage yet")

	srv.Stop()
	down := waitLog(regexp.MustCompile(`level=WARN msg="store unreachable: retrying until it is back; running jobs keep running".* since=(\S+) err=.* retry_per_call=1m0s`), 30*time.Second)
	since, err := time.Parse(time.RFC3339, down[1])
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), since, time.Minute)
	time.Sleep(3 * time.Second) // several polls (a tick and a claim each) fail meanwhile
	during := retried()
	require.Greater(t, during, 1, "the retried tries are counted while the server is down")
	require.NoError(t, srv.Start())
	up := waitLog(regexp.MustCompile(`level=INFO msg="store reachable again" .*down_for=(\S+) retried_tries=(\d+)`), time.Minute)
	n, err := strconv.Atoi(up[2])
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, during)

	_, errOut, code := h.run("submit", h.WriteJob("after.toml", "name = \"after-outage\"\ncommand = [\"true\"]\n"))
	require.Equal(t, 0, code, "submit: %s", errOut)
	waitCount(t, st, queue.StateSucceeded, 1, time.Minute)
	require.Equal(t, n, retried(), "no retries after the end")

	log := readLog()
	require.Equal(t, 1, strings.Count(log, "store unreachable"), "said once:\n%s", log)
	require.Equal(t, 1, strings.Count(log, "store reachable again"), "said once:\n%s", log)
	require.NotContains(t, log, "level=ERROR", "no call logged its own failure:\n%s", log)
	require.NotContains(t, log, "msg=schedules", "the scheduler is quiet without schedules:\n%s", log)
}

package e2etest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCrashKill9 is the crash suite's quick variant (make test): 40 jobs.
func TestCrashKill9(t *testing.T) {
	t.Parallel()
	crashSuite(t, 40)
}

// TestCrashKill9Soak is the crash suite as the issue states it: 300 jobs.
// It runs under PADDOCK_SOAK=1 (make soak).
func TestCrashKill9Soak(t *testing.T) {
	if !soak() {
		t.Skip("soak variant: set PADDOCK_SOAK=1 (make soak) to run it; not a bwrap skip, so PADDOCK_REQUIRE_BWRAP=1 does not fail it")
	}
	t.Parallel()
	crashSuite(t, 300)
}

// crashSuite runs n jobs that each append their id to one file in a shared
// workspace, kills the worker with SIGKILL at three random points,
// restarts it, and checks that every job succeeded exactly once in the
// store, that the interrupted attempts are recorded, and that every extra
// line in the file is explained by an interrupted attempt: at-least-once,
// made visible, never silent.
func crashSuite(t *testing.T, n int) {
	// An interrupted attempt counts against retries (the queue's rule):
	// the jobs allow plenty. A short lease brings a dead worker's jobs back
	// quickly.
	b := Setup(t, "lease = \"2s\"\nkill_grace = \"1s\"\nshutdown_grace = \"2s\"\n")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	ws := t.TempDir()
	KillStrayBwraps(t, ws) // the worker is killed with SIGKILL
	ran := filepath.Join(ws, "ran.log")
	var jobs strings.Builder
	fmt.Fprintf(&jobs, "[defaults]\nworkspace = %q\nmode = \"workspace_write\"\nretries = 10\nbackoff = \"100ms\"\n", ws)
	for i := range n {
		fmt.Fprintf(&jobs, "[[job]]\nname = \"crash-%03d\"\ncommand = 'echo \"$PADDOCK_JOB_ID $PADDOCK_ATTEMPT\" >> ran.log; sleep 0.1'\n", i)
	}
	ids := b.Submit(b.WriteJob("crash.toml", jobs.String()))
	require.Len(t, ids, n)

	lines := func() int {
		data, _ := os.ReadFile(ran)
		return strings.Count(string(data), "\n")
	}
	for k := range 3 {
		// Kill at a random point of the batch's k-th fifth, plus a random
		// fraction of a job.
		target := (k+1)*n/5 + rng.IntN(max(1, n/10))
		w := b.StartWorker("--concurrency", "2")
		deadline := time.Now().Add(3 * time.Minute)
		for lines() < target {
			require.False(t, time.Now().After(deadline), "no progress before kill %d (%d lines, want %d)", k+1, lines(), target)
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(120)) * time.Millisecond)
		require.NoError(t, w.Process.Signal(syscall.SIGKILL))
		_, _ = w.Process.Wait()
		t.Logf("kill %d after %d lines", k+1, lines())
	}
	_, errOut, code := b.Run("worker", "--drain", "--concurrency", "2")
	require.Equal(t, 0, code, errOut)

	data, err := os.ReadFile(ran)
	require.NoError(t, err)
	runs := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		runs[strings.Fields(line)[0]]++
	}
	interrupted, twice := 0, 0
	for _, id := range ids {
		s := b.Show(id)
		require.Equal(t, "succeeded", s.State, "job %s", s.Name)
		succeeded, intr := 0, 0
		for _, a := range s.Attempts {
			switch a.Outcome {
			case "succeeded":
				succeeded++
			case "interrupted":
				intr++
			}
		}
		require.Equal(t, 1, succeeded, "job %s must succeed exactly once in the store", s.Name)
		require.GreaterOrEqual(t, runs[id], 1, "job %s succeeded but never ran", s.Name)
		// Each run beyond the first is an attempt the store recorded as
		// interrupted: nothing ran twice silently.
		require.LessOrEqual(t, runs[id]-1, intr, "job %s ran %d times with %d interrupted attempts", s.Name, runs[id], intr)
		interrupted += intr
		if runs[id] > 1 {
			twice++
		}
	}
	require.Len(t, runs, n, "the file names only this batch's jobs")
	require.Greater(t, interrupted, 0, "the kills interrupted running jobs, and their attempts are recorded")
	t.Logf("%d jobs, 3 kills: %d interrupted attempts recorded, %d jobs ran more than once (visible in ran.log)", n, interrupted, twice)
}

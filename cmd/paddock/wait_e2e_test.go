package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestE2ESubmitWait: `submit --wait` with a worker already running waits
// for every job of the batch, in whatever order they end, prints each
// final, and exits 1 when one failed; `wait` on finished jobs returns at
// once; a wait with nothing running times out with exit 1.
func TestE2ESubmitWait(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	ws := t.TempDir()
	b.StartWorker("--concurrency", "2")
	// The worker creates its event log at start.
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(b.State, eventsFile))
		return err == nil
	}, 30*time.Second, 10*time.Millisecond)

	var src strings.Builder
	fmt.Fprintf(&src, "[defaults]\nmode = \"workspace_write\"\nworkspace = %q\n\n", ws)
	// Later jobs end first: the wait must not stop at the first pending one.
	for i := range 6 {
		fmt.Fprintf(&src, "[[job]]\nname = \"w-%d\"\ncommand = \"sleep 0.%d\"\n", i, 6-i)
	}
	src.WriteString("[[job]]\nname = \"w-fails\"\ncommand = \"exit 3\"\n")
	start := time.Now()
	out, errOut, code := b.Run("submit", "--wait", b.WriteJob("batch.toml", src.String()))
	took := time.Since(start)
	require.Equal(t, 1, code, "one job failed: %s", errOut)
	require.Contains(t, errOut, "1 of 7 job(s) did not succeed")
	for i := range 6 {
		require.Regexp(t, fmt.Sprintf(`(?m)^\S+\s+w-%d\s+succeeded`, i), out)
	}
	require.Regexp(t, `(?m)^\S+\s+w-fails\s+failed`, out)
	t.Logf("submit --wait of 7 jobs took %s", took)

	out, errOut, code = b.Run("wait", "w-0", "w-5")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "w-5")
	// The same job twice: one job to wait for, two lines (it once hung,
	// counting final jobs against the refs).
	out, errOut, code = b.Run("wait", "--timeout", "20s", "w-1", "w-1")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 2, strings.Count(out, "w-1"), out)

	// Nothing picks this one up: a second state directory, no worker.
	other := setupE2E(t, "")
	ids := other.Submit(other.WriteJob("one.toml", "name = \"lonely\"\ncommand = [\"/bin/true\"]\n"))
	_, errOut, code = other.Run("wait", "--timeout", "500ms", ids[0])
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "timed out waiting; 0 of 1 jobs final")

	// Bad --timeout: a usage error, before anything is enqueued.
	_, errOut, code = other.Run("wait", "--timeout", "-1s", ids[0])
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "must not be negative")
	one := other.WriteJob("two.toml", "name = \"not-enqueued\"\ncommand = [\"/bin/true\"]\n")
	_, errOut, code = other.Run("submit", "--timeout", "5s", one)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "only with --wait")
	_, errOut, code = other.Run("submit", "--wait", "--timeout", "-5s", one)
	require.Equal(t, 2, code, errOut)
	_, _, code = other.Run("show", "not-enqueued")
	require.Equal(t, 2, code, "nothing was enqueued")
}

// TestEventWatchCoalesces: a burst of writes to the event log wakes a wait
// at most once per gap, and at least once.
func TestEventWatchCoalesces(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), eventsFile)
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	ew := watchEvents(path)
	defer ew.close()
	require.NotNil(t, ew.w, "inotify watch")
	ew.setGap(100 * time.Millisecond)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	wakes := 0
	start := time.Now()
	for time.Since(start) < 300*time.Millisecond {
		_, err := f.WriteString("{}\n")
		require.NoError(t, err)
		select {
		case <-ew.c:
			wakes++
		default:
		}
		time.Sleep(time.Millisecond)
	}
	// Writes go on for 300 ms, so the one wake that can still be pending
	// shows up at once; no more may come after the gap that follows.
	select {
	case <-ew.c:
		wakes++
	case <-time.After(time.Second):
	}
	require.GreaterOrEqual(t, wakes, 1)
	// One at the first write, then one per 100 ms gap: 4 or 5, not the
	// hundreds of writes.
	require.LessOrEqual(t, wakes, 6, "wakes for %s of writes every millisecond", time.Since(start))
}

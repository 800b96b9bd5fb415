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

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
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
	// The same job twice, by name and by id: one job to wait for, one
	// line (it once hung, counting final jobs against the refs).
	var id string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "w-5" {
			id = f[0]
		}
	}
	require.NotEmpty(t, id, out)
	out, errOut, code = b.Run("wait", "--timeout", "20s", "w-5", id, "w-5")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 1, strings.Count(out, "w-5"), out)
	require.Equal(t, 1, strings.Count(out, "\n"), out)

	// Nothing picks this one up: a second state directory, no worker.
	other := setupE2E(t, "")
	ids := other.Submit(other.WriteJob("one.toml", "name = \"lonely\"\ncommand = [\"/bin/true\"]\n"))
	_, errOut, code = other.Run("wait", "--timeout", "500ms", ids[0])
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "timed out waiting; 0 of 1 jobs final")

	// Ctrl-C (or SIGTERM) ends a wait with 130, not 1: a script can tell
	// an interrupted wait from jobs that failed. The job goes on.
	// So does `logs -f` of a job not final (it once exited 0, as if the
	// job's output were complete).
	for i, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGINT} {
		args := []string{"wait", ids[0]}
		if i == 2 {
			args = []string{"logs", "-f", ids[0]}
		}
		var stderr strings.Builder
		wc := other.Cmd(context.Background(), args...)
		wc.Stderr = &stderr
		require.NoError(t, wc.Start())
		// Its signal handler is set before it opens the queue.
		waitOpen(t, wc.Process.Pid, databaseFile)
		require.NoError(t, wc.Process.Signal(sig))
		err := wc.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s: %s", sig, stderr.String())
		require.Equal(t, 130, ee.ExitCode(), "%s: %s", sig, stderr.String())
		require.Contains(t, stderr.String(), "interrupted")
		require.NotContains(t, stderr.String(), "context canceled")
	}
	require.Equal(t, "queued", other.Show(ids[0]).State)

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

// TestEventWatchCoalesces: lines about the jobs waited for wake a wait,
// at most once per gap however many are written, and at least once;
// lines about other jobs do not wake it.
func TestEventWatchCoalesces(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), eventsFile)
	require.NoError(t, os.WriteFile(path, []byte(`{"type":"finished","job_id":"mine"}`+"\n"), 0o600))
	ew := watchEvents(path)
	defer ew.close()
	require.NotNil(t, ew.w, "inotify watch")
	ew.setWant([]string{"mine"})
	ew.setGap(100 * time.Millisecond)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()

	// Other jobs' events, and what the log held before the watch: no wake.
	for range 50 {
		_, err := f.WriteString(`{"time":"2026-11-30T18:00:00Z","type":"finished","job_id":"theirs","state":"succeeded"}` + "\n")
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
	}
	select {
	case <-ew.c:
		t.Fatal("woken by another job's events")
	case <-time.After(300 * time.Millisecond):
	}

	// A line written in two parts wakes once it is whole.
	_, err = f.WriteString(`{"type":"started","job_id":"mi`)
	require.NoError(t, err)
	select {
	case <-ew.c:
		t.Fatal("woken by half a line")
	case <-time.After(200 * time.Millisecond):
	}
	_, err = f.WriteString(`ne","attempt":1}` + "\n")
	require.NoError(t, err)
	select {
	case <-ew.c:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by a line about the job")
	}
	time.Sleep(150 * time.Millisecond) // past that wake's gap

	wakes := 0
	start := time.Now()
	for time.Since(start) < 300*time.Millisecond {
		_, err := f.WriteString(`{"type":"finished","job_id":"mine"}` + "\n")
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

func TestEventJobID(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]string{
		`{"time":"2026-11-30T18:00:00Z","type":"finished","job_id":"06h2v1tf98pqrzfn","job_name":"a"}`: "06h2v1tf98pqrzfn",
		`{"type":"started"}`:      "",
		`{"job_id":"unterminated`: "",
		``:                        "",
	} {
		require.Equal(t, want, eventJobID([]byte(line)), line)
	}
}

// TestEventWatchLongLine: a line longer than maxEventLine is not kept in
// memory; it counts as wanted (the wait looks), and the lines after it
// are read as usual.
func TestEventWatchLongLine(t *testing.T) {
	t.Parallel()
	ew, f := eventWatchByHand(t)
	_, err := f.WriteString(strings.Repeat("x", 3*maxEventLine))
	require.NoError(t, err)
	hit, _ := ew.wanted()
	require.True(t, hit)
	require.LessOrEqual(t, cap(ew.partial), maxEventLine)
	_, err = f.WriteString(strings.Repeat("y", maxEventLine) + `"job_id":"mine"` + "\n" + `{"job_id":"theirs"}` + "\n")
	require.NoError(t, err)
	hit, others := ew.wanted()
	require.False(t, hit, "the end of the long line and another job's line")
	require.True(t, others)
	_, err = f.WriteString(`{"job_id":"mine"}` + "\n")
	require.NoError(t, err)
	hit, _ = ew.wanted()
	require.True(t, hit)
}

// eventWatchByHand is a watch of an empty event log that wants the job
// "mine", with no inotify goroutine (it would read the lines before the
// test does: the test calls wanted or onEvent itself), and the log opened
// for appending. Both are closed when the test ends.
func eventWatchByHand(t *testing.T) (*eventWatch, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), eventsFile)
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	r, err := os.Open(path)
	require.NoError(t, err)
	ew := &eventWatch{path: path, c: make(chan struct{}, 1), done: make(chan struct{}), f: r}
	t.Cleanup(ew.close)
	ew.setWant([]string{"mine"})
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return ew, f
}

// TestEventWatchPauses: after an event about a wanted job the watch
// waits the gap; after lines about other jobs only, otherJobsPause; after
// an event with nothing new to read (its lines were read with an earlier
// event's), half a line, or the line of a job the wait already found
// final, not at all: a pause then would leave the end of a wanted job,
// written just after, unseen for otherJobsPause.
func TestEventWatchPauses(t *testing.T) {
	t.Parallel()
	ew, f := eventWatchByHand(t)
	const gap = 7 * time.Millisecond
	ew.setGap(gap)
	woken := func() bool {
		select {
		case <-ew.c:
			return true
		default:
			return false
		}
	}

	_, err := f.WriteString(`{"job_id":"mine","type":"started"}` + "\n" + `{"job_id":"theirs"}` + "\n")
	require.NoError(t, err)
	require.Equal(t, gap, ew.onEvent(nil, fsnotify.Write), "a wanted job's line")
	require.True(t, woken())
	// The kernel's second event for those writes: nothing left to read.
	require.Zero(t, ew.onEvent(nil, fsnotify.Write), "an event whose lines were read already")
	require.False(t, woken())
	_, err = f.WriteString(`{"job_id":"theirs"}` + "\n")
	require.NoError(t, err)
	require.Equal(t, otherJobsPause, ew.onEvent(nil, fsnotify.Write), "another job's line")
	require.False(t, woken())
	_, err = f.WriteString(`{"job_id":"mine","type":"finished"}` + "\n")
	require.NoError(t, err)
	require.Equal(t, gap, ew.onEvent(nil, fsnotify.Write))
	require.True(t, woken())

	// The wait's look found "mine" final before its event line came; it
	// still waits for "last".
	ew.setWant([]string{"last"})
	_, err = f.WriteString(`{"job_id":"mine","type":"finished","attempt":2}` + "\n")
	require.NoError(t, err)
	require.Zero(t, ew.onEvent(nil, fsnotify.Write), "the line of a job found final already")
	require.False(t, woken())
	_, err = f.WriteString(`{"job_id":"la`)
	require.NoError(t, err)
	require.Zero(t, ew.onEvent(nil, fsnotify.Write), "half a line")
	require.False(t, woken())
	_, err = f.WriteString(`st","type":"finished"}` + "\n")
	require.NoError(t, err)
	require.Equal(t, gap, ew.onEvent(nil, fsnotify.Write))
	require.True(t, woken())
}

// waitOpen waits (up to 30 s) until process pid has a file named name open.
func waitOpen(t *testing.T, pid int, name string) {
	t.Helper()
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		ents, _ := os.ReadDir(fds)
		for _, e := range ents {
			if l, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && filepath.Base(l) == name {
				return
			}
		}
	}
	t.Fatalf("process %d never opened %s", pid, name)
}

// TestEventWatchReadBounded: one look reads at most maxEventRead bytes of
// the log and then counts as wanted (the wait looks at the store), so a
// log that grows faster than it is read cannot hold the wait's loop.
func TestEventWatchReadBounded(t *testing.T) {
	t.Parallel()
	ew, f := eventWatchByHand(t)
	line := `{"job_id":"theirs","type":"finished"}` + "\n"
	n := (maxEventRead*5/2)/len(line) + 1
	_, err := f.WriteString(strings.Repeat(line, n))
	require.NoError(t, err)
	for look := 1; look <= 2; look++ {
		hit, others := ew.wanted()
		require.True(t, hit, "look %d: more than maxEventRead to read", look)
		require.True(t, others)
		off, err := ew.f.Seek(0, io.SeekCurrent)
		require.NoError(t, err)
		require.LessOrEqual(t, off, int64(look*(maxEventRead+32<<10)), "look %d read too much", look)
	}
	hit, others := ew.wanted()
	require.False(t, hit, "the rest: other jobs' lines only")
	require.True(t, others)
}

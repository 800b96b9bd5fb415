package runner

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/stretchr/testify/require"
)

// TestEventWatchCoalesces: lines about the jobs waited for wake a wait,
// at most once per gap however many are written, and at least once;
// lines about other jobs do not wake it.
func TestEventWatchCoalesces(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"type":"finished","job_id":"mine"}`+"\n"), 0o600))
	ew := WatchEvents(path)
	defer ew.Close()
	require.NotNil(t, ew.w, "inotify watch")
	ew.SetWant([]string{"mine"})
	ew.SetGap(100 * time.Millisecond)
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
	case <-ew.C():
		t.Fatal("woken by another job's events")
	case <-time.After(300 * time.Millisecond):
	}

	// A line written in two parts wakes once it is whole.
	_, err = f.WriteString(`{"type":"started","job_id":"mi`)
	require.NoError(t, err)
	select {
	case <-ew.C():
		t.Fatal("woken by half a line")
	case <-time.After(200 * time.Millisecond):
	}
	_, err = f.WriteString(`ne","attempt":1}` + "\n")
	require.NoError(t, err)
	select {
	case <-ew.C():
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
		case <-ew.C():
			wakes++
		default:
		}
		time.Sleep(time.Millisecond)
	}
	// Writes go on for 300 ms, so the one wake that can still be pending
	// shows up at once; no more may come after the gap that follows.
	select {
	case <-ew.C():
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
	ew, f := EventWatchByHand(t)
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

// EventWatchByHand is a watch of an empty event log that wants the job
// "mine", with no inotify goroutine (it would read the lines before the
// test does: the test calls wanted or onEvent itself), and the log opened
// for appending. Both are closed when the test ends.
func EventWatchByHand(t *testing.T) (*EventWatch, *os.File) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	r, err := os.Open(path)
	require.NoError(t, err)
	ew := &EventWatch{path: path, c: make(chan struct{}, 1), done: make(chan struct{}), f: r}
	t.Cleanup(ew.Close)
	ew.SetWant([]string{"mine"})
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
	ew, f := EventWatchByHand(t)
	const gap = 7 * time.Millisecond
	ew.SetGap(gap)
	woken := func() bool {
		select {
		case <-ew.C():
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
	ew.SetWant([]string{"last"})
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

// TestEventWatchReadBounded: one look reads at most maxEventRead bytes of
// the log and then counts as wanted (the wait looks at the store), so a
// log that grows faster than it is read cannot hold the wait's loop.
func TestEventWatchReadBounded(t *testing.T) {
	t.Parallel()
	ew, f := EventWatchByHand(t)
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

// A wait follows the event log across a rotation: an event about its job
// appended to the new file wakes it (it does not stay on the old file,
// which gets no more lines, until its poll).
func TestEventWatchFollowsRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	const limit = 4096
	// The log is nearly full before the wait starts.
	require.NoError(t, os.WriteFile(path, bytes.Repeat([]byte("{\"job_id\":\"old\"}\n"), (limit-200)/17), 0o600))
	ew := WatchEvents(path)
	defer ew.Close()
	ew.SetWant([]string{"mine"})
	ew.SetGap(0)

	log, err := OpenEventLog(path, limit)
	require.NoError(t, err)
	defer log.Close()
	require.NoError(t, log.Append(Event{Type: "started", JobID: "other", Reason: strings.Repeat("x", 300)}))
	_, err = os.Stat(path + ".1")
	require.NoError(t, err, "the log was rotated")
	time.Sleep(otherJobsPause + 50*time.Millisecond) // the wait has read the old file's last line
	require.NoError(t, log.Append(Event{Type: "finished", JobID: "mine"}))
	select {
	case <-ew.C():
	case <-time.After(3 * time.Second):
		t.Fatal("an event about the wait's job in the rotated-to file did not wake it")
	}
}

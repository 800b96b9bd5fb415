package runner

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEventLogRotates: two workers' logs on one file, rotated at 4 KiB:
// the file never grows far past the limit, PATH.1 keeps the previous
// file, and every line ever appended is whole, in PATH or in one of the
// files rotated away (kept here by linking each PATH.1 aside before it is
// replaced).
func TestEventLogRotates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "events.jsonl")
	const limit = 4096
	a, err := OpenEventLog(path, limit)
	require.NoError(t, err)
	defer a.Close()
	b, err := OpenEventLog(path, limit)
	require.NoError(t, err)
	defer b.Close()

	kept := 0
	var last os.FileInfo
	keep := func() { // save each new PATH.1 before a rotation replaces it
		fi, err := os.Stat(path + ".1")
		if err != nil || (last != nil && os.SameFile(fi, last)) {
			return
		}
		last = fi
		require.NoError(t, os.Link(path+".1", filepath.Join(dir, fmt.Sprintf("kept.%d", kept))))
		kept++
	}
	const n = 200 // ~15 rotations of ~30 lines
	for i := range n {
		l := a
		if i%3 == 0 {
			l = b
		}
		require.NoError(t, l.Append(Event{Type: "started", JobID: fmt.Sprintf("job%04d", i), Reason: strings.Repeat("r", 200)}))
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Less(t, fi.Size(), int64(2*limit), "the live file is rotated")
		keep()
	}
	require.Greater(t, kept, 5, "rotated several times")

	// Both writers append to PATH again: the one that did not rotate
	// reopened it.
	named, err := os.Stat(path)
	require.NoError(t, err)
	for _, l := range []*EventLog{a, b} {
		require.NoError(t, l.Append(Event{Type: "finished", JobID: "last"}))
		fi, err := l.f.Stat()
		require.NoError(t, err)
		require.True(t, os.SameFile(fi, named), "a writer still appends to a rotated file")
	}

	seen := map[string]int{}
	files, err := filepath.Glob(filepath.Join(dir, "kept.*"))
	require.NoError(t, err)
	files = append(files, path)
	for _, f := range files {
		fh, err := os.Open(f)
		require.NoError(t, err)
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var e Event
			require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "a whole line in %s", f)
			seen[e.JobID]++
		}
		fh.Close()
	}
	for i := range n {
		id := fmt.Sprintf("job%04d", i)
		require.GreaterOrEqual(t, seen[id], 1, "%s was lost", id)
	}
}

// TestOpenEventLogNotRegular: only a regular file (or a link to one) is
// an event log: a device that never ends, or a FIFO that nothing reads
// (whose open would block), is refused at once, saying what it is; a
// link to nothing is refused, its target not created.
func TestOpenEventLogNotRegular(t *testing.T) {
	dir := t.TempDir()
	zero := filepath.Join(dir, "zero.jsonl")
	require.NoError(t, os.Symlink("/dev/zero", zero))
	fifo := filepath.Join(dir, "fifo.jsonl")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for path, says := range map[string]string{zero: "character device", fifo: ""} {
		done := make(chan error, 1)
		go func() {
			l, err := OpenEventLog(path, 0)
			if err == nil {
				l.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			require.Error(t, err, path)
			require.Contains(t, err.Error(), says)
		case <-time.After(10 * time.Second):
			t.Fatalf("OpenEventLog(%s) blocked", path)
		}
	}
	// A FIFO that something reads opens, and is refused as a FIFO.
	r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	require.NoError(t, err)
	defer r.Close()
	_, err = OpenEventLog(fifo, 0)
	require.ErrorIs(t, err, ErrEventLogNotRegular)
	require.ErrorContains(t, err, "named pipe (FIFO)")
	// A link to nothing is refused, and its target is not created.
	dangling := filepath.Join(dir, "dangling.jsonl")
	target := filepath.Join(dir, "elsewhere", "..", "nothing.jsonl")
	require.NoError(t, os.Symlink(target, dangling))
	_, err = OpenEventLog(dangling, 0)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Lstat(filepath.Join(dir, "nothing.jsonl"))
	require.ErrorIs(t, err, os.ErrNotExist, "the link's target was created")
	// A missing log is created.
	fresh := filepath.Join(dir, "fresh.jsonl")
	l, err := OpenEventLog(fresh, 0)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	fi, err := os.Stat(fresh)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	// A link to a regular file will do.
	real := filepath.Join(dir, "real.jsonl")
	require.NoError(t, os.WriteFile(real, nil, 0o600))
	link := filepath.Join(dir, "link.jsonl")
	require.NoError(t, os.Symlink(real, link))
	l, err = OpenEventLog(link, 0)
	require.NoError(t, err)
	require.NoError(t, l.Append(Event{Type: "started", JobID: "x"}))
	require.NoError(t, l.Close())
	b, err := os.ReadFile(real)
	require.NoError(t, err)
	require.Contains(t, string(b), `"job_id":"x"`)
}

package runner

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

package jobspec

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"

	"paddock/internal/tomlfile"
)

// splitMinBytes is the smallest file decoded in pieces: below it, the
// pieces' set-up costs more than the cores save.
const splitMinBytes = 256 << 10

// maxPieces bounds the pieces a file is decoded in.
const maxPieces = 4

// decodeFile decodes a job file's TOML into a map. A large file of
// [[job]] tables is cut at [[job]] headers (heads, the header scan, says
// which lines are headers: never one inside a multi-line string or an
// array) and its pieces decoded on several cores: each piece from a
// header on is TOML of its own, holding the tables of those jobs. The
// pieces are joined when the later ones hold [[job]] tables only and the
// first holds its jobs as [[job]] tables too; anything else (an error in
// a piece, a [defaults] table after the jobs, which TOML allows once)
// decodes the whole file at once, so that the result and every error are
// exactly the decoder's. On one core the file is decoded whole.
func decodeFile(data []byte, heads tomlfile.Lines) (map[string]any, error) {
	n := min(runtime.GOMAXPROCS(0), maxPieces)
	if len(data) < splitMinBytes || n < 2 {
		return decodeWhole(data)
	}
	cuts := pieceStarts(data, heads, n)
	if len(cuts) == 0 {
		return decodeWhole(data)
	}
	bounds := append(append([]int{0}, cuts...), len(data))
	maps := make([]map[string]any, len(bounds)-1)
	errs := make([]error, len(maps))
	var wg sync.WaitGroup
	for i := range maps {
		wg.Go(func() {
			_, errs[i] = tomlfile.Decode(data[bounds[i]:bounds[i+1]], &maps[i], nil)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return decodeWhole(data)
		}
	}
	first := maps[0]
	jobs, ok := first["job"].([]map[string]any)
	if !ok {
		return decodeWhole(data)
	}
	for _, m := range maps[1:] {
		more, ok := m["job"].([]map[string]any)
		if !ok || len(m) != 1 {
			return decodeWhole(data)
		}
		jobs = append(jobs, more...)
	}
	first["job"] = jobs
	return first, nil
}

func decodeWhole(data []byte) (map[string]any, error) {
	var raw map[string]any
	_, err := tomlfile.Decode(data, &raw, nil)
	return raw, err
}

// pieceStarts returns the byte offsets of up to n-1 [[job]] header lines
// that cut data into pieces of about equal size, in order; none when the
// file has too few [[job]] tables.
func pieceStarts(data []byte, heads tomlfile.Lines, n int) []int {
	// Offsets of the [[job]] header lines, from their line numbers.
	var lines []int
	for i := 0; ; i++ {
		l, ok := heads["job."+strconv.Itoa(i)]
		if !ok {
			break
		}
		lines = append(lines, l)
	}
	if len(lines) < 2*n {
		return nil
	}
	offsets := make([]int, 0, len(lines))
	line, off := 1, 0
	for _, want := range lines {
		for line < want {
			j := bytes.IndexByte(data[off:], '\n')
			if j < 0 {
				return nil
			}
			off += j + 1
			line++
		}
		offsets = append(offsets, off)
	}
	var cuts []int
	for k := 1; k < n; k++ {
		target := len(data) * k / n
		// The first header at or after target (never the first job's:
		// the first piece keeps the file's top-level keys).
		i := 1
		for i < len(offsets)-1 && offsets[i] < target {
			i++
		}
		if len(cuts) == 0 || offsets[i] > cuts[len(cuts)-1] {
			cuts = append(cuts, offsets[i])
		}
	}
	return cuts
}

package jobspec

import (
	"strings"

	"paddock/internal/tomlfile"
)

// KeyLines scans a job file's text once and returns a function giving the
// line (1-based) where the job that starts at jobLine (Spec.Line) sets key,
// or where [defaults] sets it; jobLine itself when neither can be placed
// (source is not that file's TOML, say). Used for errors found after
// parsing: an `after` name the queue does not know, an unknown hook name.
// The scan costs about as much as parsing, so callers run it only once
// they have an error to report.
func KeyLines(source []byte) func(jobLine int, key string) int {
	kl := tomlfile.Locate(tomlfile.TrimBOM(source), true)
	byLine := map[int]string{}
	for path, l := range kl {
		if rest, ok := strings.CutPrefix(path, "job."); ok && !strings.Contains(rest, ".") {
			byLine[l] = path
		}
	}
	return func(jobLine int, key string) int {
		prefix, batch := byLine[jobLine]
		own := key
		if batch {
			own = prefix + "." + key
		} else if jobLine != 1 {
			return jobLine // not a job of this text
		}
		if l, ok := kl[own]; ok {
			return l
		}
		if l, ok := kl["defaults."+key]; ok {
			return l
		}
		return jobLine
	}
}

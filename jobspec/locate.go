package jobspec

import (
	"bytes"
	"strconv"
	"strings"
)

// keyLines maps key paths to the line they are defined on. Decoding into a
// map keeps no positions, so this scanner finds them itself. It only runs on text the TOML parser accepted, and only
// has to be good enough for error messages: a path it cannot place falls
// back to its parent (ultimately the job's own line).
//
// With keys false only table headers are recorded (the cheap pass used for
// every file); with keys true every key is (used once a file has errors).
//
// Paths: "name" (single-job file), "defaults.env", "job.3.timeout"
// (0-based index of the [[job]] table), "job.3.env.HOME".
type keyLines map[string]int

func locateKeys(data []byte, keys bool) keyLines {
	kl := keyLines{}
	jobIdx := -1
	section := ""
	inML := ""
	depth := 0
	line := 0
	for rest := string(data); len(rest) > 0 || line == 0; {
		var s string
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			s, rest = rest[:i], rest[i+1:]
		} else {
			s, rest = rest, ""
		}
		line++
		if inML != "" {
			i := strings.Index(s, inML)
			if i < 0 {
				if rest == "" {
					break
				}
				continue
			}
			s = s[i+3:]
			inML = ""
		} else if depth == 0 {
			t := strings.TrimSpace(s)
			switch {
			case strings.HasPrefix(t, "[["):
				path, _, ok := parseKeyPath(t[2:])
				if ok {
					if len(path) == 1 && path[0] == "job" {
						jobIdx++
						section = "job." + strconv.Itoa(jobIdx)
					} else {
						section = sectionFor(path, jobIdx)
					}
					setLine(kl, section, line)
				}
				s = ""
			case strings.HasPrefix(t, "["):
				path, _, ok := parseKeyPath(t[1:])
				if ok {
					section = sectionFor(path, jobIdx)
					setLine(kl, section, line)
				}
				s = ""
			default:
				if !keys {
					// Headers only: a value starts after the first '='
					// outside quotes; good enough to track multi-line strings.
					if i := strings.IndexByte(t, '='); i >= 0 && !strings.ContainsAny(t[:i], "\"'") {
						s = t[i+1:]
						break
					}
				}
				path, after, ok := parseKeyPath(t)
				if ok && strings.HasPrefix(after, "=") {
					k := strings.Join(path, ".")
					if section != "" {
						k = section + "." + k
					}
					setLine(kl, k, line)
					s = after[1:]
				} else {
					s = t
				}
			}
		}
		inML, depth = scanValue(s, depth)
		if rest == "" {
			break
		}
	}
	return kl
}

// KeyLines scans a job file's text once and returns a function giving the
// line (1-based) where the job that starts at jobLine (Spec.Line) sets key,
// or where [defaults] sets it; jobLine itself when neither can be placed
// (source is not that file's TOML, say). Used for errors found after
// parsing: an `after` name the queue does not know, an unknown hook name.
// The scan costs about as much as parsing, so callers run it only once
// they have an error to report.
func KeyLines(source []byte) func(jobLine int, key string) int {
	kl := locateKeys(bytes.TrimPrefix(source, utf8BOM), true)
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

// keyOnLine returns the dotted key that line (1-based) of data assigns
// ("key = ..."), or "" when the line does not start with one. It names the
// key of a TOML syntax error, whose decoder reports only a position.
func keyOnLine(data []byte, line int) string {
	rest := string(data)
	for i := 1; i < line; i++ {
		j := strings.IndexByte(rest, '\n')
		if j < 0 {
			return ""
		}
		rest = rest[j+1:]
	}
	if j := strings.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	path, after, ok := parseKeyPath(strings.TrimSpace(rest))
	if !ok || !strings.HasPrefix(after, "=") {
		return ""
	}
	return strings.Join(path, ".")
}

func setLine(kl keyLines, k string, line int) {
	if _, ok := kl[k]; !ok {
		kl[k] = line
	}
}

func sectionFor(path []string, jobIdx int) string {
	if len(path) > 0 && path[0] == "job" {
		return "job." + strconv.Itoa(max(jobIdx, 0)) + joinTail(path[1:])
	}
	return strings.Join(path, ".")
}

func joinTail(p []string) string {
	if len(p) == 0 {
		return ""
	}
	return "." + strings.Join(p, ".")
}

// lookup returns the line of path or of its nearest known ancestor; 0 when
// none is known.
func (kl keyLines) lookup(path string) int {
	for {
		if l, ok := kl[path]; ok {
			return l
		}
		i := strings.LastIndexByte(path, '.')
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
}

// parseKeyPath reads a dotted TOML key (bare or quoted parts) at the start
// of s and returns its parts and what follows (trimmed; "]" or "]]" closing
// a header is consumed).
func parseKeyPath(s string) (path []string, after string, ok bool) {
	s = strings.TrimLeft(s, " \t")
	for {
		if s == "" {
			return nil, "", false
		}
		var part string
		switch s[0] {
		case '"':
			end := 1
			for end < len(s) && s[end] != '"' {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(s) {
				return nil, "", false
			}
			if u, err := strconv.Unquote(s[:end+1]); err == nil {
				part = u
			} else {
				part = s[1:end]
			}
			s = s[end+1:]
		case '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, "", false
			}
			part = s[1 : end+1]
			s = s[end+2:]
		default:
			end := 0
			for end < len(s) && isBareKeyChar(s[end]) {
				end++
			}
			if end == 0 {
				return nil, "", false
			}
			part = s[:end]
			s = s[end:]
		}
		path = append(path, part)
		s = strings.TrimLeft(s, " \t")
		if strings.HasPrefix(s, ".") {
			s = strings.TrimLeft(s[1:], " \t")
			continue
		}
		return path, strings.TrimLeft(s, " \t"), true
	}
}

func isBareKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// scanValue walks a value fragment and returns whether it ends inside a
// multi-line string (and which delimiter) and the bracket depth after it.
func scanValue(s string, depth int) (inML string, _ int) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '#':
			return "", depth
		case '[', '{':
			depth++
		case ']', '}':
			if depth > 0 {
				depth--
			}
		case '"', '\'':
			q := string([]byte{c, c, c})
			if strings.HasPrefix(s[i:], q) {
				end := strings.Index(s[i+3:], q)
				if end < 0 {
					return q, depth
				}
				i += 3 + end + 2
				for i+1 < len(s) && s[i+1] == c { // up to two extra quotes end the string
					i++
				}
				continue
			}
			j := i + 1
			for j < len(s) && s[j] != c {
				if c == '"' && s[j] == '\\' {
					j++
				}
				j++
			}
			i = j
		}
	}
	return "", depth
}

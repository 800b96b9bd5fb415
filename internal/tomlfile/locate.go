package tomlfile

import (
	"strconv"
	"strings"
)

// Lines maps key paths to the line (1-based) they are defined on.
// Decoding keeps no positions, so [Locate] finds them itself. It only runs
// on text the TOML parser accepted, and only has to be good enough for
// error messages: a path it cannot place falls back to its parent
// ([Lines.Lookup]).
//
// Paths: "name", "defaults.env", "job.3.timeout" (the 0-based index of a
// [[job]] table: every array of tables is indexed), "job.3.env.HOME"
// (a [job.env] table or an env key inside the fourth [[job]]).
type Lines map[string]int

// Locate scans data, which the TOML decoder accepted. With keys false only
// table headers are recorded (the cheap pass, about as fast as decoding);
// with keys true every key is. It never panics (FuzzParse runs it on any
// text).
func Locate(data []byte, keys bool) Lines {
	kl := Lines{}
	arrays := map[string]int{} // [[name]] -> index of its current table
	section := ""
	var inML byte // the quote of the multi-line string a line ends in
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
		if inML != 0 {
			end, _, closed := stringBody(s, 0, 0, inML, true)
			if !closed {
				if rest == "" {
					break
				}
				continue
			}
			s = s[end:]
			inML = 0
		} else if depth == 0 {
			t := strings.TrimSpace(s)
			switch {
			case strings.HasPrefix(t, "[["):
				path, _, ok := parseKeyPath(t[2:])
				if ok {
					name := strings.Join(path, ".")
					i, seen := arrays[name]
					if seen {
						i++
					}
					arrays[name] = i
					section = name + "." + strconv.Itoa(i)
					setLine(kl, name, line)
					setLine(kl, section, line)
				}
				s = ""
			case strings.HasPrefix(t, "["):
				path, _, ok := parseKeyPath(t[1:])
				if ok {
					section = sectionFor(path, arrays)
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

// KeyOnLine returns the dotted key that line (1-based) of data assigns
// ("key = ..."), or "" when the line does not start with one. It names the
// key of a TOML syntax error, whose decoder reports only a position.
func KeyOnLine(data []byte, line int) string {
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

func setLine(kl Lines, k string, line int) {
	if _, ok := kl[k]; !ok {
		kl[k] = line
	}
}

// sectionFor is the path of a [table] header: inside the current table of
// an array of tables when it extends one ([job.env] after [[job]]).
func sectionFor(path []string, arrays map[string]int) string {
	if i, ok := arrays[path[0]]; ok && len(path) > 1 {
		return path[0] + "." + strconv.Itoa(i) + joinTail(path[1:])
	}
	return strings.Join(path, ".")
}

func joinTail(p []string) string {
	if len(p) == 0 {
		return ""
	}
	return "." + strings.Join(p, ".")
}

// Lookup returns the line of path or of its nearest known ancestor; 0 when
// none is known.
func (kl Lines) Lookup(path string) int {
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

// scanValue walks a value fragment and returns the quote of the
// multi-line string it ends inside (0 when none) and the bracket depth
// after it.
func scanValue(s string, depth int) (inML byte, _ int) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '#':
			return 0, depth
		case '[', '{':
			depth++
		case ']', '}':
			if depth > 0 {
				depth--
			}
		case '"', '\'':
			multi := strings.HasPrefix(s[i:], string([]byte{c, c, c}))
			open := 1
			if multi {
				open = 3
			}
			end, _, closed := stringBody(s, i+open, 0, c, multi)
			if multi && !closed {
				return c, depth
			}
			i = end - 1
		}
	}
	return 0, depth
}

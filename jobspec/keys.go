package jobspec

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"paddock/internal/suggest"
	"paddock/internal/tomlfile"
)

// jobKey is one key of a job table: how its TOML value becomes a Spec
// field, and how a [defaults] value reaches a job that does not set it.
type jobKey struct {
	name string
	// decode type-checks v and stores it in s; it reports each problem
	// with p.at and returns false when v is refused.
	decode func(p *parser, sc scope, k string, v any, s *Spec) bool
	// inherit gives job s the value of [defaults] d; own says whether the
	// job set the key itself. nil: the key cannot be a default.
	inherit func(s, d *Spec, own bool)
}

// jobKeys is every key of a job table, in the order of docs/job-files.md. A key's
// index is its bit in keySet.
var jobKeys = []jobKey{
	{"name", decodeName, nil},
	{"command", decodeCommand, unlessOwn(func(s *Spec) *[]string { return &s.Command }, slices.Clone)},
	{"cwd", decodeDir(func(s *Spec) *string { return &s.Cwd }), unlessOwn(func(s *Spec) *string { return &s.Cwd }, same)},
	{"workspace", decodeDir(func(s *Spec) *string { return &s.Workspace }), unlessOwn(func(s *Spec) *string { return &s.Workspace }, same)},
	{"mode", decodeMode, unlessOwn(func(s *Spec) *string { return &s.Mode }, same)},
	{"network", decodeNetwork, unlessOwn(func(s *Spec) **bool { return &s.Network }, cloneBool)},
	{"unix_sockets", decodeUnixSockets, unlessOwn(func(s *Spec) *bool { return &s.UnixSockets }, same)},
	{"writable", decodeWritable, unlessOwn(func(s *Spec) *[]string { return &s.Writable }, slices.Clone)},
	{"env", decodeStrTable(func(s *Spec) *map[string]string { return &s.Env }), mergeTable(func(s *Spec) *map[string]string { return &s.Env })},
	{"timeout", decodeDuration(func(s *Spec) *time.Duration { return &s.Timeout }), unlessOwn(func(s *Spec) *time.Duration { return &s.Timeout }, same)},
	{"retries", decodeInt(func(s *Spec) *int { return &s.Retries }, 0, MaxRetries), unlessOwn(func(s *Spec) *int { return &s.Retries }, same)},
	{"backoff", decodeDuration(func(s *Spec) *time.Duration { return &s.Backoff }), unlessOwn(func(s *Spec) *time.Duration { return &s.Backoff }, same)},
	{"priority", decodeInt(func(s *Spec) *int { return &s.Priority }, -MaxPriority, MaxPriority), unlessOwn(func(s *Spec) *int { return &s.Priority }, same)},
	{"labels", decodeStrTable(func(s *Spec) *map[string]string { return &s.Labels }), mergeTable(func(s *Spec) *map[string]string { return &s.Labels })},
	{"hooks", decodeNames(func(s *Spec) *[]string { return &s.Hooks }), unlessOwn(func(s *Spec) *[]string { return &s.Hooks }, slices.Clone)},
	{"after", decodeNames(func(s *Spec) *[]string { return &s.After }), unlessOwn(func(s *Spec) *[]string { return &s.After }, slices.Clone)},
	{"schedule", decodeSchedule, unlessOwn(func(s *Spec) *string { return &s.Schedule }, same)},
	{"timezone", decodeTimezone, unlessOwn(func(s *Spec) *string { return &s.Timezone }, same)},
	{"overlap", decodePolicy(func(s *Spec) *string { return &s.Overlap }, OverlapPolicies()), unlessOwn(func(s *Spec) *string { return &s.Overlap }, same)},
	{"missed", decodePolicy(func(s *Spec) *string { return &s.Missed }, MissedPolicies()), unlessOwn(func(s *Spec) *string { return &s.Missed }, same)},
	{"missed_grace", decodeGrace, unlessOwn(func(s *Spec) *time.Duration { return &s.MissedGrace }, same)},
	{"jitter", decodeDuration(func(s *Spec) *time.Duration { return &s.Jitter }), unlessOwn(func(s *Spec) *time.Duration { return &s.Jitter }, same)},
	{"group", decodeGroup, unlessOwn(func(s *Spec) *string { return &s.Group }, same)},
	{"run_at", decodeRunAt, unlessOwn(func(s *Spec) *time.Time { return &s.RunAt }, same)},
	{"delay", decodeDuration(func(s *Spec) *time.Duration { return &s.Delay }), unlessOwn(func(s *Spec) *time.Duration { return &s.Delay }, same)},
}

// keyIndex maps a key's name to its index in jobKeys.
var keyIndex = func() map[string]int {
	m := make(map[string]int, len(jobKeys))
	for i, k := range jobKeys {
		m[k.name] = i
	}
	return m
}()

// keySynonyms maps names other job runners and CI systems give a job
// table's settings to paddock's key, for the "did you mean" of an unknown
// key: spelling distance alone does not lead from "argv" to "command".
var keySynonyms = map[string]string{
	"argv":        "command",
	"args":        "command",
	"cmd":         "command",
	"run":         "command",
	"script":      "command",
	"retry":       "retries",
	"max_retries": "retries",
	"attempts":    "retries",
	"environment": "env",
	"workdir":     "cwd",
	"working_dir": "cwd",
	"dir":         "cwd",
	"tags":        "labels",
	"depends_on":  "after",
	"needs":       "after",
	"cron":        "schedule",
	"tz":          "timezone",
	"queue":       "group",
	"sandbox":     "mode",
}

// keyHint is the " (did you mean ...?)" of the unknown key k among cands
// (the keys valid where k was found): a known synonym's key, else the
// nearest by spelling ([suggest.DidYouMean]), else "".
func keyHint(k string, cands []string) string {
	if to, ok := keySynonyms[strings.ToLower(k)]; ok && slices.Contains(cands, to) {
		return fmt.Sprintf(" (did you mean %q?)", to)
	}
	return suggest.DidYouMean(k, cands)
}

// KeyNames returns the keys of a job table, in the order of docs/job-files.md.
func KeyNames() []string {
	out := make([]string, len(jobKeys))
	for i, k := range jobKeys {
		out[i] = k.name
	}
	return out
}

// keySet has bit i set when a table set jobKeys[i].
type keySet uint32

// has reports whether the key named name is in ks.
func (ks keySet) has(name string) bool { return ks&(1<<keyIndex[name]) != 0 }

// fieldSet is one table's typed values: spec holds the fields whose key
// is in set.
type fieldSet struct {
	set  keySet
	spec Spec
}

// fields type-checks the keys of one table and returns the typed values.
func (p *parser) fields(m map[string]any, sc scope, isDefaults bool) fieldSet {
	var fs fieldSet
	for k, v := range m {
		i, ok := keyIndex[k]
		if !ok {
			cands := KeyNames()
			if sc.kind == scopeFile {
				cands = append(cands, "defaults", "job")
			}
			p.at(sc, k, "unknown key"+keyHint(k, cands))
			continue
		}
		if isDefaults && jobKeys[i].inherit == nil {
			p.at(sc, k, "a "+k+" cannot be a default: each job names itself")
			continue
		}
		if jobKeys[i].decode(p, sc, k, v, &fs.spec) {
			fs.set |= 1 << i
		}
	}
	return fs
}

// inheritDefaults gives s, whose own keys are own, the values of the
// defaults table d.
func inheritDefaults(s *Spec, own keySet, d *fieldSet) {
	for i, k := range jobKeys {
		if d.set&(1<<i) != 0 && k.inherit != nil {
			k.inherit(s, &d.spec, own&(1<<i) != 0)
		}
	}
}

// unlessOwn returns an inherit function that copies the field get points
// at (through clone) when the job did not set it.
func unlessOwn[T any](get func(*Spec) *T, clone func(T) T) func(s, d *Spec, own bool) {
	return func(s, d *Spec, own bool) {
		if !own {
			*get(s) = clone(*get(d))
		}
	}
}

// mergeTable returns an inherit function that merges a table key by key,
// the job's values winning.
func mergeTable(get func(*Spec) *map[string]string) func(s, d *Spec, own bool) {
	return func(s, d *Spec, _ bool) {
		m := maps.Clone(*get(d))
		maps.Copy(m, *get(s))
		*get(s) = m
	}
}

func same[T any](v T) T { return v }

func cloneBool(b *bool) *bool {
	c := *b
	return &c
}

func decodeName(p *parser, sc scope, k string, v any, s *Spec) bool {
	str, ok := p.str(sc, k, v)
	if !ok {
		return false
	}
	if msg := checkName(str); msg != "" {
		p.at(sc, k, msg)
		return false
	}
	s.Name = str
	return true
}

func decodeCommand(p *parser, sc scope, k string, v any, s *Spec) bool {
	switch c := v.(type) {
	case string:
		switch {
		case strings.TrimSpace(c) == "":
			p.at(sc, k, "empty command: expected a shell command string or an argv array")
		case strings.ContainsRune(c, 0):
			p.at(sc, k, "command contains a NUL byte")
		default:
			s.Command = []string{"/bin/sh", "-c", c}
			return true
		}
	case []any:
		argv, ok := p.strList(sc, k, v)
		switch {
		case !ok:
		case len(argv) == 0 || argv[0] == "":
			p.at(sc, k, "empty command: expected a non-empty argv array whose first element is the program")
		case slices.ContainsFunc(argv, func(a string) bool { return strings.ContainsRune(a, 0) }):
			p.at(sc, k, "command contains a NUL byte")
		default:
			s.Command = argv
			return true
		}
	default:
		p.at(sc, k, "expected a string (run by /bin/sh -c) or an array of strings (argv), got "+tomlfile.TypeName(v))
	}
	return false
}

// decodeDir decodes cwd and workspace: a path, relative to the job file.
func decodeDir(get func(*Spec) *string) func(p *parser, sc scope, k string, v any, s *Spec) bool {
	return func(p *parser, sc scope, k string, v any, s *Spec) bool {
		str, ok := p.str(sc, k, v)
		if !ok {
			return false
		}
		path, msg := p.path(str)
		switch {
		case msg != "":
			p.at(sc, k, msg)
		case k == "workspace" && path == "/":
			p.at(sc, k, `workspace "/" would make the whole filesystem writable: expected a dedicated directory`)
		default:
			*get(s) = path
			return true
		}
		return false
	}
}

func decodeWritable(p *parser, sc scope, k string, v any, s *Spec) bool {
	list, ok := p.strList(sc, k, v)
	if !ok {
		return false
	}
	var paths []string
	for _, str := range list {
		path, msg := p.path(str)
		if msg == "" && path == "/" {
			msg = `"/" would make the whole filesystem writable: use mode = "danger_full_access" if that is meant`
		}
		if msg != "" {
			p.at(sc, k, msg)
			ok = false
			continue
		}
		paths = append(paths, path)
	}
	if ok {
		s.Writable = paths
	}
	return ok
}

func decodeMode(p *parser, sc scope, k string, v any, s *Spec) bool {
	str, ok := p.str(sc, k, v)
	if !ok {
		return false
	}
	if !slices.Contains(Modes(), str) {
		p.at(sc, k, fmt.Sprintf("unknown mode %q: expected one of %s%s", str, strings.Join(Modes(), ", "), suggest.DidYouMean(str, Modes())))
		return false
	}
	s.Mode = str
	return true
}

func decodeNetwork(p *parser, sc scope, k string, v any, s *Spec) bool {
	b, ok := v.(bool)
	if !ok {
		p.at(sc, k, "expected a boolean (true shares the host network, false isolates it), got "+tomlfile.TypeName(v))
		return false
	}
	s.Network = &b
	return true
}

func decodeUnixSockets(p *parser, sc scope, k string, v any, s *Spec) bool {
	b, ok := v.(bool)
	if !ok {
		p.at(sc, k, "expected a boolean (true lets the job create Unix sockets, false refuses them), got "+tomlfile.TypeName(v))
		return false
	}
	s.UnixSockets = b
	return true
}

// decodeStrTable decodes env and labels: a table of strings.
func decodeStrTable(get func(*Spec) *map[string]string) func(p *parser, sc scope, k string, v any, s *Spec) bool {
	return func(p *parser, sc scope, k string, v any, s *Spec) bool {
		t, ok := v.(map[string]any)
		if !ok {
			p.at(sc, k, "expected a table of strings, got "+tomlfile.TypeName(v))
			return false
		}
		sm := make(map[string]string, len(t))
		for _, ek := range sortedKeys(t) { // sorted: errors in an inline table keep a stable order
			ev := t[ek]
			key := k + "." + ek
			str, isStr := ev.(string)
			switch {
			case !isStr:
				p.at(sc, key, "expected a string value, got "+tomlfile.TypeName(ev)+` (quote it: "...")`)
			case ek == "" || strings.ContainsAny(ek, "=\x00"):
				p.at(sc, key, "invalid key: expected a non-empty name without '=' or NUL")
			case strings.ContainsRune(str, 0):
				p.at(sc, key, "value contains a NUL byte")
			default:
				sm[ek] = str
			}
		}
		*get(s) = sm
		return true
	}
}

// decodeDuration decodes timeout and backoff: a Go duration, zero or more.
func decodeDuration(get func(*Spec) *time.Duration) func(p *parser, sc scope, k string, v any, s *Spec) bool {
	return func(p *parser, sc scope, k string, v any, s *Spec) bool {
		str, ok := v.(string)
		if !ok {
			p.at(sc, k, `expected a duration string like "90s" or "1h30m", got `+tomlfile.TypeName(v))
			return false
		}
		d, err := time.ParseDuration(str)
		switch {
		case err != nil:
			p.at(sc, k, fmt.Sprintf(`invalid duration %q: expected a Go duration like "90s" or "1h30m"`, str))
		case d < 0:
			p.at(sc, k, fmt.Sprintf("negative duration %q: expected zero or more", str))
		default:
			*get(s) = d
			return true
		}
		return false
	}
}

// decodeInt decodes retries and priority: an integer in [lo, hi].
func decodeInt(get func(*Spec) *int, lo, hi int64) func(p *parser, sc scope, k string, v any, s *Spec) bool {
	return func(p *parser, sc scope, k string, v any, s *Spec) bool {
		n, ok := v.(int64)
		if !ok {
			p.at(sc, k, "expected an integer, got "+tomlfile.TypeName(v))
			return false
		}
		if n < lo || n > hi {
			p.at(sc, k, fmt.Sprintf("%s %d out of range: expected %d to %d", k, n, lo, hi))
			return false
		}
		*get(s) = int(n)
		return true
	}
}

// decodeNames decodes hooks and after: an array of non-empty names.
func decodeNames(get func(*Spec) *[]string) func(p *parser, sc scope, k string, v any, s *Spec) bool {
	return func(p *parser, sc scope, k string, v any, s *Spec) bool {
		list, ok := p.strList(sc, k, v)
		if !ok {
			return false
		}
		if slices.ContainsFunc(list, func(str string) bool { return strings.TrimSpace(str) == "" || strings.ContainsRune(str, 0) }) {
			p.at(sc, k, "expected non-empty names without NUL")
			return false
		}
		*get(s) = list
		return true
	}
}

func decodeSchedule(p *parser, sc scope, k string, v any, s *Spec) bool {
	str, ok := p.str(sc, k, v)
	if !ok {
		return false
	}
	if _, err := ParseCron(str); err != nil {
		p.at(sc, k, strings.TrimPrefix(err.Error(), "jobspec: "))
		return false
	}
	s.Schedule = strings.TrimSpace(str)
	return true
}

// decodePolicy decodes overlap and missed: one of allowed.
func decodePolicy(get func(*Spec) *string, allowed []string) func(p *parser, sc scope, k string, v any, s *Spec) bool {
	return func(p *parser, sc scope, k string, v any, s *Spec) bool {
		str, ok := p.str(sc, k, v)
		if !ok {
			return false
		}
		if !slices.Contains(allowed, str) {
			p.at(sc, k, fmt.Sprintf("unknown policy %q: expected one of %s%s", str, strings.Join(allowed, ", "), suggest.DidYouMean(str, allowed)))
			return false
		}
		*get(s) = str
		return true
	}
}

func decodeGrace(p *parser, sc scope, k string, v any, s *Spec) bool {
	str, ok := v.(string)
	if !ok {
		p.at(sc, k, `expected a duration string like "30m" or "2h", got `+tomlfile.TypeName(v))
		return false
	}
	d, err := time.ParseDuration(str)
	if err != nil || d <= 0 {
		p.at(sc, k, fmt.Sprintf(`invalid duration %q: expected a positive Go duration like "30m" or "2h"`, str))
		return false
	}
	s.MissedGrace = d
	return true
}

func decodeTimezone(p *parser, sc scope, k string, v any, s *Spec) bool {
	str, ok := p.str(sc, k, v)
	if !ok {
		return false
	}
	if str == "" || strings.ContainsRune(str, 0) {
		p.at(sc, k, `expected an IANA time zone name like "Europe/Paris" or "UTC"`)
		return false
	}
	if err := checkZone(str); err != nil {
		p.at(sc, k, err.Error())
		return false
	}
	s.Timezone = str
	return true
}

func decodeGroup(p *parser, sc scope, k string, v any, s *Spec) bool {
	str, ok := p.str(sc, k, v)
	if !ok {
		return false
	}
	if msg := checkName(str); msg != "" {
		p.at(sc, k, strings.Replace(msg, "name", "group name", 1))
		return false
	}
	s.Group = str
	return true
}

// decodeRunAt decodes run_at: a TOML offset date-time
// (2026-12-24T18:00:00Z) or the same as an RFC 3339 string. A local
// date-time has no offset and is refused: which zone would it be in?
func decodeRunAt(p *parser, sc scope, k string, v any, s *Spec) bool {
	const want = "an RFC 3339 date-time with an offset, like 2026-12-24T18:00:00Z or 2026-12-24T19:00:00+01:00"
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		// The TOML decoder gives local date-times fixed zones of these
		// names (github.com/BurntSushi/toml, internal/tz.go).
		switch x.Location().String() {
		case "datetime-local", "date-local", "time-local":
			p.at(sc, k, "a date-time without an offset: expected "+want)
			return false
		}
		t = x
	case string:
		parsed, err := time.Parse(time.RFC3339Nano, x)
		if err != nil {
			p.at(sc, k, fmt.Sprintf("invalid date-time %q: expected %s", x, want))
			return false
		}
		t = parsed
	default:
		p.at(sc, k, "expected "+want+", got "+tomlfile.TypeName(v))
		return false
	}
	s.RunAt = t.UTC()
	return true
}

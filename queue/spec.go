package queue

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"paddock/internal/filekind"
	"paddock/internal/suggest"
)

// Spec is one job as parsed from TOML, after [defaults] are applied and
// relative paths resolved. The README's "Job files" section documents every
// field and its default. The zero value of each field means "default".
type Spec struct {
	Name      string            `json:"name,omitempty"`      // "" = unnamed (addressed by id only)
	Command   []string          `json:"command"`             // argv; a TOML string s becomes ["/bin/sh","-c",s]
	Cwd       string            `json:"cwd,omitempty"`       // absolute; "" = the workspace
	Workspace string            `json:"workspace,omitempty"` // absolute; "" = the runner makes <state>/workspaces/<id>
	Mode      string            `json:"mode,omitempty"`      // read_only | workspace_write | danger_full_access; "" = the config's default mode
	Network   *bool             `json:"network,omitempty"`   // nil = default (true: shared)
	Writable  []string          `json:"writable,omitempty"`  // absolute extra writable paths
	Env       map[string]string `json:"env,omitempty"`
	Timeout   time.Duration     `json:"timeout,omitempty"` // 0 = none (or the config's default)
	Retries   int               `json:"retries"`           // extra attempts after a failed one; 0 = none
	Backoff   time.Duration     `json:"backoff,omitempty"` // base of exponential backoff; 0 = BackoffDefault (1s)
	Priority  int               `json:"priority"`          // higher is claimed first; default 0
	Labels    map[string]string `json:"labels,omitempty"`
	Hooks     []string          `json:"hooks,omitempty"`    // extra (optional) hook names
	After     []string          `json:"after,omitempty"`    // names or ids of jobs that must succeed first
	Schedule  string            `json:"schedule,omitempty"` // cron expression (ParseCron); "" = a one-off job
	Timezone  string            `json:"timezone,omitempty"` // IANA name checked with time.LoadLocation; "" = UTC
	// Overlap, Missed and MissedGrace apply to schedules only; see
	// OverlapSkip, MissedRunOnce and MissedGraceDefault for the defaults.
	Overlap     string        `json:"overlap,omitempty"`      // skip | queue | allow; "" = skip
	Missed      string        `json:"missed,omitempty"`       // run_once | skip; "" = run_once
	MissedGrace time.Duration `json:"missed_grace,omitempty"` // 0 = MissedGraceDefault (1h)
	Line        int           `json:"line,omitempty"`         // line where the job starts in its file (for messages); 0 = unknown
}

// Modes the queue accepts in Spec.Mode (the sandbox package owns their meaning).
var modes = []string{"read_only", "workspace_write", "danger_full_access"}

// Limits on job files.
const (
	// MaxNameLen is the longest job name, in bytes.
	MaxNameLen = 128
	// MaxRetries is the largest retries value.
	MaxRetries = 1000
)

// FieldError is one problem in a job file.
type FieldError struct {
	File    string // as given to Parse; "" for stdin
	Line    int    // 1-based; 0 when unknown
	Job     string // `job "name"`, "job 3" (1-based), "defaults", or "" for the file as a whole
	Key     string // the TOML key at fault, e.g. "timeout" or "env.HOME"; "" for the whole job
	Message string // what was expected
	// Err is the sentinel this problem is an instance of, for errors.Is
	// through the *ValidationError (ErrNameInUse for a name held by a
	// queued or running job); nil for most problems. It is not printed:
	// Message says it.
	Err error
}

// StdinName is how messages name standard input: a file "" (no path).
const StdinName = "<stdin>"

// String formats the error as "file:line: job: key: message", leaving out
// the parts that are empty (file "" prints as [StdinName]).
func (e FieldError) String() string {
	var b strings.Builder
	b.WriteString(cmp.Or(e.File, StdinName))
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Job != "" {
		b.WriteString(e.Job + ": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// ValidationError lists every problem found in a batch. errors.Is(err,
// ErrInvalid) holds for it. A batch with a ValidationError enqueues nothing.
type ValidationError struct {
	Errors []FieldError // in file order
}

// Error lists every problem, one per line after a count.
func (e *ValidationError) Error() string {
	if len(e.Errors) == 1 {
		return "queue: invalid job: " + e.Errors[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "queue: invalid jobs (%d errors):", len(e.Errors))
	for i, fe := range e.Errors {
		if i == MaxErrorsShown {
			fmt.Fprintf(&b, "\n  ... and %d more problems", len(e.Errors)-i)
			break
		}
		b.WriteString("\n  " + fe.String())
	}
	return b.String()
}

// MaxErrorsShown is how many problems ValidationError.Error lists; the
// rest are counted. A file can hold 100,000 bad names in one after list,
// and a message of 100,000 lines helps no one.
const MaxErrorsShown = 50

// Is makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the sentinels of e's problems (FieldError.Err), so that
// errors.Is(err, ErrNameInUse) holds when a name was in use.
func (e *ValidationError) Unwrap() []error {
	var errs []error
	for _, fe := range e.Errors {
		if fe.Err != nil {
			errs = append(errs, fe.Err)
		}
	}
	return errs
}

// ParseFile reads and parses a job file. Relative paths resolve against the
// file's directory. It returns the specs and the file's bytes (to pass as
// JobEnqueueParams.Source); on failure, no specs and either the read error
// (wrapped) or a *ValidationError.
func ParseFile(path string) ([]Spec, []byte, error) {
	data, err := readJobFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("queue: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, fmt.Errorf("queue: %w", err)
	}
	specs, err := Parse(path, data, filepath.Dir(abs))
	if err != nil {
		return nil, nil, err
	}
	return specs, data, nil
}

// Parse parses job TOML. filename is only used in messages ("" for stdin).
// Relative paths resolve against baseDir ("" = the current directory).
//
// A file holds one job as top-level keys, or many as [[job]] tables; an
// optional [defaults] table applies to every job of the file (a job's own
// value replaces the default; env and labels are merged key by key).
// Validation is strict; on any problem Parse returns a *ValidationError
// listing every problem, and no specs. Names in After that are not in the
// file are left for the store to resolve. Parse never panics.
func Parse(filename string, data []byte, baseDir string) ([]Spec, error) {
	p := &parser{file: filename}
	if baseDir == "" {
		baseDir = "."
	}
	if abs, err := filepath.Abs(baseDir); err == nil {
		baseDir = abs
	}
	p.base = baseDir
	// A UTF-8 byte-order mark is not TOML, but editors write one; the
	// decoder would refuse it. Lines do not move.
	data = bytes.TrimPrefix(data, utf8BOM)
	// The header scan only reads data: run it beside the decoder (a 10k-job
	// batch: 13 ms of decoding, 8 ms of scanning).
	heads := make(chan keyLines, 1)
	go func() {
		// Line numbers only; never a reason to crash the caller. FuzzParse
		// runs the scan on every input, valid TOML or not.
		defer func() {
			if recover() != nil {
				heads <- nil
			}
		}()
		heads <- locateKeys(data, false)
	}()
	var raw map[string]any
	if err := toml.Unmarshal(data, &raw); err != nil {
		<-heads
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ := de.Position()
			key := strings.Join(de.Key(), ".")
			if key == "" {
				key = keyOnLine(data, line)
			}
			p.add(line, "", key, "invalid TOML: "+strings.TrimPrefix(de.Error(), "toml: "))
		} else {
			p.add(0, "", "", "invalid TOML: "+strings.TrimPrefix(err.Error(), "toml: "))
		}
		return nil, p.err()
	}
	p.data = data
	p.heads = <-heads
	specs := p.file2specs(raw)
	if err := p.err(); err != nil {
		return nil, err
	}
	return specs, nil
}

type parser struct {
	file  string
	base  string
	data  []byte
	heads keyLines // table headers only (cheap)
	lines keyLines // every key; computed on the first error
	errs  []FieldError
}

func (p *parser) keyLine(path string) int {
	if p.lines == nil {
		p.lines = locateKeys(p.data, true)
	}
	return p.lines.lookup(path)
}

// sortErrors orders errors by line, keeping the order found within a line.
func sortErrors(errs []FieldError) {
	sort.SliceStable(errs, func(i, j int) bool { return errs[i].Line < errs[j].Line })
}

func (p *parser) add(line int, job, key, msg string) {
	p.errs = append(p.errs, FieldError{File: p.file, Line: line, Job: job, Key: key, Message: msg})
}

func (p *parser) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	sortErrors(p.errs)
	return &ValidationError{Errors: p.errs}
}

// scope is where a table sits; its path prefix (for line lookup) and its
// label (for messages) are only built when an error needs them.
type scope struct {
	kind int // scopeFile, scopeDefaults, scopeJob
	idx  int // 0-based [[job]] index
	name string
}

const (
	scopeFile = iota
	scopeDefaults
	scopeJob
)

func (s scope) prefix() string {
	switch s.kind {
	case scopeDefaults:
		return "defaults"
	case scopeJob:
		return "job." + strconv.Itoa(s.idx)
	}
	return ""
}

func (s scope) label() string {
	switch s.kind {
	case scopeDefaults:
		return "defaults"
	case scopeFile:
		if s.name != "" {
			return "job " + strconv.Quote(s.name)
		}
	case scopeJob:
		if s.name != "" {
			return "job " + strconv.Quote(s.name)
		}
		return "job " + strconv.Itoa(s.idx+1)
	}
	return ""
}

func (s scope) path(key string) string {
	if p := s.prefix(); p != "" {
		return p + "." + key
	}
	return key
}

func (p *parser) at(s scope, key, msg string) {
	p.add(p.keyLine(s.path(key)), s.label(), key, msg)
}

var fieldNames = []string{"name", "command", "cwd", "workspace", "mode", "network", "writable", "env", "timeout", "retries", "backoff", "priority", "labels", "hooks", "after", "schedule", "timezone", "overlap", "missed", "missed_grace"}

func (p *parser) file2specs(raw map[string]any) []Spec {
	top := scope{}
	var defaults *fieldSet
	d, hasDefaults := raw["defaults"]
	if hasDefaults {
		if m, ok := d.(map[string]any); ok {
			f := p.fields(m, scope{kind: scopeDefaults}, true)
			defaults = &f
		} else {
			p.at(top, "defaults", "expected a table ([defaults]), got "+TOMLType(d))
		}
	}
	jobsRaw, batch := raw["job"]
	if !batch {
		if len(raw) == 0 || (len(raw) == 1 && hasDefaults) {
			p.add(1, "", "", "no job: expected top-level job keys (name, command, ...) or [[job]] tables")
			return nil
		}
		m := maps.Clone(raw)
		delete(m, "defaults")
		sc := scope{kind: scopeFile}
		if n, ok := m["name"].(string); ok {
			sc.name = n // errors name the job, as in [[job]] files
		}
		f := p.fields(m, sc, false)
		spec, ok := p.build(defaults, f, sc, 1)
		if !ok {
			return nil
		}
		return []Spec{spec}
	}
	for k := range raw {
		if k != "job" && k != "defaults" {
			msg := "unexpected top-level key in a file with [[job]] tables: job fields go inside [[job]] or [defaults]"
			if !slices.Contains(fieldNames, k) {
				msg = "unknown key" + suggest.DidYouMean(k, append(slices.Clone(fieldNames), "job", "defaults")) + "; in a file with [[job]] tables, job fields go inside [[job]] or [defaults]"
			}
			p.at(top, k, msg)
		}
	}
	list, ok := tables(jobsRaw)
	if !ok {
		p.at(top, "job", "expected an array of tables ([[job]]), got "+TOMLType(jobsRaw))
		return nil
	}
	if len(list) == 0 {
		p.at(top, "job", "no job: expected at least one [[job]] table")
		return nil
	}
	specs := make([]Spec, 0, len(list))
	for i, m := range list {
		sc := scope{kind: scopeJob, idx: i}
		if n, ok := m["name"].(string); ok {
			sc.name = n
		}
		f := p.fields(m, sc, false)
		line := p.heads.lookup(sc.prefix())
		if line == 0 { // job = [{...}, ...]: an inline array of tables
			line = p.keyLine("job")
		}
		if s, ok := p.build(defaults, f, sc, line); ok {
			specs = append(specs, s)
		}
	}
	p.checkBatch(specs, list)
	return specs
}

// checkBatch finds duplicate names and dependency cycles within a batch.
func (p *parser) checkBatch(specs []Spec, list []map[string]any) {
	first := map[string]int{}
	scheduled := map[string]bool{}
	for _, s := range specs {
		if s.Schedule != "" {
			scheduled[s.Name] = true
		}
	}
	for i, s := range specs {
		for _, a := range s.After {
			if scheduled[a] {
				p.add(p.keyLine("job."+strconv.Itoa(i)+".after"), "job "+strconv.Quote(s.Name), "after", fmt.Sprintf("%q is a schedule in this file, not a job: wait for one of its instances by id instead", a))
			}
		}
	}
	for _, s := range specs {
		if s.Name == "" {
			continue
		}
		if l, dup := first[s.Name]; dup {
			p.add(s.Line, "job "+strconv.Quote(s.Name), "name", fmt.Sprintf("duplicate name: the job at line %d already uses %q; names must be unique within a file", l, s.Name))
			continue
		}
		first[s.Name] = s.Line
	}
	batchCycles(specs, func(i int, cyc []string) {
		p.add(p.keyLine("job."+strconv.Itoa(i)+".after"), "job "+strconv.Quote(specs[i].Name), "after", "dependency cycle: "+strings.Join(cyc, " -> "))
	})
}

// batchCycles calls report once per dependency cycle among the named jobs
// of a batch, with the index of the job that closes it.
func batchCycles(specs []Spec, report func(i int, cycle []string)) {
	byName := make(map[string]int, len(specs))
	for i := range specs {
		if specs[i].Name != "" {
			byName[specs[i].Name] = i
		}
	}
	const (
		white = 0
		grey  = 1
		black = 2
	)
	color := make([]int, len(specs))
	var stack []string
	var visit func(i int)
	visit = func(i int) {
		color[i] = grey
		stack = append(stack, specs[i].Name)
		for _, dep := range specs[i].After {
			j, ok := byName[dep]
			if !ok {
				continue
			}
			switch color[j] {
			case grey:
				k := slices.Index(stack, dep)
				report(j, append(slices.Clone(stack[k:]), dep))
			case white:
				visit(j)
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
	}
	for i := range specs {
		if specs[i].Name != "" && color[i] == white {
			visit(i)
		}
	}
}

// field bits record which keys a table set.
type field uint32

const (
	fName field = 1 << iota
	fCommand
	fCwd
	fWorkspace
	fMode
	fNetwork
	fWritable
	fEnv
	fTimeout
	fRetries
	fBackoff
	fPriority
	fLabels
	fHooks
	fAfter
	fSchedule
	fTimezone
	fOverlap
	fMissed
	fMissedGrace
)

// fieldSet is one table's typed values: spec holds the fields whose bit is
// in set.
type fieldSet struct {
	set  field
	spec Spec
}

// fields type-checks the keys of one table and returns the typed values.
func (p *parser) fields(m map[string]any, sc scope, isDefaults bool) fieldSet {
	var fs fieldSet
	out := &fs.spec
	for k, v := range m {
		switch k {
		case "name":
			if isDefaults {
				p.at(sc, k, "a name cannot be a default: each job names itself")
				continue
			}
			s, ok := p.str(sc, k, v)
			if !ok {
				continue
			}
			if msg := checkName(s); msg != "" {
				p.at(sc, k, msg)
				continue
			}
			out.Name, fs.set = s, fs.set|fName
		case "command":
			switch c := v.(type) {
			case string:
				if strings.TrimSpace(c) == "" {
					p.at(sc, k, "empty command: expected a shell command string or an argv array")
				} else if strings.ContainsRune(c, 0) {
					p.at(sc, k, "command contains a NUL byte")
				} else {
					out.Command, fs.set = []string{"/bin/sh", "-c", c}, fs.set|fCommand
				}
			case []any:
				argv, ok := p.strList(sc, k, v)
				if !ok {
					continue
				}
				if len(argv) == 0 || argv[0] == "" {
					p.at(sc, k, "empty command: expected a non-empty argv array whose first element is the program")
					continue
				}
				bad := false
				for _, a := range argv {
					if strings.ContainsRune(a, 0) {
						bad = true
					}
				}
				if bad {
					p.at(sc, k, "command contains a NUL byte")
					continue
				}
				out.Command, fs.set = argv, fs.set|fCommand
			default:
				p.at(sc, k, "expected a string (run by /bin/sh -c) or an array of strings (argv), got "+TOMLType(v))
			}
		case "cwd", "workspace":
			s, ok := p.str(sc, k, v)
			if !ok {
				continue
			}
			if path, msg := p.path(s); msg != "" {
				p.at(sc, k, msg)
			} else if k == "workspace" && path == "/" {
				p.at(sc, k, `workspace "/" would make the whole filesystem writable: expected a dedicated directory`)
			} else if k == "cwd" {
				out.Cwd, fs.set = path, fs.set|fCwd
			} else {
				out.Workspace, fs.set = path, fs.set|fWorkspace
			}
		case "writable":
			list, ok := p.strList(sc, k, v)
			if !ok {
				continue
			}
			var paths []string
			for _, s := range list {
				path, msg := p.path(s)
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
				out.Writable, fs.set = paths, fs.set|fWritable
			}
		case "mode":
			s, ok := p.str(sc, k, v)
			if !ok {
				continue
			}
			if !slices.Contains(modes, s) {
				p.at(sc, k, fmt.Sprintf("unknown mode %q: expected one of %s%s", s, strings.Join(modes, ", "), suggest.DidYouMean(s, modes)))
				continue
			}
			out.Mode, fs.set = s, fs.set|fMode
		case "network":
			b, ok := v.(bool)
			if !ok {
				p.at(sc, k, "expected a boolean (true shares the host network, false isolates it), got "+TOMLType(v))
				continue
			}
			out.Network, fs.set = &b, fs.set|fNetwork
		case "env", "labels":
			t, ok := v.(map[string]any)
			if !ok {
				p.at(sc, k, "expected a table of strings, got "+TOMLType(v))
				continue
			}
			sm := make(map[string]string, len(t))
			for _, ek := range sortedKeys(t) { // sorted: errors in an inline table keep a stable order
				ev := t[ek]
				key := k + "." + ek
				s, isStr := ev.(string)
				switch {
				case !isStr:
					p.at(sc, key, "expected a string value, got "+TOMLType(ev)+` (quote it: "...")`)
				case ek == "" || strings.ContainsAny(ek, "=\x00"):
					p.at(sc, key, "invalid key: expected a non-empty name without '=' or NUL")
				case strings.ContainsRune(s, 0):
					p.at(sc, key, "value contains a NUL byte")
				default:
					sm[ek] = s
				}
			}
			if k == "env" {
				out.Env, fs.set = sm, fs.set|fEnv
			} else {
				out.Labels, fs.set = sm, fs.set|fLabels
			}
		case "timeout", "backoff":
			s, ok := v.(string)
			if !ok {
				p.at(sc, k, `expected a duration string like "90s" or "1h30m", got `+TOMLType(v))
				continue
			}
			d, err := time.ParseDuration(s)
			if err != nil {
				p.at(sc, k, fmt.Sprintf(`invalid duration %q: expected a Go duration like "90s" or "1h30m"`, s))
				continue
			}
			if d < 0 {
				p.at(sc, k, fmt.Sprintf("negative duration %q: expected zero or more", s))
				continue
			}
			if k == "timeout" {
				out.Timeout, fs.set = d, fs.set|fTimeout
			} else {
				out.Backoff, fs.set = d, fs.set|fBackoff
			}
		case "retries", "priority":
			n, ok := v.(int64)
			if !ok {
				p.at(sc, k, "expected an integer, got "+TOMLType(v))
				continue
			}
			if k == "retries" && (n < 0 || n > MaxRetries) {
				p.at(sc, k, fmt.Sprintf("retries %d out of range: expected 0 to %d", n, MaxRetries))
				continue
			}
			if k == "priority" && (n < -1_000_000 || n > 1_000_000) {
				p.at(sc, k, fmt.Sprintf("priority %d out of range: expected -1000000 to 1000000", n))
				continue
			}
			if k == "retries" {
				out.Retries, fs.set = int(n), fs.set|fRetries
			} else {
				out.Priority, fs.set = int(n), fs.set|fPriority
			}
		case "hooks", "after":
			list, ok := p.strList(sc, k, v)
			if !ok {
				continue
			}
			for _, s := range list {
				if strings.TrimSpace(s) == "" || strings.ContainsRune(s, 0) {
					p.at(sc, k, "expected non-empty names without NUL")
					ok = false
					break
				}
			}
			if ok && k == "hooks" {
				out.Hooks, fs.set = list, fs.set|fHooks
			} else if ok {
				out.After, fs.set = list, fs.set|fAfter
			}
		case "schedule":
			s, ok := p.str(sc, k, v)
			if !ok {
				continue
			}
			if _, err := ParseCron(s); err != nil {
				p.at(sc, k, strings.TrimPrefix(err.Error(), "queue: "))
				continue
			}
			out.Schedule, fs.set = strings.TrimSpace(s), fs.set|fSchedule
		case "overlap", "missed":
			s, ok := p.str(sc, k, v)
			if !ok {
				continue
			}
			allowed := overlapPolicies
			if k == "missed" {
				allowed = missedPolicies
			}
			if !slices.Contains(allowed, s) {
				p.at(sc, k, fmt.Sprintf("unknown policy %q: expected one of %s%s", s, strings.Join(allowed, ", "), suggest.DidYouMean(s, allowed)))
				continue
			}
			if k == "overlap" {
				out.Overlap, fs.set = s, fs.set|fOverlap
			} else {
				out.Missed, fs.set = s, fs.set|fMissed
			}
		case "missed_grace":
			s, ok := v.(string)
			if !ok {
				p.at(sc, k, `expected a duration string like "30m" or "2h", got `+TOMLType(v))
				continue
			}
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				p.at(sc, k, fmt.Sprintf(`invalid duration %q: expected a positive Go duration like "30m" or "2h"`, s))
				continue
			}
			out.MissedGrace, fs.set = d, fs.set|fMissedGrace
		case "timezone":
			s, ok := p.str(sc, k, v)
			if !ok {
				continue
			}
			if s == "" || strings.ContainsRune(s, 0) {
				p.at(sc, k, `expected an IANA time zone name like "Europe/Paris" or "UTC"`)
				continue
			}
			if err := checkZone(s); err != nil {
				p.at(sc, k, err.Error())
				continue
			}
			out.Timezone, fs.set = s, fs.set|fTimezone
		default:
			cands := fieldNames
			if sc.kind == scopeFile {
				cands = append(slices.Clone(fieldNames), "defaults", "job")
			}
			p.at(sc, k, "unknown key"+suggest.DidYouMean(k, cands))
		}
	}
	return fs
}

// build merges defaults and a job's own fields into a Spec.
func (p *parser) build(defaults *fieldSet, own fieldSet, sc scope, line int) (Spec, bool) {
	s := own.spec
	s.Line = line
	if defaults != nil {
		d := &defaults.spec
		has := func(f field) bool { return own.set&f == 0 && defaults.set&f != 0 }
		if has(fCommand) {
			s.Command = slices.Clone(d.Command)
		}
		if has(fCwd) {
			s.Cwd = d.Cwd
		}
		if has(fWorkspace) {
			s.Workspace = d.Workspace
		}
		if has(fMode) {
			s.Mode = d.Mode
		}
		if has(fNetwork) {
			b := *d.Network
			s.Network = &b
		}
		if has(fWritable) {
			s.Writable = slices.Clone(d.Writable)
		}
		if has(fTimeout) {
			s.Timeout = d.Timeout
		}
		if has(fRetries) {
			s.Retries = d.Retries
		}
		if has(fBackoff) {
			s.Backoff = d.Backoff
		}
		if has(fPriority) {
			s.Priority = d.Priority
		}
		if has(fHooks) {
			s.Hooks = slices.Clone(d.Hooks)
		}
		if has(fAfter) {
			s.After = slices.Clone(d.After)
		}
		if has(fSchedule) {
			s.Schedule = d.Schedule
		}
		if has(fTimezone) {
			s.Timezone = d.Timezone
		}
		if has(fOverlap) {
			s.Overlap = d.Overlap
		}
		if has(fMissed) {
			s.Missed = d.Missed
		}
		if has(fMissedGrace) {
			s.MissedGrace = d.MissedGrace
		}
		// env and labels merge key by key; the job's values win.
		if defaults.set&fEnv != 0 {
			m := maps.Clone(d.Env)
			maps.Copy(m, s.Env)
			s.Env = m
		}
		if defaults.set&fLabels != 0 {
			m := maps.Clone(d.Labels)
			maps.Copy(m, s.Labels)
			s.Labels = m
		}
	}
	if len(s.Command) == 0 {
		if !p.hadError(sc.label(), "command") && !p.hadError("defaults", "command") {
			p.add(line, sc.label(), "command", "missing: expected a string (run by /bin/sh -c) or an array of strings (argv)")
		}
		return s, false
	}
	if s.Name != "" && slices.Contains(s.After, s.Name) {
		p.at(sc, "after", fmt.Sprintf("job %q cannot wait for itself", s.Name))
		return s, false
	}
	ok := true
	// Extra writable roots only mean something in workspace_write (the
	// sandbox refuses them elsewhere); a job naming another mode would be
	// accepted here and fail every attempt. A job without a mode gets the
	// runner's default, checked when it runs.
	if len(s.Writable) > 0 && s.Mode != "" && s.Mode != "workspace_write" {
		line := line
		if l := p.keyLine(sc.path("writable")); l > 0 {
			line = l
		}
		p.add(line, sc.label(), "writable", fmt.Sprintf("extra writable paths need mode = \"workspace_write\", and this job's mode is %q", s.Mode))
		ok = false
	}
	for _, e := range scheduleProblems(&s, own.set&(fOverlap|fMissed|fMissedGrace) != 0) {
		line := line
		if e.key != "" {
			if l := p.keyLine(sc.path(e.key)); l > 0 {
				line = l
			}
		}
		p.add(line, sc.label(), e.key, e.msg)
		ok = false
	}
	if s.Schedule == "" { // policies inherited from [defaults] do not apply to one-off jobs
		s.Overlap, s.Missed, s.MissedGrace = "", "", 0
	}
	return s, ok
}

func (p *parser) hadError(label, key string) bool {
	for _, e := range p.errs {
		if e.Job == label && e.Key == key {
			return true
		}
	}
	return false
}

func (p *parser) str(sc scope, k string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		p.at(sc, k, "expected a string, got "+TOMLType(v))
	}
	return s, ok
}

func (p *parser) strList(sc scope, k string, v any) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok {
		p.at(sc, k, "expected an array of strings, got "+TOMLType(v))
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			p.at(sc, k, fmt.Sprintf("expected an array of strings, element %d is %s", i+1, TOMLType(e)))
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

// path checks and resolves a path; msg is non-empty when it is refused.
func (p *parser) path(s string) (string, string) {
	switch {
	case s == "":
		return "", "empty path: expected a directory"
	case strings.ContainsRune(s, 0):
		return "", "path contains a NUL byte"
	case strings.HasPrefix(s, "~"):
		return "", fmt.Sprintf("%q: ~ is not expanded; expected an absolute path or one relative to the job file", s)
	}
	if !filepath.IsAbs(s) {
		s = filepath.Join(p.base, s)
	}
	return filepath.Clean(s), ""
}

func checkName(s string) string {
	switch {
	case s == "":
		return "empty name: expected letters, digits, '.', '_' or '-', or no name key at all"
	case len(s) > MaxNameLen:
		return fmt.Sprintf("name longer than %d bytes", MaxNameLen)
	case !isAlnum(s[0]):
		return fmt.Sprintf("invalid name %q: expected it to start with a letter or digit", s)
	case looksLikeID(s):
		return fmt.Sprintf("invalid name %q: it looks like a job id (16 base32 characters); pick another", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
			return fmt.Sprintf("invalid name %q: expected only letters, digits, '.', '_' and '-'", s)
		}
	}
	return ""
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func sortedKeys[V any](m map[string]V) []string {
	ks := slices.Collect(maps.Keys(m))
	slices.Sort(ks)
	return ks
}

// utf8BOM is the UTF-8 byte-order mark, dropped from the start of job files
// and the config.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// tables returns v as a list of tables when it is an array whose every
// element is a table ([[job]] tables, or an inline array of inline tables).
func tables(v any) ([]map[string]any, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	list := make([]map[string]any, len(arr))
	for i, e := range arr {
		if list[i], ok = e.(map[string]any); !ok {
			return nil, false
		}
	}
	return list, true
}

// TOMLType names the TOML type of a value decoded into an any ("string",
// "integer", "float", "boolean", "array", "table", "date/time"), for
// error messages.
func TOMLType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "table"
	case time.Time, toml.LocalDate, toml.LocalTime, toml.LocalDateTime:
		return "date/time"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// validateSpecs checks specs built by Go code (Parse's output passes) so
// that the store never holds a job the runner cannot interpret.
func validateSpecs(file string, specs []Spec) error {
	var errs []FieldError
	names := map[string]bool{}
	zones := map[string]bool{}
	for i := range specs {
		s := &specs[i]
		label := "job " + strconv.Itoa(i+1)
		if s.Name != "" {
			label = "job " + strconv.Quote(s.Name)
		}
		bad := func(key, msg string) {
			errs = append(errs, FieldError{File: file, Line: s.Line, Job: label, Key: key, Message: msg})
		}
		if s.Name != "" {
			if msg := checkName(s.Name); msg != "" {
				bad("name", msg)
			} else if names[s.Name] {
				bad("name", fmt.Sprintf("duplicate name %q in the batch", s.Name))
			}
			names[s.Name] = true
		}
		if len(s.Command) == 0 || s.Command[0] == "" {
			bad("command", "empty command: expected a non-empty argv")
		}
		for _, a := range s.Command {
			if strings.ContainsRune(a, 0) {
				bad("command", "command contains a NUL byte")
				break
			}
		}
		if s.Mode != "" && !slices.Contains(modes, s.Mode) {
			bad("mode", fmt.Sprintf("unknown mode %q: expected one of %s", s.Mode, strings.Join(modes, ", ")))
		}
		for key, ps := range map[string][]string{"cwd": {s.Cwd}, "workspace": {s.Workspace}, "writable": s.Writable} {
			for _, p := range ps {
				if key != "writable" && p == "" {
					continue
				}
				switch {
				case strings.ContainsRune(p, 0) || !filepath.IsAbs(p):
					bad(key, fmt.Sprintf("%q: expected an absolute path without NUL", p))
				case (key == "workspace" || key == "writable") && filepath.Clean(p) == "/":
					bad(key, `"/" would make the whole filesystem writable`)
				}
			}
		}
		if s.Timeout < 0 {
			bad("timeout", "negative duration: expected zero or more")
		}
		if s.Backoff < 0 {
			bad("backoff", "negative duration: expected zero or more")
		}
		if s.Retries < 0 || s.Retries > MaxRetries {
			bad("retries", fmt.Sprintf("retries %d out of range: expected 0 to %d", s.Retries, MaxRetries))
		}
		for _, a := range s.After {
			if a == "" || a == s.Name {
				bad("after", fmt.Sprintf("invalid dependency %q: expected the name or id of another job", a))
			}
		}
		for _, e := range scheduleProblems(s, s.Schedule == "" && (s.Overlap != "" || s.Missed != "" || s.MissedGrace != 0)) {
			bad(e.key, e.msg)
		}
		if s.Timezone != "" && !zones[s.Timezone] {
			if err := checkZone(s.Timezone); err != nil {
				bad("timezone", err.Error())
			} else {
				zones[s.Timezone] = true
			}
		}
		for k := range s.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") {
				bad("env", fmt.Sprintf("invalid variable name %q", k))
			}
		}
	}
	batchCycles(specs, func(i int, cyc []string) {
		errs = append(errs, FieldError{File: file, Line: specs[i].Line, Job: "job " + strconv.Quote(specs[i].Name), Key: "after", Message: "dependency cycle: " + strings.Join(cyc, " -> ")})
	})
	if len(errs) > 0 {
		sortErrors(errs)
		return &ValidationError{Errors: errs}
	}
	return nil
}

// checkZone refuses a timezone that is not an IANA time zone name
// time.LoadLocation knows, and "Local": LoadLocation takes it as the
// zone of the process that reads it (its TZ, /etc/localtime), so a
// schedule would fire at other hours for `submit`, each worker and
// `schedules next`.
func checkZone(name string) error {
	if name == "Local" {
		return errors.New(`"Local" is the zone of whichever process reads the job, not one zone: name the zone, like "Europe/Paris", or "UTC"`)
	}
	if _, err := time.LoadLocation(name); err != nil {
		return fmt.Errorf(`unknown time zone %q: expected an IANA name like "Europe/Paris" or "UTC"`, name)
	}
	return nil
}

// MaxJobFileBytes is the largest job file ParseFile (and the inbox) reads,
// in bytes.
const MaxJobFileBytes = 64 << 20

// readJobFile reads a job file: a regular file or a pipe (a named pipe, or
// /dev/fd/N from a shell's process substitution), of at most
// MaxJobFileBytes. A device, a directory or a socket is refused unread:
// /dev/zero would never end.
func readJobFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if m := fi.Mode(); !m.IsRegular() && m&fs.ModeNamedPipe == 0 {
		return nil, fmt.Errorf("%s is %s; a job file is a regular file or a pipe", path, filekind.Of(m))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxJobFileBytes+1))
	if err == nil && len(data) > MaxJobFileBytes {
		err = fmt.Errorf("%s is larger than %d bytes, the most a job file may be", path, MaxJobFileBytes)
	}
	return data, err
}

package jobspec

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"paddock/internal/tomlfile"
)

// ParseFile reads and parses a job file. Relative paths resolve against the
// file's directory. It returns the specs and the file's bytes (a store
// keeps them with the jobs); on failure, no specs and either the read
// error (wrapped) or a *ValidationError.
func ParseFile(path string) ([]Spec, []byte, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("jobspec: %w", err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, fmt.Errorf("jobspec: %w", err)
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
	// A UTF-8 byte-order mark is not TOML, but editors write one. Lines do
	// not move.
	data = tomlfile.TrimBOM(data)
	// The header scan (a fast pass) places the jobs, and lets a large
	// file be decoded in pieces on several cores.
	heads := locateHeads(data)
	raw, err := decodeFile(data, heads)
	if err != nil {
		var te *tomlfile.Error
		if errors.As(err, &te) {
			p.add(te.Line, "", te.Key, te.Msg)
		} else {
			p.add(0, "", "", err.Error())
		}
		return nil, p.err()
	}
	p.data = data
	p.heads = heads
	specs := p.file2specs(raw)
	if err := p.err(); err != nil {
		return nil, err
	}
	return specs, nil
}

// locateHeads is the header scan of data; nil if it failed. Line numbers
// only: never a reason to crash the caller (FuzzParse runs the scan on
// every input, valid TOML or not).
func locateHeads(data []byte) (heads tomlfile.Lines) {
	defer func() {
		if recover() != nil {
			heads = nil
		}
	}()
	return tomlfile.Locate(data, false)
}

type parser struct {
	file  string
	base  string
	data  []byte
	heads tomlfile.Lines // table headers only (cheap)
	lines tomlfile.Lines // every key; computed on the first error
	errs  []FieldError
}

func (p *parser) keyLine(path string) int {
	if p.lines == nil {
		p.lines = tomlfile.Locate(p.data, true)
	}
	return p.lines.Lookup(path)
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

func (p *parser) file2specs(raw map[string]any) []Spec {
	top := scope{}
	var defaults *fieldSet
	d, hasDefaults := raw["defaults"]
	if hasDefaults {
		if m, ok := d.(map[string]any); ok {
			f := p.fields(m, scope{kind: scopeDefaults}, true)
			defaults = &f
		} else {
			p.at(top, "defaults", "expected a table ([defaults]), got "+tomlfile.TypeName(d))
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
			if _, ok := keyIndex[k]; !ok {
				msg = "unknown key" + keyHint(k, append(KeyNames(), "job", "defaults")) + "; in a file with [[job]] tables, job fields go inside [[job]] or [defaults]"
			}
			p.at(top, k, msg)
		}
	}
	list, ok := tables(jobsRaw)
	if !ok {
		p.at(top, "job", "expected an array of tables ([[job]]), got "+tomlfile.TypeName(jobsRaw))
		return nil
	}
	if len(list) == 0 {
		p.at(top, "job", "no job: expected at least one [[job]] table")
		return nil
	}
	specs := make([]Spec, 0, len(list))
	var tableOf []int // the [[job]] table each of specs came from
	for i, m := range list {
		sc := scope{kind: scopeJob, idx: i}
		if n, ok := m["name"].(string); ok {
			sc.name = n
		}
		f := p.fields(m, sc, false)
		line := p.heads.Lookup(sc.prefix())
		if line == 0 { // job = [{...}, ...]: an inline array of tables
			line = p.keyLine("job")
		}
		if s, ok := p.build(defaults, f, sc, line); ok {
			specs = append(specs, s)
			tableOf = append(tableOf, i)
		}
	}
	p.checkBatch(specs, tableOf)
	return specs
}

// checkBatch finds duplicate names and dependency cycles within a batch;
// tableOf[i] is the index of the [[job]] table specs[i] came from (a
// table that did not build has no spec), for placing its keys.
func (p *parser) checkBatch(specs []Spec, tableOf []int) {
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
				p.add(p.keyLine("job."+strconv.Itoa(tableOf[i])+".after"), "job "+strconv.Quote(s.Name), "after", fmt.Sprintf("%q is a schedule in this file, not a job: wait for one of its instances by id instead", a))
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
		p.add(p.keyLine("job."+strconv.Itoa(tableOf[i])+".after"), "job "+strconv.Quote(specs[i].Name), "after", "dependency cycle: "+strings.Join(cyc, " -> "))
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

// build merges defaults and a job's own fields into a Spec.
func (p *parser) build(defaults *fieldSet, own fieldSet, sc scope, line int) (Spec, bool) {
	s := own.spec
	s.Line = line
	if defaults != nil {
		inheritDefaults(&s, own.set, defaults)
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
	stray := ""
	for _, k := range schedulePolicyKeys {
		if own.set.has(k) {
			stray = k
			break
		}
	}
	for _, e := range append(scheduleProblems(&s, stray), limitProblems(&s)...) {
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
		s.Overlap, s.Missed, s.MissedGrace, s.Jitter = "", "", 0, 0
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
		p.at(sc, k, "expected a string, got "+tomlfile.TypeName(v))
	}
	return s, ok
}

func (p *parser) strList(sc scope, k string, v any) ([]string, bool) {
	arr, ok := v.([]any)
	if !ok {
		p.at(sc, k, "expected an array of strings, got "+tomlfile.TypeName(v))
		return nil, false
	}
	out := make([]string, 0, len(arr))
	for i, e := range arr {
		s, ok := e.(string)
		if !ok {
			p.at(sc, k, fmt.Sprintf("expected an array of strings, element %d is %s", i+1, tomlfile.TypeName(e)))
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
	case LooksLikeID(s):
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

// tables returns v as a list of tables when it is an array whose every
// element is a table ([[job]] tables, or an inline array of inline tables).
func tables(v any) ([]map[string]any, bool) {
	if list, ok := v.([]map[string]any); ok { // [[job]] tables
		return list, true
	}
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

// Command denylist is a paddock hook (command ABI) that denies jobs running
// a program named in its settings:
//
//	[[hook]]
//	name = "denylist"
//	path = "bin/hooks/denylist.wasm"
//	settings = { deny = ["curl", "wget"], strict = false }
//
// It looks at the program name (the base name, so /usr/bin/curl is curl) of
// argv[0], and sees through wrappers that run another command: env
// (options, NAME=value assignments, -S strings), sudo, doas, nice, timeout,
// nohup, setsid, stdbuf, ionice, chroot, time, command, exec, xargs,
// busybox; and through `sh -c STRING` (also bash, dash, zsh, ksh, with
// combined flags such as -lc, -ec).
//
// A shell string made of plain words is split into commands on ; | & && ||
// and newlines, and each command is checked like an argv (leading NAME=value
// assignments and keywords such as if, then, do, ! skipped). A string with
// shell syntax this hook cannot parse soundly (quotes, $, backticks,
// backslashes, parentheses, braces, redirections, globs, comments, ~)
// fails closed: the job is denied when any denied name appears as a word
// anywhere in it, after quotes and backslashes are removed. So both of these
// are denied, the second one wrongly:
//
//	sh -c 'echo "$(c\url x)"'
//	sh -c 'echo "no curl here"'
//
// With strict = true such a string is denied outright.
//
// What it cannot see: names built at run time ($x, eval, base64), scripts
// in files (`bash script.sh`), interpreters (`python -c`), wrappers it does
// not know. A deny list is a convenience, not a sandbox: the write fence is.
//
// It checks its settings when paddock asks at load (a request with
// "validate_settings": true): unknown keys, wrong types, and a name that
// is empty or holds a "/" (names are matched against base names) refuse
// them, and paddock does not start. Should bad settings reach a decision
// anyway (an older paddock), the hook exits 1, which paddock treats as a
// failure: the job is denied (fail closed).
//
//	GOOS=wasip1 GOARCH=wasm go build -o denylist.wasm ./examples/hooks/denylist
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

type request struct {
	// ValidateSettings marks the settings check paddock makes once at
	// load; such a request has no job.
	ValidateSettings bool `json:"validate_settings"`
	Hook             struct {
		Settings json.RawMessage `json:"settings"`
	} `json:"hook"`
	Job struct {
		Argv []string `json:"argv"`
	} `json:"job"`
}

type settings struct {
	// Deny lists program names (base names) to deny.
	Deny []string `json:"deny"`
	// Strict denies shell strings this hook cannot parse as plain words.
	Strict bool `json:"strict"`
}

type decision struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
}

// settingsAnswer answers the settings check.
type settingsAnswer struct {
	Valid   bool   `json:"valid"`
	Message string `json:"message,omitempty"`
}

func main() {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	answer, err := handle(data)
	if err != nil {
		fail(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(answer); err != nil {
		fail(err)
	}
}

// handle answers one request: a settingsAnswer for the settings check, a
// decision otherwise.
func handle(data []byte) (any, error) {
	var req request
	if err := json.Unmarshal(data, &req); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	if req.ValidateSettings {
		if _, err := parseSettings(req.Hook.Settings); err != nil {
			return settingsAnswer{Message: err.Error()}, nil
		}
		return settingsAnswer{Valid: true}, nil
	}
	return decide(data)
}

// parseSettings reads the settings strictly.
func parseSettings(raw json.RawMessage) (settings, error) {
	var s settings
	if len(raw) > 0 {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			return s, settingsError(err)
		}
	}
	for _, n := range s.Deny {
		if n == "" || strings.Contains(n, "/") {
			return s, fmt.Errorf("settings: deny: %q is not a program name: list base names, like \"curl\" (they match /usr/bin/curl too)", n)
		}
	}
	return s, nil
}

// settingsError words a decoding error of the settings in the terms of
// the config file's [[hook]] table, not Go's: the key at fault and what
// it takes.
func settingsError(err error) error {
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te) && te.Field != "":
		want := map[string]string{"deny": "a list of program names", "strict": "true or false"}[strings.SplitN(te.Field, ".", 2)[0]]
		if want == "" {
			want = "a " + te.Type.String()
		}
		return fmt.Errorf("settings: %s: expected %s, got %s", te.Field, want, jsonKind(te.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("settings: unknown key %s (this hook takes deny and strict)", strings.TrimPrefix(err.Error(), "json: unknown field "))
	case errors.As(err, &te):
		return fmt.Errorf("settings: expected a table (deny, strict), got %s", jsonKind(te.Value))
	}
	return fmt.Errorf("settings: %w", err)
}

// jsonKind is how a TOML reader would name the kind of a JSON value that
// UnmarshalTypeError.Value names ("string", "number", "array", …).
func jsonKind(v string) string {
	switch {
	case v == "array":
		return "a list"
	case v == "object":
		return "a table"
	case strings.HasPrefix(v, "number"):
		return "a number"
	case v == "bool":
		return "true or false"
	}
	return "a " + v
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "denylist:", err)
	os.Exit(1)
}

// decide returns the decision for one request, or an error for a request
// or settings it cannot read.
func decide(data []byte) (decision, error) {
	var req request
	if err := json.Unmarshal(data, &req); err != nil {
		return decision{}, fmt.Errorf("request: %w", err)
	}
	s, err := parseSettings(req.Hook.Settings)
	if err != nil {
		return decision{}, err
	}
	w := walker{deny: map[string]bool{}, strict: s.Strict}
	for _, n := range s.Deny {
		w.deny[n] = true
	}
	if why := w.argv(req.Job.Argv, "", 0); why != "" {
		return decision{Decision: "deny", Reason: why}, nil
	}
	return decision{Decision: "allow"}, nil
}

// maxDepth bounds wrapper and shell nesting; deeper is denied.
const maxDepth = 16

type walker struct {
	deny   map[string]bool
	strict bool
}

// wrapper describes a program that runs another command from its operands.
type wrapper struct {
	shortArg string   // short options that take an argument
	longArg  []string // long options that take an argument (without "--")
	operands int      // operands before the command (timeout DURATION, chroot NEWROOT)
	assign   bool     // NAME=value operands may precede the command (env, sudo)
	split    string   // short option whose argument is a command string (env -S)
	splitL   string   // long form of split
}

var wrappers = map[string]wrapper{
	"env":     {shortArg: "uCS", longArg: []string{"unset", "chdir", "split-string"}, assign: true, split: "S", splitL: "split-string"},
	"sudo":    {shortArg: "CDgpRrtTUu", longArg: []string{"chdir", "close-from", "group", "host", "prompt", "chroot", "role", "type", "command-timeout", "other-user", "user"}, assign: true},
	"doas":    {shortArg: "uC"},
	"nice":    {shortArg: "n", longArg: []string{"adjustment"}},
	"timeout": {shortArg: "sk", longArg: []string{"signal", "kill-after"}, operands: 1},
	"nohup":   {},
	"setsid":  {},
	"stdbuf":  {shortArg: "ioe", longArg: []string{"input", "output", "error"}},
	"ionice":  {shortArg: "cnpPu", longArg: []string{"class", "classdata", "pid", "pgid", "uid"}},
	"chroot":  {longArg: []string{"userspec", "groups"}, operands: 1},
	"time":    {shortArg: "fo", longArg: []string{"format", "output"}},
	"command": {},
	"exec":    {shortArg: "a"},
	"xargs":   {shortArg: "adEILnPs", longArg: []string{"arg-file", "delimiter", "eof", "max-lines", "max-args", "max-procs", "max-chars", "process-slot-var"}},
	"busybox": {},
}

var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true}

// argv returns why argv is denied, or "" when it is not. via describes
// the wrappers that led here, for the reason.
func (w *walker) argv(args []string, via string, depth int) string {
	for len(args) > 0 {
		if depth > maxDepth {
			return fmt.Sprintf("command nesting deeper than %d levels%s", maxDepth, via)
		}
		prog := path.Base(args[0])
		if w.deny[prog] {
			return fmt.Sprintf("program %q is on the deny list%s", prog, via)
		}
		if shells[prog] {
			s, ok := shellString(args[1:])
			if !ok {
				return ""
			}
			return w.shell(s, via+" via "+prog+" -c", depth+1)
		}
		wr, ok := wrappers[prog]
		if !ok {
			return ""
		}
		inner, splits := wr.inner(args[1:])
		for _, s := range splits {
			if why := w.shell(s, via+" via "+prog+" -"+wr.split, depth+1); why != "" {
				return why
			}
		}
		args, via, depth = inner, via+" via "+prog, depth+1
	}
	return ""
}

// inner returns the command a wrapper runs, and the strings of its split
// option (env -S).
func (wr wrapper) inner(a []string) ([]string, []string) {
	var splits []string
	i := 0
options:
	for ; i < len(a); i++ {
		t := a[i]
		switch {
		case t == "--":
			i++
			break options
		case strings.HasPrefix(t, "--"):
			name, val, hasVal := strings.Cut(t[2:], "=")
			if !hasVal && contains(wr.longArg, name) && i+1 < len(a) {
				i++
				val = a[i]
			}
			if name == wr.splitL && wr.splitL != "" {
				splits = append(splits, val)
			}
		case strings.HasPrefix(t, "-") && len(t) > 1:
			for j := 1; j < len(t); j++ {
				c := t[j : j+1]
				if !strings.Contains(wr.shortArg, c) {
					continue
				}
				val := t[j+1:]
				if val == "" && i+1 < len(a) {
					i++
					val = a[i]
				}
				if c == wr.split {
					splits = append(splits, val)
				}
				break
			}
		case t == "-":
			// env's "-" is -i; elsewhere harmless.
		default:
			break options
		}
	}
	a = a[min(i, len(a)):]
	if wr.assign {
		for len(a) > 0 && isAssignment(a[0]) {
			a = a[1:]
		}
	}
	if len(a) < wr.operands {
		return nil, splits
	}
	return a[wr.operands:], splits
}

// shellString returns the command string of `sh [options] -c STRING ...`,
// with combined flags (-lc, -ec) and options taking an argument (-o, -O,
// --rcfile, --init-file) understood. ok is false when there is no -c.
func shellString(a []string) (string, bool) {
	hasC := false
	for i := 0; i < len(a); i++ {
		t := a[i]
		switch {
		case t == "--" || t == "-":
			if hasC && i+1 < len(a) {
				return a[i+1], true
			}
			return "", false
		case strings.HasPrefix(t, "--"):
			if t == "--rcfile" || t == "--init-file" {
				i++
			}
		case (t[0] == '-' || t[0] == '+') && len(t) > 1:
			if t[0] == '-' && strings.Contains(t[1:], "c") {
				hasC = true
			}
			if strings.ContainsAny(t[1:], "oO") {
				i++
			}
		default:
			return t, hasC
		}
	}
	return "", false
}

// unsound are the characters of shell syntax this hook does not parse.
const unsound = "'\"`$\\(){}<>*?[]#~"

var keywords = map[string]bool{"if": true, "then": true, "else": true, "elif": true, "fi": true, "do": true, "done": true, "while": true, "until": true, "!": true}

// shell returns why the shell string s is denied, or "".
func (w *walker) shell(s, via string, depth int) string {
	if depth > maxDepth {
		return fmt.Sprintf("command nesting deeper than %d levels%s", maxDepth, via)
	}
	if strings.ContainsAny(s, unsound) {
		if w.strict {
			return fmt.Sprintf("shell string %q uses syntax the deny list cannot parse (strict = true)%s", s, via)
		}
		// Fail closed: any denied name appearing as a word denies.
		flat := strings.NewReplacer("'", "", `"`, "", `\`, "").Replace(s)
		words := strings.FieldsFunc(flat, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-/:@%,", r))
		})
		for _, word := range words {
			if name := path.Base(word); w.deny[name] {
				return fmt.Sprintf("program %q appears in a shell string the deny list cannot parse soundly (fail closed)%s", name, via)
			}
		}
		return ""
	}
	s = strings.NewReplacer("&&", ";", "||", ";").Replace(s)
	for _, cmd := range strings.FieldsFunc(s, func(r rune) bool { return strings.ContainsRune(";|&\n", r) }) {
		f := strings.Fields(cmd)
		for len(f) > 0 && (isAssignment(f[0]) || keywords[f[0]]) {
			f = f[1:]
		}
		if why := w.argv(f, via, depth); why != "" {
			return why
		}
	}
	return ""
}

// isAssignment reports whether s is NAME=value with a valid shell name.
func isAssignment(s string) bool {
	name, _, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return false
	}
	for i, r := range name {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

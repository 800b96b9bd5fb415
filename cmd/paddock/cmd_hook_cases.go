package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"paddock/hooks"
	"paddock/internal/filekind"
	"paddock/internal/suggest"
	"paddock/internal/tomlfile"
	"paddock/runner"
)

// hookCasesFile is a policy cases file for `paddock hook test --cases`
// (examples/hooks/README.md, "Policy cases", documents it):
//
//	settings = { deny = ["curl"] }   # the hook's settings for every case
//
//	[[case]]
//	name = "curl behind sudo"
//	argv = ["sudo", "curl", "x"]
//	decision = "deny"
//	reason = "on the deny list"      # a substring of the reason
type hookCasesFile struct {
	// Settings are the hook's settings for every case; --settings
	// replaces them. Defaults to none ({}).
	Settings map[string]any `toml:"settings"`
	// Case lists the cases, run in order.
	Case []hookCase `toml:"case"`
}

// hookCase is one case: a job (the wire's job fields; unset ones take the
// job flags' defaults) and what the hook must answer.
type hookCase struct {
	Name      string            `toml:"name"`
	Argv      []string          `toml:"argv"`
	Env       map[string]string `toml:"env"`
	Cwd       string            `toml:"cwd"`
	Workspace string            `toml:"workspace"`
	Mode      string            `toml:"mode"`
	Network   *bool             `toml:"network"`
	Writable  []string          `toml:"writable"`
	TimeoutS  float64           `toml:"timeout_s"`
	Labels    map[string]string `toml:"labels"`
	// Decision is the expected decision: allow, adjust or deny. Required.
	Decision string `toml:"decision"`
	// Reason, when set, must be a substring of the hook's reason.
	Reason string `toml:"reason"`
	// Error, when set, must be a substring of the hook's failure: the case
	// expects the hook to fail (and so to deny). When "", a failing hook
	// fails the case, whatever the decision expected.
	Error string `toml:"error"`
	// Adjusted lists job fields and the values they must have after the
	// hook's adjust (decision "adjust" only); fields not listed are not
	// checked.
	Adjusted *hookCaseAdjusted `toml:"adjusted"`
}

// hookCaseKeys are the keys of a [[case]] table, for suggestions.
var hookCaseKeys = []string{"name", "argv", "env", "cwd", "workspace", "mode", "network", "writable", "timeout_s", "labels", "decision", "reason", "error", "adjusted"}

// hookCaseAdjusted are the adjustable fields, by their wire names.
type hookCaseAdjusted struct {
	Argv     []string          `toml:"argv"`
	Env      map[string]string `toml:"env"`
	Cwd      *string           `toml:"cwd"`
	Mode     *string           `toml:"mode"`
	Network  *bool             `toml:"network"`
	Writable []string          `toml:"writable"`
	TimeoutS *float64          `toml:"timeout_s"`
}

// hookCaseMessage is one case's outcome (message_type "hook_case").
type hookCaseMessage struct {
	MessageType string   `json:"message_type"`
	Case        string   `json:"case"`
	Line        int      `json:"line,omitempty"`
	Passed      bool     `json:"passed"`
	Want        string   `json:"want"`
	Got         string   `json:"got"`
	Reason      string   `json:"reason,omitempty"`
	Error       string   `json:"error,omitempty"`
	Problems    []string `json:"problems,omitempty"`
}

// hookCasesMessage is the summary (message_type "hook_cases").
type hookCasesMessage struct {
	MessageType string `json:"message_type"`
	Hook        string `json:"hook"`
	File        string `json:"file"`
	Passed      int    `json:"passed"`
	Failed      int    `json:"failed"`
}

// runHookCases runs every case of opts.Cases through the hook at path and
// writes a table (or JSON lines). Any failed case returns an
// *exitCodeError with code 1; a cases file that does not read or parse, or
// a hook that does not load, a usage error.
func runHookCases(ctx context.Context, opts HookTestOptions, gopts *GlobalOptions, path string, stdout io.Writer) error {
	file := opts.Cases
	cases, settings, lines, err := readHookCases(file)
	if err != nil {
		return err
	}
	if opts.Settings != "" {
		if settings, err = hookTestSettings(opts.Settings); err != nil {
			return err
		}
	}
	name := cmp.Or(opts.Name, strings.TrimSuffix(filepath.Base(path), ".wasm"))
	chain, err := newHookTestChain(ctx, opts, gopts, path, name, settings, hookTestSandbox)
	if err != nil {
		return err
	}
	defer chain.Close(context.WithoutCancel(ctx))

	var msgs []hookCaseMessage
	failed := 0
	for i, c := range cases {
		job, err := c.job(opts)
		if err != nil {
			return usagef("%s:%d: case %q: %v", file, lines[i], c.Name, err)
		}
		res, err := chain.Decide(ctx, hooks.DecideParams{Job: job})
		if err != nil {
			return err
		}
		m := c.check(res)
		m.Line = lines[i]
		if !m.Passed {
			failed++
		}
		msgs = append(msgs, m)
	}
	sum := hookCasesMessage{MessageType: "hook_cases", Hook: name, File: file, Passed: len(cases) - failed, Failed: failed}
	if gopts.JSON {
		for _, m := range msgs {
			if err := writeJSON(stdout, m); err != nil {
				return err
			}
		}
		if err := writeJSON(stdout, sum); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RESULT\tCASE\tWANT\tGOT\tWHY")
		for _, m := range msgs {
			result, why := "pass", ""
			if !m.Passed {
				result, why = "FAIL", strings.Join(m.Problems, "; ")
			}
			// Escaped before the widths are measured (termsafe.go).
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", result, termSafe(m.Case), m.Want, m.Got, termSafe(why))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %d of %d cases passed\n", file, sum.Passed, len(cases))
	}
	if failed > 0 {
		return &exitCodeError{code: exitFailure}
	}
	return nil
}

// readHookCases reads and checks a cases file strictly. lines[i] is the
// line of case i's [[case]] header (0 when unknown). Errors are usage
// errors naming the file, the line and the key.
func readHookCases(file string) (cases []hookCase, settings map[string]any, lines []int, err error) {
	data, err := filekind.ReadFile(file, nil, runner.MaxConfigBytes, "a cases file")
	if err != nil {
		return nil, nil, nil, usagef("--cases: %v", err)
	}
	var f hookCasesFile
	md, err := tomlfile.Decode(data, &f, nil)
	if err != nil {
		var te *tomlfile.Error
		if errors.As(err, &te) && te.Line > 0 {
			return nil, nil, nil, usagef("%s:%d: %s", file, te.Line, strings.TrimPrefix(te.Error(), fmt.Sprintf("line %d: ", te.Line)))
		}
		return nil, nil, nil, usagef("%s: %v", file, err)
	}
	kl := tomlfile.Locate(tomlfile.TrimBOM(data), true)
	var problems []string
	// next is, for a key path the decoder names once per [[case]] that
	// has it, the case to look in from: its N-th naming is the N-th case
	// holding it.
	next := map[string]int{}
	for _, k := range md.Undecoded() {
		if len(k) > 1 && k[0] == "settings" {
			continue // the hook's to judge
		}
		cands := []string{"settings", "case"}
		switch {
		case len(k) == 3 && k[1] == "adjusted":
			cands = hooks.AdjustableFields()
		case len(k) == 2 && k[0] == "case":
			cands = hookCaseKeys
		}
		// The decoder names a key of any [[case]] "case.KEY", once for
		// each case that has it, in order: the scan places the N-th in
		// the N-th case that has it, and the message names the case.
		line := kl.Lookup(k.String())
		where := k.String()
		if len(k) >= 2 && k[0] == "case" {
			for i := next[k.String()]; i < len(f.Case); i++ {
				if l, ok := kl["case."+strconv.Itoa(i)+"."+strings.Join(k[1:], ".")]; ok {
					line, where = l, fmt.Sprintf("case %d: %s", i+1, strings.Join(k[1:], "."))
					next[k.String()] = i + 1
					break
				}
			}
		}
		problems = append(problems, fmt.Sprintf("%s:%d: %s: unknown key%s", file, line, where, suggest.DidYouMean(k[len(k)-1], cands)))
	}
	if len(problems) > 0 {
		return nil, nil, nil, usagef("%s", strings.Join(problems, "\n"))
	}
	if len(f.Case) == 0 {
		return nil, nil, nil, usagef("%s: no case: expected [[case]] tables", file)
	}
	for i := range f.Case {
		lines = append(lines, kl["case."+strconv.Itoa(i)])
	}
	for i := range f.Case {
		c := &f.Case[i]
		bad := func(key, format string, args ...any) error {
			return usagef("%s:%d: case %d: %s: %s", file, lines[i], i+1, key, fmt.Sprintf(format, args...))
		}
		if c.Name == "" {
			c.Name = fmt.Sprintf("case %d", i+1)
		}
		if len(c.Argv) == 0 {
			return nil, nil, nil, bad("argv", "missing: the job's argv, argv[0] first")
		}
		switch c.Decision {
		case hooks.DecisionAllow, hooks.DecisionDeny:
		case hooks.DecisionAdjust:
		case "":
			return nil, nil, nil, bad("decision", `missing: "allow", "adjust" or "deny"`)
		default:
			return nil, nil, nil, bad("decision", `%q is not "allow", "adjust" or "deny"`, c.Decision)
		}
		if c.Adjusted != nil && c.Decision != hooks.DecisionAdjust {
			return nil, nil, nil, bad("adjusted", `only with decision = "adjust"`)
		}
		if c.Error != "" && c.Decision != hooks.DecisionDeny {
			return nil, nil, nil, bad("error", `a failing hook denies: expected decision = "deny"`)
		}
	}
	return f.Case, f.Settings, lines, nil
}

// job returns the case's job, with the job flags' defaults for what it
// does not set.
func (c hookCase) job(opts HookTestOptions) (hooks.Job, error) {
	cwd := c.Cwd
	if cwd == "" {
		cwd = opts.Cwd
	}
	if cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return hooks.Job{}, err
		}
		cwd = wd
	}
	ws := cmp.Or(c.Workspace, opts.Workspace, cwd)
	network := opts.Network
	if c.Network != nil {
		network = *c.Network
	}
	return hooks.Job{
		ID: "test", Name: c.Name, Argv: c.Argv, Env: c.Env, Cwd: cwd, Workspace: ws,
		Mode: cmp.Or(c.Mode, opts.Mode), Network: network, Writable: c.Writable,
		TimeoutS: c.TimeoutS, Attempt: 1, Labels: c.Labels,
	}, nil
}

// check compares the chain's result with what the case expects.
func (c hookCase) check(res hooks.Result) hookCaseMessage {
	e := res.Trail[0]
	m := hookCaseMessage{MessageType: "hook_case", Case: c.Name, Want: c.Decision, Got: e.Decision, Reason: e.Reason, Error: e.Error}
	fail := func(format string, args ...any) { m.Problems = append(m.Problems, fmt.Sprintf(format, args...)) }
	switch {
	case e.Error != "" && c.Error == "":
		fail("the hook failed: %s", e.Error)
	case e.Error == "" && c.Error != "":
		fail("the hook did not fail (expected an error containing %q)", c.Error)
	case !strings.Contains(e.Error, c.Error):
		fail("error %q does not contain %q", e.Error, c.Error)
	}
	if e.Decision != c.Decision {
		fail("decision %s, expected %s", e.Decision, c.Decision)
	}
	if c.Reason != "" && !strings.Contains(e.Reason, c.Reason) {
		fail("reason %q does not contain %q", e.Reason, c.Reason)
	}
	if a := c.Adjusted; a != nil && e.Decision == hooks.DecisionAdjust {
		j := res.Job
		if a.Argv != nil && !slices.Equal(j.Argv, a.Argv) {
			fail("argv %q, expected %q", j.Argv, a.Argv)
		}
		if a.Env != nil && !maps.Equal(j.Env, a.Env) {
			fail("env %v, expected %v", j.Env, a.Env)
		}
		if a.Cwd != nil && j.Cwd != *a.Cwd {
			fail("cwd %q, expected %q", j.Cwd, *a.Cwd)
		}
		if a.Mode != nil && j.Mode != *a.Mode {
			fail("mode %s, expected %s", j.Mode, *a.Mode)
		}
		if a.Network != nil && j.Network != *a.Network {
			fail("network %t, expected %t", j.Network, *a.Network)
		}
		if a.Writable != nil && !slices.Equal(j.Writable, a.Writable) {
			fail("writable %q, expected %q", j.Writable, a.Writable)
		}
		if a.TimeoutS != nil && j.TimeoutS != *a.TimeoutS {
			fail("timeout_s %v, expected %v", j.TimeoutS, *a.TimeoutS)
		}
	}
	m.Passed = len(m.Problems) == 0
	return m
}

package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
)

// Job is the job as hooks see it: the "job" object of a request, and what an
// adjustment changes. The runner fills it from the queue's job; hooks never
// import the queue. JSON field names are the wire names.
type Job struct {
	// ID is the queue's job id. Not adjustable.
	ID string `json:"id"`
	// Name is the job's name. Not adjustable.
	Name string `json:"name"`
	// Argv is the command, argv[0] first: a bare program name (looked up in
	// PATH by the runner) or an absolute path. Adjustable; never empty.
	Argv []string `json:"argv"`
	// Env is the job's extra environment. Adjustable (replaced as a whole).
	// nil is sent as {}.
	Env map[string]string `json:"env"`
	// Cwd is the absolute working directory. Adjustable.
	Cwd string `json:"cwd"`
	// Workspace is the absolute workspace root. Not adjustable.
	Workspace string `json:"workspace"`
	// Mode is the sandbox mode: "read_only", "workspace_write" or
	// "danger_full_access". Adjustable; widening needs [Config.MayWiden].
	Mode string `json:"mode"`
	// Network is true when the job shares the host network. Adjustable;
	// false to true needs [Config.MayWiden].
	Network bool `json:"network"`
	// UnixSockets is true when the job may create Unix sockets. Adjustable;
	// false to true needs [Config.MayWiden].
	UnixSockets bool `json:"unix_sockets"`
	// Writable lists extra absolute writable roots. Adjustable (replaced as
	// a whole); a root not equal to or under an existing one needs
	// [Config.MayWiden]. nil is sent as [].
	Writable []string `json:"writable"`
	// Protect lists extra paths kept read-only inside the writable roots,
	// on top of the policy's protect list (same form: a relative entry is
	// below every writable root, an absolute one itself). Adjustable
	// (replaced as a whole); dropping an entry needs [Config.MayWiden].
	// The policy's own entries are not here and cannot be dropped. nil is
	// sent as [].
	Protect []string `json:"protect"`
	// Hide lists extra absolute paths hidden from the job, on top of the
	// policy's hide list (a directory behind an empty tmpfs, a file made
	// unreadable; a path that does not exist is skipped). Adjustable
	// (replaced as a whole); dropping an entry needs [Config.MayWiden].
	// nil is sent as [].
	Hide []string `json:"hide"`
	// TimeoutS is the job's timeout in seconds; 0 means none. Adjustable.
	TimeoutS float64 `json:"timeout_s"`
	// Attempt is the attempt number, from 1. Not adjustable.
	Attempt int `json:"attempt"`
	// Labels are the job's labels. Not adjustable. nil is sent as {}.
	Labels map[string]string `json:"labels"`
}

// Clone returns a deep copy of j (slices and maps copied; nil stays nil).
func (j Job) Clone() Job {
	j.Argv = slices.Clone(j.Argv)
	j.Env = maps.Clone(j.Env)
	j.Writable = slices.Clone(j.Writable)
	j.Protect = slices.Clone(j.Protect)
	j.Hide = slices.Clone(j.Hide)
	j.Labels = maps.Clone(j.Labels)
	return j
}

// Wire returns j with nil collections replaced by empty ones, as a
// request carries it: [] and {}, never null (the hook contract,
// examples/hooks/README.md). For printing a job as hooks see it.
func (j Job) Wire() Job {
	if j.Argv == nil {
		j.Argv = []string{}
	}
	if j.Env == nil {
		j.Env = map[string]string{}
	}
	if j.Writable == nil {
		j.Writable = []string{}
	}
	if j.Protect == nil {
		j.Protect = []string{}
	}
	if j.Hide == nil {
		j.Hide = []string{}
	}
	if j.Labels == nil {
		j.Labels = map[string]string{}
	}
	return j
}

// SandboxInfo is the "sandbox" object of a request: how the job would be
// confined as it stands when the hook is called.
type SandboxInfo struct {
	// Grade is the bwrap grade ("full", "partial", "unusable"), or "" when
	// unknown.
	Grade string `json:"grade"`
	// Executable is the absolute bwrap path, or "" when unknown or unused.
	Executable string `json:"executable"`
	// Argv is the confined argv as it would run now (the job's argv itself
	// for danger_full_access). nil is sent as [].
	Argv []string `json:"argv"`
	// Network is the network decision: true when the job would share the
	// host network (it asked and the policy allows it).
	Network bool `json:"network"`
	// Hidden are the canonical paths hidden from the job (the policy's,
	// paddock's own directories and [Job.Hide]) that exist now. nil is
	// sent as [].
	Hidden []string `json:"hidden"`
	// Protected are the canonical paths kept read-only inside the job's
	// writable roots (the policy's protect list and [Job.Protect],
	// resolved as the host reaches them); one that does not exist yet is
	// listed when it is covered. Empty unless the mode is
	// workspace_write. nil is sent as [].
	Protected []string `json:"protected"`
}

// wire returns sb with nil lists replaced by empty ones, so requests
// always carry [] rather than null.
func (sb SandboxInfo) wire() SandboxInfo {
	if sb.Argv == nil {
		sb.Argv = []string{}
	}
	if sb.Hidden == nil {
		sb.Hidden = []string{}
	}
	if sb.Protected == nil {
		sb.Protected = []string{}
	}
	return sb
}

// Request is one request on the wire (version [WireVersion]). The chain
// builds it; it is exported for tools such as `paddock hook test` and for
// tests of hooks.
type Request struct {
	// Version is [WireVersion].
	Version int `json:"version"`
	// Hook names the hook being called and carries its settings.
	Hook RequestHook `json:"hook"`
	// Job is the job as the previous hooks left it.
	Job Job `json:"job"`
	// Sandbox is the confinement of Job as it stands.
	Sandbox SandboxInfo `json:"sandbox"`
}

// RequestHook is the "hook" object of a request.
type RequestHook struct {
	// Name is [Config.Name].
	Name string `json:"name"`
	// Settings is [Config.Settings]; {} when none.
	Settings map[string]any `json:"settings"`
}

// wireRequest is Request with the settings pre-encoded once per hook.
type wireRequest struct {
	Version int             `json:"version"`
	Hook    wireRequestHook `json:"hook"`
	Job     Job             `json:"job"`
	Sandbox SandboxInfo     `json:"sandbox"`
}

type wireRequestHook struct {
	Name     string          `json:"name"`
	Settings json.RawMessage `json:"settings"`
}

// Decisions a hook may return ([Decision.Decision], [TrailEntry.Decision]).
const (
	// DecisionAllow runs the job as it stands.
	DecisionAllow = "allow"
	// DecisionAdjust replaces some job fields, then goes on.
	DecisionAdjust = "adjust"
	// DecisionDeny refuses the job and ends the chain.
	DecisionDeny = "deny"
)

// Decision is one decision on the wire, as parsed by [ParseDecision].
type Decision struct {
	// Decision is [DecisionAllow], [DecisionAdjust] or [DecisionDeny].
	Decision string `json:"decision"`
	// Reason says why; required (non-blank) for deny and adjust.
	Reason string `json:"reason,omitempty"`
	// Job is the adjustment; non-nil exactly when Decision is adjust.
	Job *Adjustment `json:"job,omitempty"`
}

// Adjustment holds the job fields an adjust replaces. A nil field (or nil
// pointer) was absent on the wire and leaves the job's value alone; a
// present empty list or object is non-nil and empty. A JSON null is invalid.
type Adjustment struct {
	// Argv replaces [Job.Argv]; must not be empty.
	Argv []string `json:"argv,omitempty"`
	// Env replaces [Job.Env] as a whole (not merged).
	Env map[string]string `json:"env,omitempty"`
	// Cwd replaces [Job.Cwd]; must be absolute.
	Cwd *string `json:"cwd,omitempty"`
	// Mode replaces [Job.Mode]; widening needs [Config.MayWiden].
	Mode *string `json:"mode,omitempty"`
	// Network replaces [Job.Network]; false to true needs [Config.MayWiden].
	Network *bool `json:"network,omitempty"`
	// UnixSockets replaces [Job.UnixSockets]; false to true needs
	// [Config.MayWiden].
	UnixSockets *bool `json:"unix_sockets,omitempty"`
	// Writable replaces [Job.Writable] as a whole; new roots need
	// [Config.MayWiden].
	Writable []string `json:"writable,omitempty"`
	// Protect replaces [Job.Protect] as a whole; dropping an entry needs
	// [Config.MayWiden].
	Protect []string `json:"protect,omitempty"`
	// Hide replaces [Job.Hide] as a whole (absolute paths); dropping an
	// entry needs [Config.MayWiden].
	Hide []string `json:"hide,omitempty"`
	// TimeoutS replaces [Job.TimeoutS], in seconds; 0 means none.
	TimeoutS *float64 `json:"timeout_s,omitempty"`
}

// adjustableFields are the wire names an adjustment may carry, in order.
var adjustableFields = []string{"argv", "env", "cwd", "mode", "network", "unix_sockets", "writable", "protect", "hide", "timeout_s"}

// AdjustableFields returns the wire names of the job fields an adjust may
// carry, in wire order (argv, env, cwd, mode, network, unix_sockets,
// writable, protect, hide, timeout_s). The slice is a copy.
func AdjustableFields() []string { return slices.Clone(adjustableFields) }

// ParseDecision parses data as exactly one decision object (surrounding
// whitespace allowed). It is strict: unknown fields (at the top level and in
// "job"), null values, trailing data, an unknown decision, a blank reason on
// deny or adjust, a "job" on anything but adjust, or an adjust without
// "job" are all errors wrapping [ErrBadDecision]. Field values are checked
// for type only; [ApplyAdjustment] checks them against the job.
func ParseDecision(data []byte) (Decision, error) {
	bad := func(format string, args ...any) (Decision, error) {
		return Decision{}, fmt.Errorf("%w: %s", ErrBadDecision, fmt.Sprintf(format, args...))
	}
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&top); err != nil {
		if len(bytes.TrimSpace(data)) == 0 {
			return bad("empty output")
		}
		return bad("not a JSON object: %v", err)
	}
	if top == nil {
		return bad("not a JSON object: null")
	}
	if len(bytes.TrimSpace(data[dec.InputOffset():])) != 0 {
		return bad("trailing data after the decision object")
	}
	var d Decision
	for k, v := range top {
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return bad("field %q is null", k)
		}
		var err error
		switch k {
		case "decision":
			err = json.Unmarshal(v, &d.Decision)
		case "reason":
			err = json.Unmarshal(v, &d.Reason)
		case "job":
			d.Job, err = parseAdjustment(v)
		default:
			return bad("unknown field %q", k)
		}
		if err != nil {
			return bad("field %q: %v", k, err)
		}
	}
	switch d.Decision {
	case DecisionAllow:
	case DecisionDeny, DecisionAdjust:
		if strings.TrimSpace(d.Reason) == "" {
			return bad("%s without a reason", d.Decision)
		}
	case "":
		return bad(`missing "decision"`)
	default:
		return bad("unknown decision %q (want allow, adjust or deny)", d.Decision)
	}
	if (d.Job != nil) != (d.Decision == DecisionAdjust) {
		if d.Job == nil {
			return bad(`adjust without "job"`)
		}
		return bad(`"job" is only valid with adjust, not %s`, d.Decision)
	}
	return d, nil
}

func parseAdjustment(data []byte) (*Adjustment, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	a := &Adjustment{}
	for k, v := range m {
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return nil, fmt.Errorf("field %q is null", k)
		}
		var err error
		switch k {
		case "argv":
			a.Argv = []string{}
			err = json.Unmarshal(v, &a.Argv)
		case "env":
			a.Env = map[string]string{}
			err = json.Unmarshal(v, &a.Env)
		case "cwd":
			err = json.Unmarshal(v, &a.Cwd)
		case "mode":
			err = json.Unmarshal(v, &a.Mode)
		case "network":
			err = json.Unmarshal(v, &a.Network)
		case "unix_sockets":
			err = json.Unmarshal(v, &a.UnixSockets)
		case "writable":
			a.Writable = []string{}
			err = json.Unmarshal(v, &a.Writable)
		case "protect":
			a.Protect = []string{}
			err = json.Unmarshal(v, &a.Protect)
		case "hide":
			a.Hide = []string{}
			err = json.Unmarshal(v, &a.Hide)
		case "timeout_s":
			err = json.Unmarshal(v, &a.TimeoutS)
		default:
			if slices.Contains([]string{"id", "name", "workspace", "attempt", "labels"}, k) {
				return nil, fmt.Errorf("field %q is not adjustable", k)
			}
			return nil, fmt.Errorf("unknown field %q", k)
		}
		if err != nil {
			return nil, fmt.Errorf("field %q: %w", k, err)
		}
	}
	return a, nil
}

// Modes returns the sandbox modes a job may have and a hook may set,
// narrowest first. The sandbox package owns them; hooks imports nothing
// of paddock's, so it spells them here (a test checks that they agree).
func Modes() []string { return []string{"read_only", "workspace_write", "danger_full_access"} }

// modeRank orders sandbox modes from narrowest to widest.
var modeRank = func() map[string]int {
	m := map[string]int{}
	for i, mode := range Modes() {
		m[mode] = i
	}
	return m
}()

// ApplyAdjustment returns job with a's present fields replacing its own, and
// the wire names of the fields a carried, in wire order. job is not modified.
//
// # Errors
//
// Wrapping [ErrBadDecision]: argv empty; argv[0] a relative path (it
// contains "/" but does not start with it); a NUL byte in argv, env, cwd or
// writable; an env name that is empty or contains "="; cwd or a writable
// root that is not absolute; an unknown mode; a negative, NaN or infinite
// timeout_s.
//
// Wrapping [ErrWiden], unless mayWiden: a mode wider than job's (read_only <
// workspace_write < danger_full_access; an unknown or empty current mode
// counts as read_only); network or unix_sockets from false to true; a
// writable root that is neither equal to nor under one of job's writable
// roots.
func ApplyAdjustment(job Job, a *Adjustment, mayWiden bool) (Job, []string, error) {
	bad := func(format string, args ...any) (Job, []string, error) {
		return Job{}, nil, fmt.Errorf("%w: %s", ErrBadDecision, fmt.Sprintf(format, args...))
	}
	widen := func(format string, args ...any) (Job, []string, error) {
		return Job{}, nil, fmt.Errorf("%w: %s", ErrWiden, fmt.Sprintf(format, args...))
	}
	out := job.Clone()
	var changed []string
	if a == nil {
		return out, nil, nil
	}
	if a.Argv != nil {
		if len(a.Argv) == 0 {
			return bad("adjusted argv is empty")
		}
		for i, s := range a.Argv {
			if strings.ContainsRune(s, 0) {
				return bad("adjusted argv[%d] contains a NUL byte", i)
			}
		}
		if p := a.Argv[0]; p == "" || (strings.Contains(p, "/") && !filepath.IsAbs(p)) {
			return bad("adjusted argv[0] %q is a relative path or empty", p)
		}
		out.Argv = slices.Clone(a.Argv)
		changed = append(changed, "argv")
	}
	if a.Env != nil {
		for k, v := range a.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				return bad("adjusted env entry %q is invalid (empty name, '=' in name, or NUL byte)", k)
			}
		}
		out.Env = maps.Clone(a.Env)
		changed = append(changed, "env")
	}
	if a.Cwd != nil {
		if !filepath.IsAbs(*a.Cwd) || strings.ContainsRune(*a.Cwd, 0) {
			return bad("adjusted cwd %q is not an absolute path without NUL bytes", *a.Cwd)
		}
		out.Cwd = *a.Cwd
		changed = append(changed, "cwd")
	}
	if a.Mode != nil {
		r, ok := modeRank[*a.Mode]
		if !ok {
			return bad("adjusted mode %q is not one of %s", *a.Mode, strings.Join(Modes(), ", "))
		}
		if !mayWiden && r > modeRank[job.Mode] {
			cur := job.Mode
			if _, ok := modeRank[cur]; !ok {
				cur = fmt.Sprintf("%q (treated as read_only)", cur)
			}
			return widen("mode %s -> %s", cur, *a.Mode)
		}
		out.Mode = *a.Mode
		changed = append(changed, "mode")
	}
	if a.Network != nil {
		if !mayWiden && *a.Network && !job.Network {
			return widen("network false -> true")
		}
		out.Network = *a.Network
		changed = append(changed, "network")
	}
	if a.UnixSockets != nil {
		if !mayWiden && *a.UnixSockets && !job.UnixSockets {
			return widen("unix_sockets false -> true")
		}
		out.UnixSockets = *a.UnixSockets
		changed = append(changed, "unix_sockets")
	}
	if a.Writable != nil {
		for _, w := range a.Writable {
			if !filepath.IsAbs(w) || strings.ContainsRune(w, 0) {
				return bad("adjusted writable root %q is not an absolute path without NUL bytes", w)
			}
			if !mayWiden && !underAny(w, job.Writable) {
				return widen("writable root %q is new", w)
			}
		}
		out.Writable = slices.Clone(a.Writable)
		changed = append(changed, "writable")
	}
	if a.Protect != nil {
		for _, e := range a.Protect {
			if e == "" || strings.ContainsRune(e, 0) {
				return bad("adjusted protect entry %q is empty or contains a NUL byte", e)
			}
		}
		for _, e := range job.Protect {
			if !mayWiden && !slices.Contains(a.Protect, e) {
				return widen("protect entry %q is dropped", e)
			}
		}
		out.Protect = slices.Clone(a.Protect)
		changed = append(changed, "protect")
	}
	if a.Hide != nil {
		for _, h := range a.Hide {
			if !filepath.IsAbs(h) || strings.ContainsRune(h, 0) {
				return bad("adjusted hide entry %q is not an absolute path without NUL bytes", h)
			}
		}
		for _, h := range job.Hide {
			if !mayWiden && !slices.Contains(a.Hide, h) {
				return widen("hide entry %q is dropped", h)
			}
		}
		out.Hide = slices.Clone(a.Hide)
		changed = append(changed, "hide")
	}
	if a.TimeoutS != nil {
		t := *a.TimeoutS
		if t < 0 || math.IsNaN(t) || math.IsInf(t, 0) {
			return bad("adjusted timeout_s %v is not a finite number >= 0", t)
		}
		out.TimeoutS = t
		changed = append(changed, "timeout_s")
	}
	return out, changed, nil
}

// narrowedOnResolvedPaths checks, when resolve is not nil, that every
// writable root of adjusted lies within one of job's writable roots once
// both are resolved (see [ChainOptions].ResolvePath). The error wraps
// [ErrWiden].
func narrowedOnResolvedPaths(job, adjusted Job, resolve func(string) (string, error)) error {
	if resolve == nil || slices.Equal(job.Writable, adjusted.Writable) {
		return nil
	}
	var roots []string
	for _, r := range job.Writable {
		if rr, err := resolve(r); err == nil {
			roots = append(roots, rr)
		}
	}
	for _, w := range adjusted.Writable {
		rw, err := resolve(w)
		if err != nil {
			return fmt.Errorf("%w: writable root %q does not resolve: %v", ErrWiden, w, err)
		}
		if !underAny(rw, roots) {
			return fmt.Errorf("%w: writable root %q resolves to %q, outside the job's writable roots", ErrWiden, w, rw)
		}
	}
	return nil
}

// underAny reports whether p equals or lies under one of roots (lexically,
// after filepath.Clean).
func underAny(p string, roots []string) bool {
	p = filepath.Clean(p)
	for _, r := range roots {
		r = filepath.Clean(r)
		if p == r || strings.HasPrefix(p, r+"/") || r == "/" {
			return true
		}
	}
	return false
}

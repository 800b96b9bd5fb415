package jobspec

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"paddock/internal/filekind"
	"paddock/sandbox"
)

// Spec is one job as parsed from TOML, after [defaults] are applied and
// relative paths resolved. docs/job-files.md documents every
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
	// UnixSockets lets the job create Unix sockets (unix_sockets = true);
	// false (the default) refuses socket(AF_UNIX, ...) in its sandbox.
	UnixSockets bool `json:"unix_sockets,omitempty"`
	// Overlap, Missed and MissedGrace apply to schedules only; see
	// OverlapSkip, MissedRunOnce and MissedGraceDefault for the defaults.
	Overlap     string        `json:"overlap,omitempty"`      // skip | queue | allow; "" = skip
	Missed      string        `json:"missed,omitempty"`       // run_once | skip; "" = run_once
	MissedGrace time.Duration `json:"missed_grace,omitempty"` // 0 = MissedGraceDefault (1h)
	// Jitter delays each instance of a schedule by up to this much after
	// its tick (0 = none, at most MaxJitter); the delay is chosen once per
	// (schedule, tick) by queue.TickJitter, so every worker agrees.
	Jitter time.Duration `json:"jitter,omitempty"`
	// Group names the group the job belongs to ("" = none): a group's
	// limit, stored in the queue (queue.Store GroupLimitSet), caps how
	// many of its jobs run at once. A name as for Name.
	Group string `json:"group,omitempty"`
	// RunAt: the job is not claimed before this instant (zero = at once).
	// One-off jobs only.
	RunAt time.Time `json:"run_at,omitzero"`
	// Delay: the job is not claimed before its enqueue time plus Delay
	// (0 = at once; at most MaxDelay). With RunAt too, the later one
	// wins. One-off jobs only.
	Delay time.Duration `json:"delay,omitempty"`
	Line  int           `json:"line,omitempty"` // line where the job starts in its file (for messages); 0 = unknown
}

// Modes returns the values Spec.Mode accepts besides "": the sandbox's
// modes ([sandbox.Modes]), in order of increasing access.
func Modes() []string {
	var out []string
	for _, m := range sandbox.Modes() {
		out = append(out, string(m))
	}
	return out
}

// RunAtMin and RunAtMax bound run_at: a store keeps instants as
// nanoseconds since the Unix epoch in 64 bits (1678 to 2262), and a
// time outside them would wrap around.
var (
	RunAtMin = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	RunAtMax = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Limits on job files.
const (
	// MaxNameLen is the longest job name, in bytes.
	MaxNameLen = 128
	// MaxRetries is the largest retries value.
	MaxRetries = 1000
	// MaxPriority bounds priority: from -MaxPriority to MaxPriority.
	MaxPriority = 1_000_000
	// MaxDelay is the largest delay: ten years.
	MaxDelay = 10 * 366 * 24 * time.Hour
	// MaxJitter is the largest jitter of a schedule.
	MaxJitter = 24 * time.Hour
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

// ErrInvalid: a job file or spec failed validation; the error is a
// *ValidationError listing every problem. A store also wraps it in its
// refusal of an empty batch.
var ErrInvalid = errors.New("jobspec: invalid job")

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
		return "jobspec: invalid job: " + e.Errors[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "jobspec: invalid jobs (%d errors):", len(e.Errors))
	for i, fe := range e.Errors {
		if i == MaxErrorsShown {
			fmt.Fprintf(&b, "\n  ... and %d more problems", len(e.Errors)-i)
			break
		}
		b.WriteString("\n  " + fe.String())
	}
	return b.String()
}

// PlaceKeys moves each problem of err, when it is a *ValidationError,
// from the line where its job starts to the line of its key in source
// (the batch's file text; [KeyLines]), where the key can be placed: a
// delay out of range names the delay's line. Other errors, and an empty
// source, are left as they are. It returns err.
func PlaceKeys(err error, source []byte) error {
	var ve *ValidationError
	if len(source) == 0 || !errors.As(err, &ve) {
		return err
	}
	at := KeyLines(source)
	for i, fe := range ve.Errors {
		if fe.Key != "" && fe.Line > 0 {
			ve.Errors[i].Line = at(fe.Line, fe.Key)
		}
	}
	return err
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

// Validate checks a batch of specs built by Go code as a store does before
// it enqueues them (Parse's output passes), so that the store never holds a
// job the runner cannot interpret: names, command, mode, paths, durations,
// retries, dependencies (none on itself, no cycle), schedule rules, time
// zones, env names and the limits of limits.go. file names the batch in messages. It returns nil
// or a *ValidationError listing every problem.
func Validate(file string, specs []Spec) error {
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
		if s.Mode != "" && !slices.Contains(Modes(), s.Mode) {
			bad("mode", fmt.Sprintf("unknown mode %q: expected one of %s", s.Mode, strings.Join(Modes(), ", ")))
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
		if s.Group != "" {
			if msg := checkName(s.Group); msg != "" {
				bad("group", strings.Replace(msg, "name", "group name", 1))
			}
		}
		if s.Delay < 0 || s.Delay > MaxDelay {
			bad("delay", fmt.Sprintf("delay %s out of range: expected 0 to %s", s.Delay, MaxDelay))
		}
		if !s.RunAt.IsZero() && (s.RunAt.Before(RunAtMin) || s.RunAt.After(RunAtMax)) {
			bad("run_at", fmt.Sprintf("run_at %s out of range: expected %d to %d", s.RunAt.Format(time.RFC3339), RunAtMin.Year(), RunAtMax.Year()))
		}
		if s.Jitter < 0 || s.Jitter > MaxJitter {
			bad("jitter", fmt.Sprintf("jitter %s out of range: expected 0 to %s", s.Jitter, MaxJitter))
		}
		stray := ""
		switch {
		case s.Schedule != "":
		case s.Overlap != "":
			stray = "overlap"
		case s.Missed != "":
			stray = "missed"
		case s.MissedGrace != 0:
			stray = "missed_grace"
		case s.Jitter != 0:
			stray = "jitter"
		}
		for _, e := range append(scheduleProblems(s, stray), limitProblems(s)...) {
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

// MaxFileBytes is the largest job file [ParseFile] (and the inbox) reads,
// in bytes.
const MaxFileBytes = 64 << 20

// readFile reads a job file: a regular file or a pipe (a named pipe, or
// /dev/fd/N from a shell's process substitution), of at most
// MaxFileBytes. A device, a directory or a socket is refused unread:
// /dev/zero would never end.
func readFile(path string) ([]byte, error) {
	return filekind.ReadFile(path, nil, MaxFileBytes, "a job file")
}

// Groups returns the distinct groups specs name (Spec.Group, "" left
// out), in the order they first appear.
func Groups(specs []Spec) []string {
	var out []string
	seen := map[string]bool{}
	for _, sp := range specs {
		if sp.Group != "" && !seen[sp.Group] {
			seen[sp.Group] = true
			out = append(out, sp.Group)
		}
	}
	return out
}

package jobspec_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
)

func TestParseValid(t *testing.T) {
	t.Parallel()
	src := `
[defaults]
mode = "workspace_write"
env = { A = "1", B = "x" }
labels.team = "web"
retries = 2
backoff = "5s"
writable = ["cache"]
unix_sockets = true

[[job]]
name = "build"
command = "make all"
env.B = "2"
timeout = "1h30m"
priority = 5
network = false
workspace = "ws"
cwd = "/abs/dir"

[[job]]
name = "test"
command = ["go", "test", "./..."]
hooks = ["no-curl"]
overlap = "queue"
schedule = "@daily"
timezone = "Europe/Paris"
retries = 0
unix_sockets = false
`
	specs, err := jobspec.Parse("jobs.toml", []byte(src), "/srv/jobs")
	require.NoError(t, err)
	require.Len(t, specs, 2)
	no := false
	require.Equal(t, jobspec.Spec{
		Name: "build", Command: []string{"/bin/sh", "-c", "make all"}, Cwd: "/abs/dir", Workspace: "/srv/jobs/ws",
		Mode: "workspace_write", Network: &no, Writable: []string{"/srv/jobs/cache"},
		Env: map[string]string{"A": "1", "B": "2"}, Timeout: 90 * time.Minute, Retries: 2, Backoff: 5 * time.Second,
		Priority: 5, Labels: map[string]string{"team": "web"}, UnixSockets: true, Line: 11,
	}, specs[0])
	require.Equal(t, jobspec.Spec{
		Name: "test", Command: []string{"go", "test", "./..."}, Mode: "workspace_write", Writable: []string{"/srv/jobs/cache"},
		Env: map[string]string{"A": "1", "B": "x"}, Retries: 0, Backoff: 5 * time.Second, Labels: map[string]string{"team": "web"},
		Hooks: []string{"no-curl"}, Schedule: "@daily", Timezone: "Europe/Paris", Overlap: "queue", Line: 21,
	}, specs[1])
	// defaults are not shared between jobs
	specs[0].Env["A"] = "changed"
	specs[0].Writable[0] = "changed"
	require.Equal(t, "1", specs[1].Env["A"])
	require.Equal(t, "/srv/jobs/cache", specs[1].Writable[0])
}

func TestParseSingleJob(t *testing.T) {
	t.Parallel()
	specs, err := jobspec.Parse("", []byte("command = \"ls\"\ncwd = \"sub\"\n"), "/here")
	require.NoError(t, err)
	require.Equal(t, []jobspec.Spec{{Command: []string{"/bin/sh", "-c", "ls"}, Cwd: "/here/sub", Line: 1}}, specs)
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	job := func(extra string) string { return "[[job]]\nname = \"j\"\ncommand = \"true\"\n" + extra }
	tests := []struct {
		name string
		src  string
		line int
		key  string
		msg  string
	}{
		{"syntax", "command = \"x\nname = 1\n", 1, "command", "invalid TOML"},
		{"unknown key", job("timout = \"5s\"\n"), 4, "timout", `unknown key (did you mean "timeout"?)`},
		{"unknown key far", job("zzzzzz = 1\n"), 4, "zzzzzz", "unknown key"},
		{"synonym of retries", job("retry = 2\n"), 4, "retry", `unknown key (did you mean "retries"?)`},
		{"synonym of command", "argv = [\"true\"]\n", 1, "argv", `unknown key (did you mean "command"?)`},
		{"synonym in batch top level", "argv = 1\n" + job(""), 1, "argv", `unknown key (did you mean "command"?)`},
		{"unknown top-level in batch", "naem = \"x\"\n" + job(""), 1, "naem", "job fields go inside"},
		{"unknown top-level table", "[jbo]\nx=1\n", 1, "jbo", `did you mean "job"?`},
		{"unknown defaults key", "[defaults]\nretrys = 1\n" + job(""), 2, "retrys", `did you mean "retries"?`},
		{"command wrong type", "command = 5\n", 1, "command", "expected a string (run by /bin/sh -c) or an array of strings (argv), got integer"},
		{"command array of ints", "command = [1, 2]\n", 1, "command", "element 1 is integer"},
		{"command empty string", "command = \"  \"\n", 1, "command", "empty command"},
		{"command empty array", "command = []\n", 1, "command", "empty command"},
		{"command empty program", "command = [\"\", \"x\"]\n", 1, "command", "empty command"},
		{"command NUL string", "command = \"a\\u0000b\"\n", 1, "command", "NUL"},
		{"command NUL argv", "command = [\"a\", \"b\\u0000\"]\n", 1, "command", "NUL"},
		{"command missing", "name = \"x\"\n", 1, "command", "missing"},
		{"command missing in batch", "[[job]]\nname = \"x\"\n", 1, "command", "missing"},
		{"name wrong type", "name = 1\ncommand = \"x\"\n", 1, "name", "expected a string, got integer"},
		{"name empty", "name = \"\"\ncommand = \"x\"\n", 1, "name", "empty name"},
		{"name bad chars", "name = \"a b\"\ncommand = \"x\"\n", 1, "name", "expected only letters"},
		{"name like an id", "name = \"0123456789abcdef\"\ncommand = \"x\"\n", 1, "name", "looks like a job id"},
		{"name in defaults", "[defaults]\nname = \"x\"\n" + job(""), 2, "name", "cannot be a default"},
		{"duplicate names", job("") + job(""), 4, "name", "duplicate name: the job at line 1"},
		{"network wrong type", job("network = \"no\"\n"), 4, "network", "expected a boolean"},
		{"unix_sockets wrong type", job("unix_sockets = 1\n"), 4, "unix_sockets", "expected a boolean (true lets the job create Unix sockets"},
		{"timeout wrong type", job("timeout = 30\n"), 4, "timeout", `expected a duration string like "90s"`},
		{"timeout bad", job("timeout = \"5 minutes\"\n"), 4, "timeout", "invalid duration"},
		{"timeout negative", job("timeout = \"-5s\"\n"), 4, "timeout", "negative duration"},
		{"backoff negative", job("backoff = \"-1ms\"\n"), 4, "backoff", "negative duration"},
		{"retries negative", job("retries = -1\n"), 4, "retries", "out of range"},
		{"retries huge", job("retries = 100000\n"), 4, "retries", "out of range"},
		{"retries wrong type", job("retries = \"3\"\n"), 4, "retries", "expected an integer, got string"},
		{"priority float", job("priority = 1.5\n"), 4, "priority", "expected an integer, got float"},
		{"workspace root", job("workspace = \"/\"\n"), 4, "workspace", `workspace "/"`},
		{"workspace root dotdot", job("workspace = \"/tmp/..\"\n"), 4, "workspace", `workspace "/"`},
		{"workspace tilde", job("workspace = \"~/w\"\n"), 4, "workspace", "~ is not expanded"},
		{"cwd empty", job("cwd = \"\"\n"), 4, "cwd", "empty path"},
		{"cwd NUL", job("cwd = \"a\\u0000\"\n"), 4, "cwd", "NUL"},
		{"writable root", job("writable = [\"/\"]\n"), 4, "writable", "whole filesystem"},
		{"writable outside workspace_write", job("mode = \"read_only\"\nwritable = [\"/srv/out\"]\n"), 5, "writable", `need mode = "workspace_write"`},
		{"writable wrong type", job("writable = \"/tmp\"\n"), 4, "writable", "expected an array of strings, got string"},
		{"mode unknown", job("mode = \"read_olny\"\n"), 4, "mode", `unknown mode "read_olny": expected one of read_only, workspace_write, danger_full_access (did you mean "read_only"?)`},
		{"env wrong type", job("env = [\"A=1\"]\n"), 4, "env", "expected a table of strings, got array"},
		{"env value int", job("[job.env]\nA = 1\n"), 5, "env.A", "expected a string value, got integer"},
		{"env key with =", job("env = { \"A=B\" = \"1\" }\n"), 4, "env.A=B", "invalid key"},
		{"labels value bool", job("labels = { x = true }\n"), 4, "labels.x", "expected a string value, got boolean"},
		{"after wrong type", job("after = \"x\"\n"), 4, "after", "expected an array of strings, got string"},
		{"after empty name", job("after = [\"\"]\n"), 4, "after", "non-empty names"},
		{"after self", job("after = [\"j\"]\n"), 4, "after", "cannot wait for itself"},
		{"after cycle", "[[job]]\nname = \"a\"\ncommand = \"x\"\nafter = [\"b\"]\n[[job]]\nname = \"b\"\ncommand = \"x\"\nafter = [\"a\"]\n", 4, "after", "dependency cycle: a -> b -> a"},
		{"hooks wrong element", job("hooks = [\"a\", 2]\n"), 4, "hooks", "element 2 is integer"},
		{"schedule empty", job("schedule = \"\"\n"), 4, "schedule", "empty schedule"},
		{"timezone unknown", job("timezone = \"Mars/Olympus\"\n"), 4, "timezone", `unknown time zone "Mars/Olympus"`},
		{"timezone Local", job("timezone = \"Local\"\n"), 4, "timezone", `"Local" is the zone of whichever process reads the job`},
		{"timezone wrong type", job("timezone = 2\n"), 4, "timezone", "expected a string"},
		{"date value", job("timeout = 1979-05-27\n"), 4, "timeout", "got date/time"},
		{"empty file", "", 1, "", "no job"},
		{"only defaults", "[defaults]\nretries = 1\n", 1, "", "no job"},
		{"job not tables", "job = 1\n", 1, "job", "expected an array of tables"},
		{"defaults not table", "defaults = 1\ncommand = \"x\"\n", 1, "defaults", "expected a table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			specs, err := jobspec.Parse("f.toml", []byte(tt.src), "/d")
			require.Nil(t, specs)
			require.ErrorIs(t, err, jobspec.ErrInvalid)
			var verr *jobspec.ValidationError
			require.True(t, errors.As(err, &verr))
			require.NotEmpty(t, verr.Errors)
			fe := verr.Errors[0]
			require.Equal(t, "f.toml", fe.File)
			require.Equal(t, tt.line, fe.Line, "line: %v", err)
			require.Equal(t, tt.key, fe.Key, "%v", err)
			require.Contains(t, fe.Message, tt.msg)
			require.Contains(t, err.Error(), "f.toml:")
		})
	}
}

// A dependency cycle is placed at its job's after key when a [[job]]
// table before it was refused (and so has no spec).
func TestParseCycleBehindARefusedJob(t *testing.T) {
	t.Parallel()
	src := "[[job]]\nname = \"bad\"\n[[job]]\nname = \"mid\"\ncommand = \"x\"\n[[job]]\nname = \"a\"\ncommand = \"x\"\nafter = [\"b\"]\n[[job]]\nname = \"b\"\ncommand = \"x\"\nafter = [\"a\"]\n"
	_, err := jobspec.Parse("f.toml", []byte(src), "/d")
	var verr *jobspec.ValidationError
	require.True(t, errors.As(err, &verr), "%v", err)
	require.Len(t, verr.Errors, 2, "%v", err)
	require.Equal(t, 1, verr.Errors[0].Line)
	cyc := verr.Errors[1]
	require.Equal(t, "after", cyc.Key)
	require.Contains(t, cyc.Message, "dependency cycle: a -> b -> a")
	require.Equal(t, 9, cyc.Line, "a's after key")
}

func TestParseListsEveryError(t *testing.T) {
	t.Parallel()
	src := `[[job]]
name = "a"
command = ""
[[job]]
name = "b"
command = "x"
timeout = "-1s"
mode = "root"
[[job]]
name = "c"
command = "ok"
`
	_, err := jobspec.Parse("batch.toml", []byte(src), "")
	var verr *jobspec.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Len(t, verr.Errors, 3)
	require.Equal(t, []int{3, 7, 8}, []int{verr.Errors[0].Line, verr.Errors[1].Line, verr.Errors[2].Line})
	require.Equal(t, `job "b"`, verr.Errors[1].Job)
	require.True(t, strings.HasPrefix(err.Error(), "jobspec: invalid jobs (3 errors):\n  batch.toml:3: job \"a\": command: empty command"), err.Error())
}

// TestValidationErrorCapped: a file with hundreds of problems gets all of
// them in Errors, but a message listing the first MaxErrorsShown and
// counting the rest.
func TestValidationErrorCapped(t *testing.T) {
	var src strings.Builder
	const n = 3 * jobspec.MaxErrorsShown
	for i := range n {
		fmt.Fprintf(&src, "[[job]]\nname = \"j%d\"\ncommand = \"true\"\nretries = -1\n", i)
	}
	_, err := jobspec.Parse("many.toml", []byte(src.String()), "")
	var verr *jobspec.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Len(t, verr.Errors, n)
	msg := err.Error()
	lines := strings.Split(msg, "\n")
	require.Len(t, lines, 1+jobspec.MaxErrorsShown+1, msg)
	require.Equal(t, fmt.Sprintf("  ... and %d more problems", n-jobspec.MaxErrorsShown), lines[len(lines)-1])
	require.Contains(t, lines[jobspec.MaxErrorsShown], fmt.Sprintf(`job "j%d"`, jobspec.MaxErrorsShown-1))
}

func TestParseFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := dir + "/job.toml"
	require.NoError(t, os.WriteFile(path, []byte("command = [\"ls\"]\nworkspace = \"w\"\n"), 0o644))
	specs, data, err := jobspec.ParseFile(path)
	require.NoError(t, err)
	require.Equal(t, dir+"/w", specs[0].Workspace)
	require.Contains(t, string(data), "workspace")
	_, _, err = jobspec.ParseFile(dir + "/missing.toml")
	require.Error(t, err)
}

// TestParseByteOrderMark: a UTF-8 byte-order mark, as some editors write,
// is dropped; lines stay where they were.
func TestParseByteOrderMark(t *testing.T) {
	t.Parallel()
	specs, err := jobspec.Parse("bom.toml", []byte("\xef\xbb\xbfname = \"bom\"\ncommand = \"true\"\n"), "/srv")
	require.NoError(t, err)
	require.Equal(t, "bom", specs[0].Name)
	_, err = jobspec.Parse("bom.toml", []byte("\xef\xbb\xbfname = \"bom\"\ncomand = \"true\"\n"), "/srv")
	require.ErrorContains(t, err, "bom.toml:2:")
	require.Equal(t, 1, jobspec.KeyLines([]byte("\xef\xbb\xbfafter = [\"x\"]\ncommand = \"true\"\n"))(1, "after"))
}

// TestParseFileNotAFile: a device (which /dev/zero would make read
// forever) or a directory is refused unread, saying what it is; a pipe
// is read.
func TestParseFileNotAFile(t *testing.T) {
	for path, says := range map[string]string{"/dev/zero": "is a character device", t.TempDir(): "is a directory"} {
		_, _, err := jobspec.ParseFile(path)
		require.ErrorContains(t, err, says, path)
	}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	go func() { w.WriteString("name = \"p\"\ncommand = \"true\"\n"); w.Close() }()
	specs, _, err := jobspec.ParseFile(fmt.Sprintf("/proc/self/fd/%d", r.Fd()))
	require.NoError(t, err)
	require.Equal(t, "p", specs[0].Name)
	r.Close()
}

// TestValidateNewKeys: group names follow the name rules; run_at, delay
// and jitter are bounded; run_at and delay are for one-off jobs, jitter
// for schedules.
func TestValidateNewKeys(t *testing.T) {
	t.Parallel()
	base := func(mod func(*jobspec.Spec)) []jobspec.Spec {
		s := jobspec.Spec{Name: "j", Command: []string{"true"}}
		mod(&s)
		return []jobspec.Spec{s}
	}
	for _, tc := range []struct {
		name, key string
		mod       func(*jobspec.Spec)
	}{
		{"group with a space", "group", func(s *jobspec.Spec) { s.Group = "repo x" }},
		{"group shaped like an id", "group", func(s *jobspec.Spec) { s.Group = "0123456789abcdef" }},
		{"negative delay", "delay", func(s *jobspec.Spec) { s.Delay = -time.Second }},
		{"delay over ten years", "delay", func(s *jobspec.Spec) { s.Delay = jobspec.MaxDelay + time.Second }},
		{"run_at beyond 2200 (would wrap in nanoseconds)", "run_at", func(s *jobspec.Spec) { s.RunAt = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"run_at before 1970", "run_at", func(s *jobspec.Spec) { s.RunAt = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"jitter on a one-off job", "jitter", func(s *jobspec.Spec) { s.Jitter = time.Minute }},
		{"jitter over a day", "jitter", func(s *jobspec.Spec) { s.Schedule, s.Jitter = "@hourly", 25*time.Hour }},
		{"run_at on a schedule", "run_at", func(s *jobspec.Spec) { s.Schedule, s.RunAt = "@hourly", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC) }},
		{"delay on a schedule", "delay", func(s *jobspec.Spec) { s.Schedule, s.Delay = "@hourly", time.Minute }},
	} {
		err := jobspec.Validate("f.toml", base(tc.mod))
		var ve *jobspec.ValidationError
		require.ErrorAs(t, err, &ve, tc.name)
		require.Equal(t, tc.key, ve.Errors[0].Key, "%s: %v", tc.name, err)
	}
	require.NoError(t, jobspec.Validate("f.toml", base(func(s *jobspec.Spec) {
		s.Group, s.Delay, s.RunAt = "repo-x", time.Hour, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	})))
}

// TestParseRunAt: run_at takes a TOML date-time with an offset or the same
// as an RFC 3339 string, and refuses one without an offset, naming the key
// and line.
func TestParseRunAt(t *testing.T) {
	t.Parallel()
	want := time.Date(2026, 12, 24, 17, 0, 0, 0, time.UTC)
	for _, v := range []string{`2026-12-24T17:00:00Z`, `2026-12-24T18:00:00+01:00`, `"2026-12-24T18:00:00+01:00"`} {
		specs, err := jobspec.Parse("f.toml", []byte("command = \"true\"\nrun_at = "+v+"\ngroup = \"g\"\ndelay = \"10m\"\n"), "/")
		require.NoError(t, err, v)
		require.True(t, specs[0].RunAt.Equal(want), v)
		require.Equal(t, "g", specs[0].Group)
		require.Equal(t, 10*time.Minute, specs[0].Delay)
	}
	for v, msg := range map[string]string{
		`2026-12-24T18:00:00`: "without an offset",
		`2026-12-24`:          "without an offset",
		`"tomorrow"`:          "invalid date-time",
		`12`:                  "got integer",
	} {
		_, err := jobspec.Parse("f.toml", []byte("command = \"true\"\n\nrun_at = "+v+"\n"), "/")
		require.ErrorContains(t, err, "f.toml:3", v)
		require.ErrorContains(t, err, "run_at", v)
		require.ErrorContains(t, err, msg, v)
	}
}

// TestGroups: each group once, in the order first named; no group is
// none.
func TestGroups(t *testing.T) {
	specs := []jobspec.Spec{{Group: "b"}, {}, {Group: "a"}, {Group: "b"}, {Group: "c"}, {Group: "a"}}
	if got := jobspec.Groups(specs); !slices.Equal(got, []string{"b", "a", "c"}) {
		t.Fatalf("Groups = %q", got)
	}
	if got := jobspec.Groups([]jobspec.Spec{{}, {}}); got != nil {
		t.Fatalf("Groups of no group = %q", got)
	}
}

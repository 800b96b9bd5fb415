package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
)

// requireNothingQueued fails t when b's queue holds any job.
func requireNothingQueued(t *testing.T, b *e2etest.Bundle) {
	t.Helper()
	require.Empty(t, b.List(), "nothing may be enqueued")
}

// Bad input found by hand through the real binary: each is refused with
// the documented exit code and a message that says where, and nothing is
// enqueued.
func TestE2EBadInputExitCodes(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	nothingQueued := func() { t.Helper(); requireNothingQueued(t, b) }

	after := b.WriteJob("after.toml", "name = \"a\"\ncommand = \"true\"\nafter = [\"does-not-exist\"]\n")
	_, errOut, code := b.Run("submit", after)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "nothing was enqueued")
	require.Contains(t, errOut, "does-not-exist")
	require.Contains(t, errOut, "after.toml:3:", "the line of the after key")
	nothingQueued()

	hooks := b.WriteJob("hooks.toml", "name = \"h\"\ncommand = \"true\"\nhooks = [\"nonexistent-hook\"]\n")
	_, errOut, code = b.Run("submit", hooks)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `hooks.toml:3: job "h": hooks: unknown hook "nonexistent-hook"`, "the line of the hooks key")
	_, errOut, code = b.Run("run", hooks)
	require.Equal(t, 2, code, errOut)
	nothingQueued()

	wr := b.WriteJob("wr.toml", "name = \"wr\"\nmode = \"read_only\"\nwritable = [\"/srv\"]\ncommand = \"true\"\n")
	_, errOut, code = b.Run("submit", wr)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `wr.toml:3: job "wr": writable: extra writable paths need mode`)
	nothingQueued()

	file := filepath.Join(b.Dir, "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, errOut, code = b.Run("--state-dir", file, "ls")
	require.Equal(t, 1, code, errOut, "a state directory that cannot be used is not a usage error")
	require.Contains(t, errOut, "paddock: state directory "+file+": mkdir "+file+": not a directory")

	// A job whose cwd the sandbox cannot show: allowed by the (empty)
	// chain, but it could never run, so check says so and exits 1.
	cwd := b.WriteJob("cwd.toml", "name = \"c\"\nmode = \"workspace_write\"\ncwd = \"/tmp\"\ncommand = \"true\"\n")
	out, _, code := b.Run("check", cwd)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "cannot_run")
}

// The files of one submission are enqueued all or none: a good file before
// a bad one is not left enqueued, whether the bad one reuses its job name
// or names nothing in after (the first once stayed enqueued).
func TestE2ESubmitFilesAllOrNone(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	nothingQueued := func() { t.Helper(); requireNothingQueued(t, b) }
	after := b.WriteJob("after.toml", "name = \"a\"\ncommand = \"true\"\nafter = [\"does-not-exist\"]\n")
	good := b.WriteJob("good.toml", "name = \"same\"\ncommand = \"true\"\n")
	again := b.WriteJob("again.toml", "# the same name\n\nname = \"same\"\ncommand = \"true\"\n")
	_, errOut, code := b.Run("submit", good, again)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "nothing was enqueued")
	require.Contains(t, errOut, `again.toml:3: job "same": name: duplicate name "same": a job or schedule of `+good+`:1 has it too`)
	nothingQueued()
	_, errOut, code = b.Run("submit", good, after)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "after.toml:3:")
	nothingQueued()
	// A later file's after may name a job of an earlier one.
	dep := b.WriteJob("dep.toml", "name = \"dep\"\ncommand = \"true\"\nafter = [\"same\"]\n")
	ids := b.Submit(good, dep)
	require.Len(t, ids, 2)
	_, errOut, code = b.Run("cancel", ids[0])
	require.Equal(t, 0, code, errOut)
	d := b.Show(ids[1])
	require.Equal(t, "failed", d.State, "its dependency was canceled")
	require.Contains(t, d.Reason, ids[0])
}

// A job name held by a queued job is refused once, saying the name, the
// file and line and when the name is free again; once that job is final
// the same file is taken.
func TestE2ESubmitNameInUse(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	job := b.WriteJob("job.toml", "# nightly\n\nname = \"same\"\ncommand = \"true\"\n")
	id := b.Submit(job)[0]
	_, errOut, code := b.Run("submit", job)
	require.Equal(t, 2, code, errOut)
	require.Equal(t, "paddock: nothing was enqueued:\njobspec: invalid job: "+job+`:3: job "same": name: "same" is held by queued job `+id+
		"; the name is free again once that job is final (wait for it, or cancel it)\n", errOut)
	_, errOut, code = b.Run("cancel", id)
	require.Equal(t, 0, code, errOut)
	require.Len(t, b.Submit(job), 1)
}

// paddock logs of a job that never ran says so (exit 1) instead of
// printing nothing.
func TestE2ELogsOfAJobThatNeverRan(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	cwd := b.WriteJob("cwd.toml", "name = \"c\"\nmode = \"workspace_write\"\ncwd = \"/tmp\"\ncommand = \"true\"\n")
	_, _, code := b.Run("run", cwd)
	require.Equal(t, 125, code, "the sandbox cannot be built: runner failure")
	_, errOut, code := b.Run("logs", "c")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "never ran")
}

// A worker whose store cannot open says so at once: before it compiled
// its hooks (seconds without the compilation cache), which it once did
// first, and without leaving a compiled module behind.
func TestE2EWorkerStoreErrorFirst(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "[[hook]]\nname = \"deny\"\npath = \""+denylistWasm(t)+"\"\n")
	require.NoError(t, os.MkdirAll(filepath.Join(b.State, databaseFile), 0o700)) // not a database
	_, errOut, code := b.Run("worker", "--drain")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "paddock: sqlite: open "+filepath.Join(b.State, databaseFile)+": it is a directory; the queue database must be a file")
	var compiled []string
	_ = filepath.WalkDir(filepath.Join(b.State, "cache", "wazero"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			compiled = append(compiled, p)
		}
		return nil
	})
	require.Empty(t, compiled, "the hooks were compiled before the store error was reported")
}

// A malformed --name glob is a usage error naming the flag and the
// pattern; it once matched nothing and exited 0.
func TestE2EMalformedNameGlob(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	for _, args := range [][]string{{"ls", "--name", "["}, {"ls", "--name", `web-\`}, {"schedules", "--name", "a[b"}} {
		out, errOut, code := b.Run(args...)
		require.Equal(t, 2, code, "%v: %s%s", args, out, errOut)
		require.Contains(t, errOut, `--name "`+strings.ReplaceAll(args[2], `\`, `\\`)+`": syntax error in pattern`, args)
	}
	b.Submit(b.WriteJob("web.toml", "name = \"web-1\"\ncommand = \"true\"\n"))
	out, errOut, code := b.Run("ls", "--name", "web-*")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "web-1")
}

// Submit's messages name a file as it was typed (relative stays
// relative) and standard input as <stdin>, whichever check finds the
// problem: the parser, the hook names, the store (an after naming
// nothing, a name given in two files), run's one-job rule. Some once
// printed the absolute path, or "-" for standard input.
func TestE2ESubmitMessagesNameFilesAsTyped(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	b.WriteJob("good.toml", "name = \"same\"\ncommand = \"true\"\n")
	b.WriteJob("again.toml", "# the same name\n\nname = \"same\"\ncommand = \"true\"\n")
	b.WriteJob("after.toml", "name = \"a\"\ncommand = \"true\"\nafter = [\"does-not-exist\"]\n")
	hooks := "name = \"h\"\ncommand = \"true\"\nhooks = [\"nonexistent-hook\"]\n"
	b.WriteJob("hooks.toml", hooks)
	for _, c := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"submit", "good.toml", "again.toml"}, "",
			`again.toml:3: job "same": name: duplicate name "same": a job or schedule of good.toml:1 has it too`},
		{[]string{"submit", "./good.toml", "-"}, "name = \"same\"\ncommand = \"true\"\n",
			`<stdin>:1: job "same": name: duplicate name "same": a job or schedule of ./good.toml:1 has it too`},
		{[]string{"submit", "-", "good.toml"}, "name = \"same\"\ncommand = \"true\"\n",
			`good.toml:1: job "same": name: duplicate name "same": a job or schedule of <stdin>:1 has it too`},
		{[]string{"submit", "good.toml", "after.toml"}, "", `after.toml:3: job "a": after: "does-not-exist" names no job`},
		{[]string{"submit", "-"}, "name = \"a\"\ncommand = \"true\"\nafter = [\"does-not-exist\"]\n", `<stdin>:3: job "a": after: "does-not-exist" names no job`},
		{[]string{"submit", "hooks.toml"}, "", `hooks.toml:3: job "h": hooks: unknown hook "nonexistent-hook"`},
		{[]string{"submit", "-"}, hooks, `<stdin>:3: job "h": hooks: unknown hook "nonexistent-hook"`},
		{[]string{"check", "-"}, hooks, `<stdin>:3: job "h": hooks: unknown hook "nonexistent-hook"`},
		{[]string{"run", "-"}, "[[job]]\ncommand = \"true\"\n[[job]]\ncommand = \"true\"\n", `<stdin>: paddock run takes a file with exactly one job, this one has 2`},
		{[]string{"submit", "-"}, "name = \"x\"\n", `<stdin>:1: job "x": command:`},
	} {
		_, errOut, code := b.RunIn(b.Dir, c.stdin, c.args...)
		require.Equal(t, 2, code, "%v: %s", c.args, errOut)
		require.Contains(t, errOut, c.want, c.args)
		// The state directory is named as a directory where no queue is
		// (no submission here makes one); files are named as typed.
		require.NotContains(t, strings.ReplaceAll(errOut, b.State, "STATE"), b.Dir, "%v: an absolute path", c.args)
	}
	requireNothingQueued(t, b)
}

// A file given twice to submit, however spelled, standard input included,
// is a usage error saying so, not a job name that clashes with itself;
// nothing is enqueued.
func TestE2ESubmitFileGivenTwice(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	a := b.WriteJob("a.toml", "name = \"a\"\ncommand = \"true\"\n")
	b.WriteJob("b.toml", "name = \"b\"\ncommand = \"true\"\n")
	require.NoError(t, os.Symlink("a.toml", filepath.Join(b.Dir, "link.toml")))
	require.NoError(t, os.Mkdir(filepath.Join(b.Dir, "sub"), 0o700))
	job := "name = \"s\"\ncommand = \"true\"\n"
	for _, c := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"a.toml", "a.toml"}, "", "paddock: a.toml is given twice\n"},
		{[]string{"a.toml", "b.toml", "./a.toml"}, "", "paddock: a.toml is given twice (again as ./a.toml)\n"},
		{[]string{"a.toml", "sub/../a.toml"}, "", "paddock: a.toml is given twice (again as sub/../a.toml)\n"},
		{[]string{a, "a.toml"}, "", "paddock: " + a + " is given twice (again as a.toml)\n"},
		{[]string{"a.toml", "link.toml"}, "", "paddock: a.toml is given twice (again as link.toml)\n"},
		{[]string{"-", "b.toml", "-"}, job, "paddock: <stdin> is given twice\n"},
		// Standard input in other spellings: it once read "-" and then
		// found nothing left at /dev/stdin (or the file a redirect gave
		// twice, a job name clashing with itself).
		{[]string{"-", "/dev/stdin"}, job, "paddock: <stdin> is given twice (again as /dev/stdin)\n"},
		{[]string{"/dev/stdin", "b.toml", "-"}, job, "paddock: /dev/stdin is given twice (again as <stdin>)\n"},
		{[]string{"-", "/proc/self/fd/0"}, job, "paddock: <stdin> is given twice (again as /proc/self/fd/0)\n"},
		{[]string{"-", "/dev/fd/0"}, job, "paddock: <stdin> is given twice (again as /dev/fd/0)\n"},
	} {
		_, errOut, code := b.RunIn(b.Dir, c.stdin, append([]string{"submit"}, c.args...)...)
		require.Equal(t, 2, code, "%v: %s", c.args, errOut)
		require.Equal(t, c.want, errOut, c.args)
	}
	requireNothingQueued(t, b)
	_, errOut, code := b.RunIn(b.Dir, job, "submit", "a.toml", "b.toml", "-")
	require.Equal(t, 0, code, errOut)
}

// An after naming a job that a later file of the same submission defines
// says to list that file first; it once said only that it named nothing.
func TestE2ESubmitAfterNamesALaterFile(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	b.WriteJob("deploy.toml", "name = \"deploy\"\ncommand = \"true\"\nafter = [\"build\"]\n")
	b.WriteJob("build.toml", "# builds\nname = \"build\"\ncommand = \"true\"\n")
	_, errOut, code := b.RunIn(b.Dir, "", "submit", "deploy.toml", "build.toml")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `deploy.toml:3: job "deploy": after: "build" is a job of build.toml:2, which comes later in this submission: list it first`)
	requireNothingQueued(t, b)
	_, errOut, code = b.RunIn(b.Dir, "", "submit", "build.toml", "deploy.toml")
	require.Equal(t, 0, code, errOut)
}

// runReadOnly runs paddock with b's state dir and config and args under
// bwrap, with dir mounted read-only and each of rw mounted writable inside
// it: how a read-only mount or a directory the user cannot write looks to
// paddock even when the test runs as root (root passes permission checks,
// not a read-only mount).
func runReadOnly(t *testing.T, b *e2etest.Bundle, dir string, rw []string, args ...string) (string, int) {
	t.Helper()
	rep := e2etest.RequireBwrap(t)
	ctx, cancel := context.WithTimeout(context.Background(), e2etest.CommandTimeout)
	defer cancel()
	c := b.Cmd(ctx, args...)
	bw := []string{rep.Executable, "--bind", "/", "/", "--ro-bind", dir, dir}
	for _, p := range rw {
		bw = append(bw, "--bind", p, p)
	}
	bw = append(bw, "--dev", "/dev", "--proc", "/proc", "--")
	c.Path, c.Args = rep.Executable, append(bw, c.Args...)
	var errb bytes.Buffer
	c.Stderr = &errb
	err := c.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		require.NoError(t, err, "%s", errb.String())
	}
	return errb.String(), ee.ExitCode()
}

// A state directory or queue database paddock cannot write says what is
// wrong and where, and exits 1, instead of SQLite's "unable to open
// database file (14)" or "attempt to write a readonly database".
func TestE2EStateNotWritable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// setup prepares b's state directory, mounted read-only, and
		// returns the paths mounted writable inside it, paddock's
		// arguments and the expected stderr line.
		setup func(t *testing.T, b *e2etest.Bundle, db string) (rw, args []string, want string)
	}{
		{"empty state directory on a read-only mount", func(t *testing.T, b *e2etest.Bundle, db string) ([]string, []string, string) {
			require.NoError(t, os.MkdirAll(b.State, 0o700))
			// policy show opens the queue, making it when missing (ls
			// refuses a state directory with no queue).
			return nil, []string{"policy", "show"}, "paddock: sqlite: open " + db + ": directory " + b.State + " is not writable: read-only file system; the queue creates " +
				db + ", " + db + "-wal and " + db + "-shm there\n"
		}},
		{"state directory that cannot be created", func(t *testing.T, b *e2etest.Bundle, db string) ([]string, []string, string) {
			require.NoError(t, os.MkdirAll(b.State, 0o700))
			sub := filepath.Join(b.State, "sub")
			return nil, []string{"--state-dir", sub, "policy", "show"}, "paddock: state directory " + sub + ": mkdir " + sub +
				": read-only file system (set --state-dir or $PADDOCK_STATE_DIR to a directory paddock can create and write)\n"
		}},
		{"hook compilation cache that cannot be created", func(t *testing.T, b *e2etest.Bundle, db string) ([]string, []string, string) {
			require.NoError(t, os.MkdirAll(b.State, 0o700))
			job := b.WriteJob("job.toml", "name = \"j\"\ncommand = \"true\"\n")
			cache := filepath.Join(b.State, "cache")
			return nil, []string{"check", job}, "paddock: state directory " + b.State + ": hook compilation cache: mkdir " + cache + ": read-only file system\n"
		}},
		{"database on a read-only mount", func(t *testing.T, b *e2etest.Bundle, db string) ([]string, []string, string) {
			_, errOut, code := b.Run("policy", "show") // creates the database
			require.Equal(t, 0, code, errOut)
			return nil, []string{"ls"}, "paddock: sqlite: open " + db + ": it is not writable: read-only file system\n"
		}},
		{"writable database in a directory that is not", func(t *testing.T, b *e2etest.Bundle, db string) ([]string, []string, string) {
			_, errOut, code := b.Run("policy", "show")
			require.Equal(t, 0, code, errOut)
			return []string{db}, []string{"ls"}, "paddock: sqlite: open " + db + ": directory " + b.State + " is not writable: read-only file system; the queue creates " +
				db + "-wal and " + db + "-shm there\n"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := e2etest.Setup(t, "")
			rw, args, want := tc.setup(t, b, filepath.Join(b.State, databaseFile))
			errOut, code := runReadOnly(t, b, b.State, rw, args...)
			require.Equal(t, 1, code, errOut)
			require.Contains(t, errOut, want) // check may warn about the probe first
			require.NotContains(t, errOut, "(14)")
		})
	}
}

// check refuses a bad job file with its problems alone: it never
// enqueues, so it does not say "nothing was enqueued" (it once did, in
// the words of submit, which still says it).
func TestE2ECheckBadFileNotEnqueueWording(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	b.WriteJob("hooks.toml", "name = \"h\"\ncommand = \"true\"\nhooks = [\"nonexistent-hook\"]\n")
	b.WriteJob("nocmd.toml", "name = \"x\"\n")
	b.WriteJob("delay.toml", "name = \"d\"\ncommand = \"true\"\ndelay = \"100000h\"\n")
	b.WriteJob("jitter.toml", "name = \"j\"\ncommand = \"true\"\njitter = \"5m\"\n")
	b.WriteJob("after.toml", "name = \"m\"\ncommand = \"true\"\nafter = [\"nosuch\"]\n")
	for _, c := range []struct {
		file string
		want string // the problem, after "paddock: " and before the newline
	}{
		{"hooks.toml", `hooks.toml:3: job "h": hooks: unknown hook "nonexistent-hook"`},
		{"nocmd.toml", `jobspec: invalid job: nocmd.toml:1: job "x": command: missing`},
		{"delay.toml", `jobspec: invalid job: delay.toml:3: job "d": delay:`},
		{"jitter.toml", `jobspec: invalid job: jitter.toml:`},
		{"after.toml", `jobspec: invalid job: after.toml:3: job "m": after: "nosuch" names no job in this file and no id or name in the queue`},
	} {
		_, errOut, code := b.RunIn(b.Dir, "", "check", c.file)
		require.Equal(t, 2, code, "check %s: %s", c.file, errOut)
		require.True(t, strings.HasPrefix(errOut, "paddock: "+c.want), "check %s: %q", c.file, errOut)
		require.NotContains(t, errOut, "enqueued", "check %s", c.file)
		for _, cmd := range []string{"submit", "run"} {
			_, errOut, code = b.RunIn(b.Dir, "", cmd, c.file)
			require.Equal(t, 2, code, "%s %s: %s", cmd, c.file, errOut)
			require.True(t, strings.HasPrefix(errOut, "paddock: nothing was enqueued:\n"+c.want), "%s %s: %q", cmd, c.file, errOut)
		}
	}
	requireNothingQueued(t, b)
}

// TestE2ESubmitInterruptedWhileReading: a job file that blocks its reader
// (a named pipe nothing writes to, or stdin left open) does not make
// submit deaf to signals: SIGTERM ends it with exit 130, saying what it
// was reading, and nothing is enqueued. A pipe that is written is read.
func TestE2ESubmitInterruptedWhileReading(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	fifo := filepath.Join(b.Dir, "jobs.toml")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, args := range [][]string{{"submit", fifo}, {"submit", "-"}, {"check", fifo}} {
		c := b.Cmd(context.Background(), args...)
		var errb strings.Builder
		c.Stderr = &errb
		stdin, err := c.StdinPipe() // left open: "-" waits on it
		require.NoError(t, err)
		require.NoError(t, c.Start())
		time.Sleep(300 * time.Millisecond) // reading by now
		require.NoError(t, c.Process.Signal(syscall.SIGTERM))
		err = c.Wait()
		stdin.Close()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", args, errb.String())
		require.Equal(t, 130, ee.ExitCode(), "%v: %s", args, errb.String())
		require.Contains(t, errb.String(), "interrupted while reading", args)
	}
	requireNothingQueued(t, b)

	go func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			f.WriteString("name = \"p1\"\ncommand = \"true\"\n")
			f.Close()
		}
	}()
	_, errOut, code := b.Run("submit", fifo)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "queued", b.Show("p1").State)
}

// cancel's exit statuses are those its help gives: a canceled job again
// is fine (0), a job that failed cannot be canceled (1), a ref that names
// nothing is bad input (2).
func TestE2ECancelExitCodes(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	allowUnconfined(t, b)
	queued := b.Submit(b.WriteJob("queued.toml", "name = \"queued\"\ncommand = \"true\"\n"))[0]
	_, errOut, code := b.Run("run", b.WriteJob("fails.toml", "name = \"fails\"\nmode = \"danger_full_access\"\ncommand = \"exit 3\"\n"))
	require.Equal(t, 3, code, errOut)
	help, _, code := b.Run("cancel", "--help")
	require.Equal(t, 0, code)
	for _, tt := range []struct {
		ref  string
		code int
		err  string
		help string
	}{
		{queued, 0, "", ""},
		{queued, 0, "", "canceled already does\nnothing (exit 0)"},
		{"fails", 1, "paddock: cancel fails: queue: wrong state: cannot cancel job", "succeeded, failed or was denied is an\nerror (exit 1)"},
		{"nothing", 2, `paddock: cancel nothing: queue: job not found: no job with id or name "nothing"`, "names no job (exit 2)"},
	} {
		_, errOut, code := b.Run("cancel", tt.ref)
		require.Equal(t, tt.code, code, "cancel %s: %s", tt.ref, errOut)
		if tt.err != "" {
			require.Contains(t, errOut, tt.err)
		}
		require.Contains(t, help, tt.help, "cancel --help gives exit %d", tt.code)
	}
}

// A config that a worker refuses (a hook module missing, a digest that
// does not match, a bad [[hook]] field) is refused by submit too, saying
// the config file and the line of the [[hook]] table's key at fault
// (path for a module that cannot be read); and probe and confine
// refuse a --config that does not exist, as every other command does.
func TestE2EConfigRefusedEverywhere(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	module := filepath.Join(b.Dir, "some.wasm")
	require.NoError(t, os.WriteFile(module, []byte("\x00asm\x01\x00\x00\x00"), 0o600))
	job := b.WriteJob("job.toml", "command = \"true\"\n")
	zeros := strings.Repeat("0", 64)
	// The [[hook]] header is line 5, name 6, path 7, the next key 8.
	for _, tt := range []struct {
		name, hook, want string
		line             int
	}{
		{"missing module", `path = "` + filepath.Join(b.Dir, "nowhere.wasm") + `"`, "no such file or directory", 7},
		{"digest", `path = "` + module + `"` + "\nsha256 = \"" + zeros + `"`, "its sha256 key says " + zeros, 8},
		{"malformed digest", `path = "` + module + `"` + "\nsha256 = \"abc\"", `: hook "h": sha256: "abc" is not 64 hex digits`, 8},
		{"field", `path = "` + module + `"` + "\nmode = \"enforc\"", `: hook "h": mode: want "enforce" or "monitor", got "enforc"`, 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(b.Config, []byte(e2etest.DefaultConfig+"\n[[hook]]\nname = \"h\"\n"+tt.hook+"\n"), 0o600))
			at := fmt.Sprintf("%s:%d: ", b.Config, tt.line)
			for _, args := range [][]string{{"submit", job}, {"check", job}} {
				_, errOut, code := b.Run(args...)
				require.Equal(t, 2, code, "%s: %s", args[0], errOut)
				require.Contains(t, errOut, at, "%s names the key's line", args[0])
				require.Contains(t, errOut, tt.want, args[0])
			}
		})
	}
	c := *b
	c.T = t
	c.Config = filepath.Join(b.Dir, "missing.toml")
	for _, args := range [][]string{{"probe"}, {"confine", "--", "true"}, {"ls"}} {
		_, errOut, code := c.Run(args...)
		require.Equal(t, 2, code, "%s with a --config that does not exist: %s", args[0], errOut)
		require.Contains(t, errOut, "missing.toml: no such file or directory")
	}
}

// TestE2ESubmitWarnsOfMissingWorkspace: a job whose workspace does not
// exist yet is queued (it may be made before the job starts), with a
// warning that names the job and the directory; one that exists gets
// none.
func TestE2ESubmitWarnsOfMissingWorkspace(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	dir := t.TempDir()
	job := b.WriteJob("ws.toml", fmt.Sprintf("[[job]]\nname = \"later\"\nmode = \"read_only\"\nworkspace = %q\ncommand = [\"true\"]\n[[job]]\nname = \"now\"\nmode = \"read_only\"\nworkspace = %q\ncommand = [\"true\"]\n",
		filepath.Join(dir, "checkout"), dir))
	out, errOut, code := b.Run("submit", job)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "later")
	// At the file and line that set the workspace.
	require.Contains(t, errOut, `paddock: warning: `+job+`:4: job "later": workspace `+filepath.Join(dir, "checkout")+" does not exist yet")
	require.NotContains(t, errOut, `job "now"`)
}

// TestE2ESubmitWarnsOfUnrunnable: a job whose workspace is paddock's
// state directory, or whose writable path holds paddock's own binary, is
// queued with a warning that every attempt will fail before it runs, as
// check says cannot_run; a job the fence allows gets none.
func TestE2ESubmitWarnsOfUnrunnable(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	require.NoError(t, os.MkdirAll(b.State, 0o700))
	fine := t.TempDir()
	job := b.WriteJob("bad.toml", fmt.Sprintf("[[job]]\nname = \"state\"\nmode = \"workspace_write\"\nworkspace = %q\ncommand = [\"true\"]\n"+
		"[[job]]\nname = \"bin\"\nmode = \"workspace_write\"\nworkspace = %q\nwritable = [%q]\ncommand = [\"true\"]\n"+
		"[[job]]\nname = \"fine\"\nmode = \"workspace_write\"\nworkspace = %q\ncommand = [\"true\"]\n",
		b.State, fine, filepath.Dir(b.Bin), t.TempDir()))
	out, errOut, code := b.Run("submit", job)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "state")
	require.Contains(t, errOut, `paddock: warning: `+job+`:4: job "state": each attempt will fail before it runs (not run): runner: `+b.State+" is paddock's state directory")
	require.Contains(t, errOut, `paddock: warning: `+job+`:10: job "bin": each attempt will fail before it runs (not run): runner: `+filepath.Dir(b.Bin)+" contains")
	require.NotContains(t, errOut, `job "fine"`)
	out, _, code = b.Run("check", job)
	require.Equal(t, 1, code)
	require.Equal(t, 2, strings.Count(out, "cannot_run"), out)
	// Placed as submit places them, and with no id check made up: the
	// job has none yet.
	require.Contains(t, out, job+`:4: job "state": runner: `+b.State+" is paddock's state directory", out)
	require.Contains(t, out, "a job that names no workspace gets its own, "+filepath.Join(b.State, "workspaces")+"/<its id>", out)
	require.NotContains(t, out, "check-", out)

	// A job with no workspace of its own is checked too: a writable path
	// or cwd that does not exist is said at its line.
	norm := b.WriteJob("paths.toml", "[[job]]\nname = \"wr\"\nmode = \"workspace_write\"\nwritable = [\"./nowhere\"]\ncommand = [\"true\"]\n"+
		"[[job]]\nname = \"cw\"\nmode = \"workspace_write\"\ncwd = \"./nowhere-cwd\"\ncommand = [\"true\"]\n")
	_, errOut, code = b.Run("submit", norm)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, `paddock: warning: `+norm+`:4: job "wr": each attempt will fail before it runs (not run): sandbox: writable root`)
	require.Contains(t, errOut, `paddock: warning: `+norm+`:9: job "cw": each attempt will fail before it runs (not run): sandbox: cwd`)
}

// TestE2EReadsNeedAQueue: a command that reads or changes what a queue
// holds, pointed at a state directory that holds none (a mistyped
// --state-dir), says so and exits 2, creating nothing; once a job was
// submitted there, the same command answers.
func TestE2EReadsNeedAQueue(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	typo := filepath.Join(b.Dir, "stat-dir")
	for _, args := range [][]string{{"ls"}, {"show", "x"}, {"logs", "x"}, {"wait", "x"}, {"cancel", "x"}, {"retry", "x"}, {"groups"}, {"schedules"}} {
		_, errOut, code := b.Run(append([]string{"--state-dir", typo}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "paddock: no queue at "+typo+": "+filepath.Join(typo, "paddock.db")+" does not exist", args)
		require.NoDirExists(t, typo, "%v created the state directory", args)
	}
	// An empty state directory is said as such (a file given as one is
	// TestE2EBadInputExitCodes').
	_, errOut, code := b.Run("--state-dir", "", "ls")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "paddock: --state-dir is empty")

	b.Submit(b.WriteJob("one.toml", "[[job]]\nname = \"one\"\ncommand = [\"true\"]\n"))
	out, errOut, code := b.Run("ls")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "one")
	// submit and run make the queue too, and say so when they had to:
	// its policy is the default, not the operator's of the queue meant.
	other := filepath.Join(b.Dir, "other-state")
	one := b.WriteJob("two.toml", "[[job]]\nname = \"two\"\nmode = \"read_only\"\ncommand = [\"true\"]\n")
	_, errOut, code = b.Run("--state-dir", other, "submit", one)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "paddock: warning: no queue was at "+other+": made a new one, under the default policy")
	_, errOut, code = b.Run("--state-dir", other, "submit", b.WriteJob("three.toml", "[[job]]\nname = \"three\"\ncommand = [\"true\"]\n"))
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, errOut, "no queue was at", "the queue is there now")
	_, errOut, _ = b.Run("--state-dir", filepath.Join(b.Dir, "run-state"), "run", one)
	require.Contains(t, errOut, "paddock: warning: no queue was at "+filepath.Join(b.Dir, "run-state"))
	// A file the new queue's policy would refuse makes no queue.
	wide := b.WriteJob("wide.toml", "name = \"wide\"\nmode = \"danger_full_access\"\ncommand = [\"true\"]\n")
	for _, c := range []string{"submit", "run"} {
		dir := filepath.Join(b.Dir, c+"-refused")
		_, errOut, code = b.Run("--state-dir", dir, c, wide)
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, "refused by policy (max_mode)", c)
		require.NoFileExists(t, filepath.Join(dir, "paddock.db"), c)
	}
	// The other commands that make a queue say so too, and check, which
	// makes none, says what it checked against.
	for _, args := range [][]string{{"pause"}, {"groups", "set", "g", "1"}, {"policy", "show"}} {
		dir := filepath.Join(b.Dir, "made-"+args[0])
		_, errOut, code = b.Run(append([]string{"--state-dir", dir}, args...)...)
		require.Equal(t, 0, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "paddock: warning: no queue was at "+dir+": made a new one", args)
	}
	_, errOut, code = b.Run("--state-dir", filepath.Join(b.Dir, "check-typo"), "check", one)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "no queue at "+filepath.Join(b.Dir, "check-typo")+": checked against the default policy")
	// A policy set on a queue made just now has no worker to stop.
	pol := filepath.Join(b.Dir, "pol.toml")
	require.NoError(t, os.WriteFile(pol, []byte("max_mode = \"read_only\"\n"), 0o644))
	_, errOut, code = b.Run("--state-dir", filepath.Join(b.Dir, "fresh-policy"), "policy", "set", pol)
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, errOut, "the policy changed")
	require.Contains(t, errOut, "no queue was at")

	// Nor does one that only the store refuses: an after naming no job.
	orphan := b.WriteJob("orphan.toml", "name = \"orphan\"\nmode = \"read_only\"\ncommand = [\"true\"]\nafter = [\"nosuch\"]\n")
	for _, c := range []string{"submit", "run"} {
		dir := filepath.Join(b.Dir, c+"-orphan")
		_, errOut, code = b.Run("--state-dir", dir, c, orphan)
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, "orphan.toml:4:", c)
		require.Contains(t, errOut, "nosuch", c)
		require.Contains(t, errOut, "no queue is at "+dir+", which is where the jobs named were looked for", c)
		require.NoFileExists(t, filepath.Join(dir, "paddock.db"), c)
	}

	// A worker makes the queue it runs, and says so when it had to: its
	// drain of an empty one is no proof of the jobs' end.
	_, errOut, code = b.Run("--state-dir", typo, "worker", "--drain")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, `msg="queue created: there was none in this state directory`)
	require.Contains(t, errOut, "db="+filepath.Join(typo, "paddock.db"))
}

// TestE2EConfineDangerAndSystemDirs: confine of a danger_full_access
// command shares the network as such a job does (it cannot isolate it),
// unless --network=false, which is refused; and a system directory whose
// whole tree is refused is not answered with "use a directory below it".
func TestE2EConfineDangerAndSystemDirs(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	out, errOut, code := b.Run("confine", "--mode", "danger_full_access", "--", "ls")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "ls\n", out)
	_, errOut, code = b.Run("confine", "--mode", "danger_full_access", "--network=false", "--", "ls")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "danger_full_access cannot isolate the network")
	_, errOut, code = b.Run("confine", "--writable", "/etc", "--", "ls")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `writable root "/etc" is the system directory /etc, whose tree the host runs or configures itself from`)
	require.NotContains(t, errOut, "use a directory below it")
	_, errOut, code = b.Run("confine", "--writable", "/var", "--", "ls")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `writable root "/var" is the system directory /var; use a directory below it`)
}

// TestE2ECancelRetryNamesTogether: cancel of a job and its dependent
// succeeds though canceling the first fails the second; a job named
// twice is retried once; under --json an unknown name is a job_error,
// the exit's exit_error last.
func TestE2ECancelRetryNamesTogether(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	ids := b.Submit(b.WriteJob("dep.toml", "[[job]]\nname = \"first\"\ncommand = [\"true\"]\n[[job]]\nname = \"second\"\ncommand = [\"true\"]\nafter = [\"first\"]\n"))
	out, errOut, code := b.Run("cancel", "first", "second")
	require.Equal(t, 0, code, out+errOut)
	require.Contains(t, out, ids[0]+"\tfirst\tcanceled")
	require.Contains(t, out, ids[1]+"\tsecond\tfailed")
	require.Empty(t, errOut)
	// Its logs say it never will run, not that it has not yet.
	_, errOut, code = b.Run("logs", "second")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "paddock: job "+ids[1]+" never ran: it is failed (dependency")

	out, errOut, code = b.Run("retry", "first", ids[0])
	require.Equal(t, 0, code, out+errOut)
	require.Equal(t, 1, strings.Count(out, ids[0]), out)
	require.Empty(t, errOut)

	// A dependent named before its dependency is retried all the same,
	// once the dependency is; one that cannot be retried is said once.
	ids = b.Submit(b.WriteJob("dep2.toml", "[[job]]\nname = \"a\"\ncommand = [\"true\"]\n[[job]]\nname = \"b\"\ncommand = [\"true\"]\nafter = [\"a\"]\n"))
	out, errOut, code = b.Run("cancel", "a", "b")
	require.Equal(t, 0, code, out+errOut)
	out, errOut, code = b.Run("retry", "b", "a", ids[1])
	require.Equal(t, 0, code, out+errOut)
	require.Contains(t, out, ids[0]+"\ta\tqueued")
	require.Contains(t, out, ids[1]+"\tb\tqueued")
	require.Empty(t, errOut)
	_, errOut, code = b.Run("retry", "b")
	require.Equal(t, 1, code, errOut)
	require.Equal(t, 1, strings.Count(errOut, "paddock: retry b:"), errOut)

	_, errOut, code = b.Run("--json", "retry", "nosuch")
	require.Equal(t, 2, code, errOut)
	lines := strings.Split(strings.TrimSpace(errOut), "\n")
	require.Len(t, lines, 2, errOut)
	require.Contains(t, lines[0], `"message_type":"job_error"`)
	require.Contains(t, lines[0], `"ref":"nosuch"`)
	require.Contains(t, lines[1], `"message_type":"exit_error"`)
}

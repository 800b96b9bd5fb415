package e2etest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/testenv"
	"paddock/sandbox"
)

// escapeJob is one job of the escape suite: a script that tries to get
// out of the fence, and the host paths that must not exist afterwards.
type escapeJob struct {
	name    string
	script  string   // run by /bin/sh -c with $1 = outside dir, $2 = token, $3 = a host pid
	outcome string   // expected attempt outcome
	absent  []string // host paths that must not exist after the job ("{out}", "{tok}", "{ws}", "{home}" expanded)
	timeout string
	setup   func(t *testing.T, ws, out string) // prepares the workspace on the host
}

// escapeJobs is the table the README lists ("Escape suite").
var escapeJobs = []escapeJob{
	{
		name: "write-outside", outcome: "succeeded",
		script: `echo x > "$1/write-outside"; echo x > "/etc/paddock-escape-$2"; echo x > "/usr/paddock-escape-$2"; echo x > "$HOME/paddock-escape-$2"`,
		absent: []string{"{out}/write-outside", "/etc/paddock-escape-{tok}", "/usr/paddock-escape-{tok}", "{home}/paddock-escape-{tok}"},
	},
	{
		name: "host-tmp", outcome: "succeeded",
		script: `echo x > "/tmp/paddock-escape-$2" || echo FAILED-TO-WRITE-PRIVATE-TMP; test -e "/tmp/paddock-visible-$2" && echo ESCAPED-saw-host-tmp`,
		absent: []string{"/tmp/paddock-escape-{tok}"},
	},
	{
		name: "proc-root", outcome: "succeeded",
		script: `for pid in "$3" 1 $(ls /proc 2>/dev/null | grep '^[0-9]'); do ( echo x > "/proc/$pid/root$1/proc-root" ) 2>/dev/null && echo "ESCAPED-via-$pid"; done`,
		absent: []string{"{out}/proc-root"},
	},
	{
		name: "symlink-made", outcome: "succeeded",
		script: `ln -s "$1" link && echo x > link/symlink-made; ln -s "/etc/paddock-escape-link-$2" file && echo x > file`,
		absent: []string{"{out}/symlink-made", "/etc/paddock-escape-link-{tok}"},
	},
	{
		name: "symlink-placed", outcome: "succeeded",
		script: `echo x > placed/symlink-placed; echo x > placed-file`,
		absent: []string{"{out}/symlink-placed", "{out}/placed-file"},
		setup: func(t *testing.T, ws, out string) {
			require.NoError(t, os.Symlink(out, filepath.Join(ws, "placed")))
			require.NoError(t, os.Symlink(filepath.Join(out, "placed-file"), filepath.Join(ws, "placed-file")))
		},
	},
	{
		name: "remount", outcome: "succeeded",
		script: `mount -o remount,rw,bind / && echo ESCAPED-remounted; mount -o remount,rw / && echo ESCAPED-remounted-rw; mkdir -p mnt; mount --bind "$1" mnt && echo x > mnt/remount; echo x > "/etc/paddock-escape-remount-$2"`,
		absent: []string{"{out}/remount", "/etc/paddock-escape-remount-{tok}"},
	},
	{
		name: "userns", outcome: "succeeded",
		script: `unshare -Ur sh -c 'mount -o remount,rw,bind / && echo x > "$0"' "/etc/paddock-escape-userns-$2" && echo ESCAPED-userns;
unshare -m sh -c 'mount -o remount,rw,bind / && echo x > "$0"' "/etc/paddock-escape-mountns-$2" && echo ESCAPED-mountns;
unshare -U sh -c 'echo x > "$0"' "/etc/paddock-escape-userns2-$2" && echo ESCAPED-userns2`,
		absent: []string{"/etc/paddock-escape-userns-{tok}", "/etc/paddock-escape-mountns-{tok}", "/etc/paddock-escape-userns2-{tok}"},
	},
	{
		name: "setsid-daemon", outcome: "timeout", timeout: "1s",
		// The daemon ignores SIGTERM (so does its sleep, which inherits
		// that) and writes its workspace only if its sleep ran to the end.
		script: `setsid /bin/sh -c 'trap "" TERM HUP INT; sleep 3 && echo x > daemon-survived' paddock-daemon-$2 </dev/null >/dev/null 2>&1 & sleep 600`,
		absent: []string{"{ws}/daemon-survived"},
	},
}

// TestEscapeSuite runs every escape job through the real worker at both
// grades (the partial one forced with PADDOCK_FORCE_GRADE=partial) and
// checks from the host that nothing got out.
func TestEscapeSuite(t *testing.T) {
	t.Parallel()
	rep := RequireBwrap(t)
	grades := []sandbox.Grade{sandbox.GradeFull, sandbox.GradePartial}
	if rep.Grade == sandbox.GradePartial {
		if testenv.Required() {
			t.Fatalf("this host supports only the partial grade and PADDOCK_REQUIRE_BWRAP=1: the full grade cannot be checked")
		}
		t.Logf("this host supports only the partial grade: the full grade is not checked")
		grades = grades[1:]
	}
	for _, g := range grades {
		t.Run(string(g), func(t *testing.T) {
			t.Parallel()
			escapeSuite(t, g)
		})
	}
}

func escapeSuite(t *testing.T, grade sandbox.Grade) {
	b := Setup(t, "")
	b.Env = []string{sandbox.ForceGradeEnv + "="}
	if grade == sandbox.GradePartial {
		b.Env = []string{sandbox.ForceGradeEnv + "=partial"}
	}
	tok := randomToken(t)
	// out is writable on the host and outside every workspace; /var/tmp
	// is visible (read-only) inside the sandbox, unlike /tmp.
	out, err := os.MkdirTemp("/var/tmp", "paddock-escape-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(out) })
	visible := "/tmp/paddock-visible-" + tok
	require.NoError(t, os.WriteFile(visible, []byte("host"), 0o644))
	t.Cleanup(func() { os.Remove(visible) })
	host := exec.Command("sleep", "600")
	require.NoError(t, host.Start())
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	wsBase := t.TempDir()
	expand := func(j escapeJob, s string) string {
		return strings.NewReplacer("{out}", out, "{tok}", tok, "{ws}", filepath.Join(wsBase, j.name), "{home}", os.Getenv("HOME")).Replace(s)
	}
	for _, j := range escapeJobs {
		for _, p := range j.absent {
			t.Cleanup(func() { os.Remove(expand(j, p)) })
		}
	}

	var file strings.Builder
	for _, j := range escapeJobs {
		ws := filepath.Join(wsBase, j.name)
		require.NoError(t, os.Mkdir(ws, 0o755))
		if j.setup != nil {
			j.setup(t, ws, out)
		}
		fmt.Fprintf(&file, "[[job]]\nname = %q\nmode = \"workspace_write\"\nworkspace = %q\ncommand = %s\n",
			j.name, ws, tomlArray("/bin/sh", "-c", j.script+"\necho attempted", "sh", out, tok, strconv.Itoa(host.Process.Pid)))
		if j.timeout != "" {
			fmt.Fprintf(&file, "timeout = %q\n", j.timeout)
		}
	}
	b.Submit(b.WriteJob("escape.toml", file.String()))
	_, errOut, code := b.Run("worker", "--drain", "--concurrency", "2")
	drained := time.Now() // any daemon started before this
	require.Equal(t, 1, code, "the daemon job times out, so drain exits 1: %s", errOut)

	for _, j := range escapeJobs {
		s := b.Show(j.name)
		require.NotEmpty(t, s.Attempts, j.name)
		a := s.Attempts[len(s.Attempts)-1]
		require.Equal(t, j.outcome, a.Outcome, "%s: %s", j.name, a.Reason)
		// The attempt ran at the grade asked for.
		if grade == sandbox.GradePartial {
			require.Contains(t, a.ConfinedArgv, "--dev-bind", j.name)
			require.NotContains(t, a.ConfinedArgv, "--proc", j.name)
		} else {
			require.Contains(t, a.ConfinedArgv, "--proc", j.name)
		}
		log, err := os.ReadFile(a.StdoutPath)
		if !os.IsNotExist(err) { // a job that printed nothing has no log file
			require.NoError(t, err)
		}
		if j.outcome == "succeeded" {
			require.Contains(t, string(log), "attempted", "%s: the script must have run to its end", j.name)
		}
		require.NotContains(t, string(log), "ESCAPED", j.name)
		require.NotContains(t, string(log), "FAILED-TO-WRITE-PRIVATE-TMP", j.name)
		for _, p := range j.absent {
			_, err := os.Lstat(expand(j, p))
			require.True(t, os.IsNotExist(err), "%s at grade %s: %s exists on the host", j.name, grade, expand(j, p))
		}
	}
	// The daemon is gone; had it outlived the job it would write
	// daemon-survived after 3 seconds: look again once they have passed.
	RequireNoProcess(t, "paddock-daemon-"+tok)
	time.Sleep(time.Until(drained.Add(3500 * time.Millisecond)))
	_, err = os.Lstat(filepath.Join(wsBase, "setsid-daemon", "daemon-survived"))
	require.True(t, os.IsNotExist(err), "the setsid daemon outlived its job")
	ents, err := os.ReadDir(out)
	require.NoError(t, err)
	require.Empty(t, ents, "nothing may land in the outside directory")
}

// tomlArray renders strings as a TOML array of basic strings.
func tomlArray(ss ...string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TestE2EStateDirOutOfReach: a workspace_write job whose workspace or
// writable path contains paddock's state directory, its config (existing
// or not) or a hook module, or lies inside the state directory other than
// under workspaces/, is refused before it runs: otherwise it could rewrite
// the queue and have another job run unconfined (a read-only mask inside
// the sandbox would not do: the job could rename an ancestor of it and put
// its own files at the old path). Jobs in their default workspace, and
// read_only jobs anywhere, still run.
func TestE2EStateDirOutOfReach(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	b := Setup(t, "")
	_, _, code := b.Run("probe") // creates the state directory and its cache
	require.Equal(t, 0, code)
	cfgBefore, err := os.ReadFile(b.Config)
	require.NoError(t, err)
	other := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(b.State, "cache"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(b.State, "workspaces"), 0o700))
	require.NoError(t, os.Symlink(b.Dir, filepath.Join(other, "link")))
	script := `command = '''echo x > pwned; for f in "$PADDOCK_WORKSPACE"/state/*; do echo x >> "$f"; done; echo ESCAPED'''`
	for _, tc := range []struct{ name, keys, want string }{
		{"contains the state and config", fmt.Sprintf("workspace = %q", b.Dir), "contains"},
		{"through a symlink", fmt.Sprintf("workspace = %q", filepath.Join(other, "link")), "contains"},
		{"writable contains them", fmt.Sprintf("workspace = %q\nwritable = [%q]", other, b.Dir), "contains"},
		{"is the state", fmt.Sprintf("workspace = %q", b.State), "is paddock's state directory"},
		{"inside the state", fmt.Sprintf("workspace = %q", filepath.Join(b.State, "cache")), "inside paddock's state directory"},
		{"all workspaces", fmt.Sprintf("workspace = %q", filepath.Join(b.State, "workspaces")), "inside paddock's state directory"},
	} {
		job := b.WriteJob("reach.toml", "mode = \"workspace_write\"\n"+tc.keys+"\n"+script+"\n")
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 125, code, "%s: runner_failed expected: %s", tc.name, errOut)
		require.NotContains(t, out, "ESCAPED", tc.name)
		require.Contains(t, errOut, tc.want, tc.name)
	}
	require.NoFileExists(t, filepath.Join(b.Dir, "pwned"))
	require.NoFileExists(t, filepath.Join(b.State, "cache", "pwned"))
	cfgAfter, err := os.ReadFile(b.Config)
	require.NoError(t, err)
	require.Equal(t, cfgBefore, cfgAfter)

	// The default workspace (under <state>/workspaces/) is writable, and a
	// read_only job may look at the whole directory, where the state
	// directory is an empty, read-only directory.
	job := b.WriteJob("ok.toml", "mode = \"workspace_write\"\ncommand = \"echo x > mine && cat mine\"\n")
	out, errOut, code := b.Run("run", job)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "x\n", out)
	job = b.WriteJob("ro.toml", fmt.Sprintf("mode = \"read_only\"\nworkspace = %q\ncommand = \"ls -A state; echo seen\"\n", b.Dir))
	out, errOut, code = b.Run("run", job)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "seen\n", out)
}

// TestE2ELoaderEnvNeverReachesBwrap: bwrap runs on the host, outside every
// namespace, so a job's LD_PRELOAD given to it would run the job's code
// unconfined. Loader variables reach the job only (LD_DEBUG shows which
// programs the loader ran for: the job's, never bwrap).
func TestE2ELoaderEnvNeverReachesBwrap(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	b := Setup(t, "")
	job := b.WriteJob("ld.toml", "mode = \"read_only\"\ncommand = [\"/bin/true\"]\nenv = { LD_DEBUG = \"files\" }\n")
	_, errOut, code := b.Run("run", job)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "needed by /bin/true", "the job's loader saw LD_DEBUG")
	require.NotRegexp(t, `needed by \S*bwrap`, errOut, "bwrap's loader saw the job's LD_DEBUG")
}

// TestE2EInheritedFDsStayOutside: a file descriptor paddock inherits (a
// shell redirect, a supervisor's socket) does not reach the job, which
// could otherwise write a host file through it from read_only.
func TestE2EInheritedFDsStayOutside(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	b := Setup(t, "")
	host := filepath.Join(t.TempDir(), "outside.txt")
	f, err := os.OpenFile(host, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer f.Close()
	job := b.WriteJob("fd7.toml", "mode = \"read_only\"\ncommand = \"echo written >&7 || echo no-fd-7\"\n")
	cmd := b.Cmd(t.Context(), "run", job)
	cmd.ExtraFiles = []*os.File{nil, nil, nil, nil, f} // fd 7 in paddock
	out, err := cmd.Output()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "no-fd-7")
	got, err := os.ReadFile(host)
	require.NoError(t, err)
	require.Empty(t, got, "the job wrote through an fd paddock inherited")
}

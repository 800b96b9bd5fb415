package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
	"paddock/internal/testenv"
	"paddock/sandbox"
	"paddock/sandbox/launch"
)

func TestConfineCommandUsageErrors(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	for _, args := range [][]string{
		{"confine", "--workspace", ws},
		{"confine", "--mode", "bogus", "--workspace", ws, "--", "ls"},
		{"confine", "--workspace", "/", "--", "ls"},
		{"confine", "--workspace", filepath.Join(ws, "missing"), "--", "ls"},
		{"confine", "--workspace", ws, "--writable", "/", "--", "ls"},
		{"confine", "--mode", "read_only", "--workspace", ws, "--writable", ws, "--", "ls"},
		{"confine", "--mode", "danger_full_access", "--network=false", "--", "ls"},
	} {
		require.Equal(t, exitUsage, run(context.Background(), args), "%q", args)
	}
}

func TestConfineCommandDanger(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := runConfine(context.Background(), ConfineOptions{Mode: "danger_full_access", Network: true}, &GlobalOptions{}, nil, []string{"sh", "-c", "echo 'x y'"}, &out, io.Discard)
	require.NoError(t, err)
	require.Equal(t, `sh -c 'echo '\''x y'\'''`+"\n", out.String())
}

func TestConfineCommandJSON(t *testing.T) {
	requireBwrapCmd(t)
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	var out bytes.Buffer
	err = runConfine(context.Background(), ConfineOptions{Mode: "workspace_write", Workspace: ws, Network: false, Writable: []string{"/var/tmp"}}, &GlobalOptions{JSON: true}, nil, []string{"make", "test"}, &out, io.Discard)
	require.NoError(t, err)
	var argv []string
	require.NoError(t, json.Unmarshal(out.Bytes(), &argv), "--json prints a bare array of strings, as issue 2 asks")
	joined := strings.Join(argv, " ")
	require.True(t, filepath.IsAbs(argv[0]))
	require.Contains(t, joined, "--unshare-net")
	require.Contains(t, joined, "--bind "+ws+" "+ws+" --bind /var/tmp /var/tmp --chdir "+ws+" -- ")
	require.True(t, strings.HasSuffix(joined, " -- make test"), joined)
}

// TestConfineCommandLayers: the argv carries the layers the probe found
// (--unshare-ipc, --seccomp 4, the launcher with the writable set), and
// --seccomp-file writes the program for the policy, Unix sockets as
// --unix-sockets says.
func TestConfineCommandLayers(t *testing.T) {
	requireBwrapCmd(t)
	rep, err := sandbox.Probe(context.Background())
	require.NoError(t, err)
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	for _, unix := range []bool{false, true} {
		prog := filepath.Join(t.TempDir(), "prog")
		var out bytes.Buffer
		err = runConfine(context.Background(), ConfineOptions{Mode: "workspace_write", Workspace: ws, Network: true, UnixSockets: unix, SeccompFile: prog},
			&GlobalOptions{JSON: true}, nil, []string{"true"}, &out, io.Discard)
		require.NoError(t, err)
		var argv []string
		require.NoError(t, json.Unmarshal(out.Bytes(), &argv))
		joined := strings.Join(argv, " ")
		require.Contains(t, joined, " --unshare-ipc ")
		require.Contains(t, joined, " --seccomp 4 ")
		if rep.LandlockABI > 0 {
			launcher := sandbox.LauncherProgram(rep.Grade)
			require.Equal(t, rep.Grade == sandbox.GradePartial, strings.Contains(joined, " --ro-bind-fd 6 "+sandbox.LauncherPath(rep.Grade)+" "),
				"the launcher is bound at the partial grade only")
			spec := launch.Spec{LandlockABI: rep.LandlockABI, UnixSockets: unix, Seccomp: true, ReportFD: sandbox.LaunchReportFD}.Invocation()
			numbers := strings.Join(spec.Args()[1:7], " ")
			require.Contains(t, joined, " -- "+launcher+" __sandbox-launch "+numbers+" d"+ws+" d/tmp ")
		}
		want, err := sandbox.SeccompBytes(sandbox.SeccompParams{UnixSockets: unix})
		require.NoError(t, err)
		got, err := os.ReadFile(prog)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

// requireBwrapCmd skips when bwrap is unusable, or fails under
// PADDOCK_REQUIRE_BWRAP=1.
func requireBwrapCmd(t *testing.T) {
	t.Helper()
	var out bytes.Buffer
	if err := runProbe(context.Background(), ProbeOptions{}, &GlobalOptions{}, &out); err != nil {
		testenv.Unavailable(t, "bwrap is unusable:\n%s", out.String())
	}
}

// Without --workspace, confine binds the current directory (symlinks
// resolved) and runs the command there, as its help and the README say.
func TestE2EConfineDefaultWorkspace(t *testing.T) {
	t.Parallel()
	requireBwrapCmd(t)
	b := e2etest.Setup(t, "")
	real, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	link := filepath.Join(b.Dir, "link")
	require.NoError(t, os.Symlink(real, link))
	for _, c := range []struct{ mode, bind string }{{"workspace_write", "--bind"}, {"read_only", "--ro-bind"}} {
		out, errOut, code := b.RunIn(link, "", "confine", "--mode", c.mode, "--", "true")
		require.Equal(t, 0, code, errOut)
		// Between the bind and --chdir come the directories paddock hides
		// that exist on this host (the default state directory, say).
		require.Contains(t, out, " "+c.bind+" "+real+" "+real+" ", c.mode)
		require.Contains(t, out, " --chdir "+real+" -- ", out)
		require.True(t, strings.HasSuffix(out, " -- true\n"), out)
	}
	help, _, code := b.Run("confine", "--help")
	require.Equal(t, 0, code)
	require.Contains(t, help, "Without --workspace the workspace is the current directory")
}

// A workspace a worker would refuse (here: one containing the state
// directory) still gets its argv and exit 0, with the worker's reason on
// stderr; an ordinary directory gets no warning.
func TestE2EConfineWarnsWhatAWorkerRefuses(t *testing.T) {
	t.Parallel()
	requireBwrapCmd(t)
	b := e2etest.Setup(t, "")
	dir, err := filepath.EvalSymlinks(b.Dir) // contains b.State
	require.NoError(t, err)
	state, err := filepath.EvalSymlinks(filepath.Dir(b.State))
	require.NoError(t, err)
	state = filepath.Join(state, filepath.Base(b.State))

	out, errOut, code := b.RunIn(dir, "", "confine", "--mode", "workspace_write", "--workspace", ".", "--", "make", "test")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, " --bind "+dir+" "+dir+" ")
	require.Contains(t, out, " --chdir "+dir+" -- ", out)
	require.True(t, strings.HasSuffix(out, " -- make test\n"), out)
	require.Equal(t, "paddock: warning: a paddock worker would not run a job with this workspace: runner: "+dir+" contains "+state+", which paddock keeps out of every job's reach", strings.SplitN(errOut, " (", 2)[0])
	require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)

	out, errOut, code = b.RunIn(dir, "", "--json", "confine", "--", "make", "test")
	require.Equal(t, 0, code, errOut)
	var argv []string
	require.NoError(t, json.Unmarshal([]byte(out), &argv))
	var warn map[string]string
	require.NoError(t, json.Unmarshal([]byte(errOut), &warn), errOut)
	require.Equal(t, "confine_warning", warn["message_type"])
	require.Contains(t, warn["message"], "a paddock worker would not run a job with this workspace: runner: "+dir+" contains "+state+",")

	// read_only writes nothing: no warning.
	_, errOut, code = b.RunIn(dir, "", "confine", "--mode", "read_only", "--", "true")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, errOut)

	plain, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	out, errOut, code = b.RunIn(plain, "", "confine", "--", "make", "test")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, " --bind "+plain+" "+plain+" ")
	require.Empty(t, errOut)
}

// TestE2EConfineShowsTheQueuesPolicy: confine's argv has the queue's
// protected and hidden paths in it, as a worker builds it (the defaults
// with no policy set: a repository's .git/hooks read-only), so that the
// argv run by hand holds as a job does; what the policy's ceilings would
// refuse is warned of.
func TestE2EConfineShowsTheQueuesPolicy(t *testing.T) {
	t.Parallel()
	requireBwrapCmd(t)
	b := e2etest.Setup(t, "")
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "secrets"), 0o755))
	hooks, secrets := filepath.Join(ws, ".git", "hooks"), filepath.Join(ws, "secrets")

	out, errOut, code := b.Run("confine", "--workspace", ws, "--", "true")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, " --ro-bind "+hooks+" "+hooks+" ", "the default protect list")
	require.Empty(t, errOut)

	b.SetPolicy(fmt.Sprintf("hide = [\"@default\", %q]\nprotect = []\n", secrets))
	out, errOut, code = b.Run("confine", "--workspace", ws, "--", "true")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, " --tmpfs "+secrets+" ", "the policy's hide list")
	require.NotContains(t, out, hooks, "the policy emptied the protect list")

	_, errOut, code = b.Run("confine", "--workspace", ws, "--writable", "/etc/cron.d", "--", "true")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, `paddock: warning: the queue's policy would refuse a job asking this: writable: refused by policy (workspace_roots): "/etc/cron.d" is in /etc, a system directory`)
}

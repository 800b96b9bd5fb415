package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/hooks"
	"paddock/sandbox"
)

// TestFenceRefuses: a workspace_write job may not write a tree that holds
// the state directory, the config (even one that does not exist yet) or a
// hook module, nor the state directory except its workspaces; read_only
// jobs and other trees are fine.
func TestFenceRefuses(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	state := filepath.Join(home, "state")
	require.NoError(t, os.MkdirAll(filepath.Join(state, "workspaces", "j1"), 0o700))
	hooksDir := filepath.Join(t.TempDir(), "hooks")
	require.NoError(t, os.MkdirAll(hooksDir, 0o700))
	cfgDir := filepath.Join(t.TempDir(), "cfg")
	require.NoError(t, os.MkdirAll(cfgDir, 0o700))
	missingCfg := filepath.Join(cfgDir, "paddock", "config.toml") // not created
	f := FenceFor(state, Config{Path: missingCfg, Hooks: []HookConfig{{Name: "h", Path: filepath.Join(hooksDir, "h.wasm")}}})
	elsewhere := t.TempDir()

	require.NoError(t, os.MkdirAll(filepath.Join(state, "workspaces", "j2", "sub"), 0o700))
	job := func(mode, ws string, writable ...string) hooks.Job {
		return hooks.Job{ID: "j1", Argv: []string{"true"}, Mode: mode, Workspace: ws, Network: true, Writable: writable}
	}
	for _, tc := range []struct {
		name string
		j    hooks.Job
		want string // "" = allowed
	}{
		{"own workspace", job("workspace_write", filepath.Join(state, "workspaces", "j1")), ""},
		{"elsewhere", job("workspace_write", elsewhere), ""},
		{"read_only over everything", job("read_only", home), ""},
		{"home holds the state", job("workspace_write", home), "contains " + state},
		{"the state itself", job("workspace_write", state), state + " is paddock's state directory, which jobs cannot see"},
		{"all workspaces", job("workspace_write", filepath.Join(state, "workspaces")), "inside paddock's state directory"},
		{"another job's workspace", job("workspace_write", filepath.Join(state, "workspaces", "j2")), "may use only its own default workspace there (this job's own is " + filepath.Join(state, "workspaces", "j1") + ")"},
		{"inside another job's workspace", job("workspace_write", filepath.Join(state, "workspaces", "j2", "sub")), "inside paddock's state directory"},
		{"another job's workspace, read_only", job("read_only", filepath.Join(state, "workspaces", "j2")), "inside paddock's state directory"},
		{"the state, read_only", job("read_only", state), "is paddock's state directory"},
		{"own workspace as a writable root", job("workspace_write", elsewhere, filepath.Join(state, "workspaces", "j1")), ""},
		{"config to be", job("workspace_write", cfgDir), "contains " + missingCfg},
		{"hook module", job("workspace_write", elsewhere, hooksDir), "contains " + filepath.Join(hooksDir, "h.wasm")},
	} {
		err := checkJob(f, tc.j)
		if tc.want == "" {
			// Only the probe may be missing here; the fence let it through.
			if err != nil {
				require.ErrorIs(t, err, sandbox.ErrUnusable, tc.name)
			}
			continue
		}
		require.ErrorContains(t, err, tc.want, tc.name)
	}
}

// checkJob is what a worker does with j before its hooks: build the
// policy with the fence's hidden directories, then pin and check it.
func checkJob(f Fence, j hooks.Job) error { return f.CheckJob(j) }

// TestFenceSymlinksAndDefaults: a state directory given through a symlink
// is protected where the link is too (a job could repoint it), and the
// extra paths (the CLI's default state directory and config) are protected
// like the worker's own.
func TestFenceSymlinksAndDefaults(t *testing.T) {
	t.Parallel()
	realState := t.TempDir()
	home := t.TempDir()
	link := filepath.Join(home, "sd")
	require.NoError(t, os.Symlink(realState, link))
	defaultState := filepath.Join(t.TempDir(), "default-state")
	f := FenceFor(link, Config{}, defaultState)
	ws := func(dir string) hooks.Job {
		return hooks.Job{Argv: []string{"true"}, Mode: "workspace_write", Workspace: dir, Network: true}
	}
	err := checkJob(f, ws(home))
	require.ErrorContains(t, err, "contains "+link, "the link can be repointed from home")
	err = checkJob(f, ws(realState))
	require.ErrorContains(t, err, realState+" is paddock's state directory")
	err = checkJob(f, ws(filepath.Dir(defaultState)))
	require.ErrorContains(t, err, "contains "+defaultState, "the default state directory, not created yet")
}

// TestLoaderSafe: loader variables go to the job through --setenv, never
// into bwrap's own environment; the rest stays in the environment.
func TestLoaderSafe(t *testing.T) {
	t.Parallel()
	argv := []string{"/usr/bin/bwrap", "--ro-bind", "/", "/", "--chdir", "/w", "--", "sh", "-c", "x", "--"}
	env := []string{"PATH=/usr/bin", "LD_PRELOAD=/w/evil.so", "SECRET=s", "GLIBC_TUNABLES=glibc.x=1", "MALLOC_CHECK_=3", "GCONV_PATH=/w"}
	gotArgv, gotEnv := loaderSafe(argv, env)
	require.Equal(t, []string{"PATH=/usr/bin", "SECRET=s"}, gotEnv)
	require.Equal(t, []string{"/usr/bin/bwrap", "--ro-bind", "/", "/", "--chdir", "/w",
		"--setenv", "LD_PRELOAD", "/w/evil.so", "--setenv", "GLIBC_TUNABLES", "glibc.x=1", "--setenv", "MALLOC_CHECK_", "3", "--setenv", "GCONV_PATH", "/w",
		"--", "sh", "-c", "x", "--"}, gotArgv)
	same, sameEnv := loaderSafe(argv, []string{"PATH=/usr/bin"})
	require.Equal(t, argv, same)
	require.Equal(t, []string{"PATH=/usr/bin"}, sameEnv)
}

// TestFenceConfigStateDir: the config's state_dir is protected even when
// the worker was given another state directory.
func TestFenceConfigStateDir(t *testing.T) {
	t.Parallel()
	cfgState := filepath.Join(t.TempDir(), "plain-state")
	f := FenceFor(t.TempDir(), Config{StateDir: cfgState})
	err := checkJob(f, hooks.Job{Argv: []string{"true"}, Mode: "workspace_write", Workspace: filepath.Dir(cfgState), Network: true})
	require.ErrorContains(t, err, "contains "+cfgState)
}

// TestFenceDanglingLink: a protected path reached through a symlink whose
// target does not exist yet is protected at that target (a job could
// create it there).
func TestFenceDanglingLink(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	links := t.TempDir()
	link := filepath.Join(links, "cfglink")
	require.NoError(t, os.Symlink(filepath.Join(ws, "conf"), link)) // dangling
	cfg := filepath.Join(link, "paddock", "config.toml")
	f := FenceFor(t.TempDir(), Config{Path: cfg})
	err := checkJob(f, hooks.Job{Argv: []string{"true"}, Mode: "workspace_write", Workspace: ws, Network: true})
	require.ErrorContains(t, err, "contains "+filepath.Join(ws, "conf", "paddock", "config.toml"))
	require.Equal(t, filepath.Join(ws, "conf", "paddock", "config.toml"), canonicalPrefix(cfg))
	// Relative links and .. resolve like the kernel's.
	require.NoError(t, os.Symlink("../"+filepath.Base(ws)+"/x", filepath.Join(links, "rel")))
	require.Equal(t, filepath.Join(filepath.Dir(links), filepath.Base(ws), "x", "y"), canonicalPrefix(filepath.Join(links, "rel", "y")))
}

// BenchmarkFencePin is the fence's share of a job's start: the policy with
// the hidden directories, and its roots pinned and checked by inode.
func BenchmarkFencePin(b *testing.B) {
	state := filepath.Join(b.TempDir(), "state")
	own := filepath.Join(state, "workspaces", "j1")
	require.NoError(b, os.MkdirAll(own, 0o700))
	cfg := filepath.Join(b.TempDir(), "paddock", "config.toml")
	f := FenceFor(state, Config{Path: cfg}, "/usr/bin/bwrap", "/usr/local/bin/bwrap").WithHidden(filepath.Join(b.TempDir(), "other-state"))
	j := hooks.Job{ID: "j1", Argv: []string{"true"}, Mode: "workspace_write", Workspace: own, Network: true}
	b.ResetTimer()
	for b.Loop() {
		pol, err := f.policy(j)
		if err != nil {
			b.Fatal(err)
		}
		pins, err := f.Pin(pol, j.ID)
		if err != nil {
			b.Fatal(err)
		}
		pins.Close()
	}
}

// The advice of a refusal fixes it: another workspace always; another
// state directory or config only when that is what the workspace holds
// (the paddock binary and bwrap cannot move out of the way).
func TestFenceAdvice(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	state, cfg, bin := filepath.Join(home, "state"), filepath.Join(home, "conf", "config.toml"), filepath.Join(home, "bin", "paddock")
	for _, d := range []string{filepath.Dir(cfg), filepath.Dir(bin)} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	f := FenceFor(state, Config{Path: cfg}, bin)
	for _, tc := range []struct{ ws, advice string }{
		{filepath.Join(home, "bin"), "choose a workspace and writable paths that do not contain it"},
		{filepath.Join(home, "conf"), "choose a workspace and writable paths that do not contain it, or move the config (--config)"},
	} {
		err := checkJob(f, hooks.Job{ID: "j", Argv: []string{"true"}, Mode: "workspace_write", Workspace: tc.ws, Network: true})
		require.Error(t, err, tc.ws)
		require.True(t, strings.HasSuffix(err.Error(), "): "+tc.advice), err.Error())
	}
	require.Equal(t, "choose a workspace and writable paths that do not contain it, or use another state directory (--state-dir)", f.advice(f.stateDir))

	// A $PATH entry before bwrap's: nothing there, but a bwrap put there
	// would run; the advice says so rather than name a missing file.
	early := filepath.Join(home, "early")
	require.NoError(t, os.MkdirAll(early, 0o755))
	f = FenceFor(state, Config{Path: cfg}, filepath.Join(early, "bwrap"))
	err := checkJob(f, hooks.Job{ID: "j", Argv: []string{"true"}, Mode: "workspace_write", Workspace: early, Network: true})
	require.ErrorContains(t, err, "nothing is there now, but its directory comes before bwrap's on $PATH")
}

// TestFenceSandboxInfoShowsProtectAndHide: the hooks' sandbox section
// lists the fence's protected paths as the job's writable roots hold
// them (resolved), the hidden ones, and the network decision; a job's
// own Protect and Hide (a hook's adjustment) add to them.
func TestFenceSandboxInfoShowsProtectAndHide(t *testing.T) {
	t.Parallel()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "Makefile"), nil, 0o644))
	secret, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	f := Fence{}.WithProtect(".git/hooks/")
	j := hooks.Job{ID: "j1", Argv: []string{"true"}, Mode: "workspace_write", Workspace: ws}
	info, err := f.SandboxInfo(j)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(ws, ".git", "hooks")}, info.Protected)
	require.Empty(t, info.Hidden)
	require.False(t, info.Network)

	j.Protect, j.Hide, j.Network = []string{"Makefile"}, []string{secret, "/does/not/exist"}, true
	info, err = f.SandboxInfo(j)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(ws, ".git", "hooks"), filepath.Join(ws, "Makefile")}, info.Protected)
	require.Equal(t, []string{secret}, info.Hidden)
	require.True(t, info.Network)
	require.Contains(t, strings.Join(info.Argv, " "), "--ro-bind "+filepath.Join(ws, "Makefile"))

	j.Mode = "read_only" // nothing to protect: nothing is writable
	info, err = f.SandboxInfo(j)
	require.NoError(t, err)
	require.Empty(t, info.Protected)
}

// TestFenceHidesLiteralMetacharacters: a hide entry whose name holds a
// glob's metacharacters, cfg[prod], is hidden as named, not only read as
// a pattern matching cfgp, cfgr...
func TestFenceHidesLiteralMetacharacters(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	lit := filepath.Join(dir, "cfg[prod]")
	require.NoError(t, os.Mkdir(lit, 0o700))
	f := Fence{}.WithHidePatterns(lit)
	require.Contains(t, f.state().hidden, lit)
}

// TestCollapseMatches: past the cap, the directory holding the most
// matches is hidden in their place first, so one match elsewhere stays
// its own; matches one per directory fold a level up; reaching "/" is
// too many.
func TestCollapseMatches(t *testing.T) {
	t.Parallel()
	var flood []string
	for i := range 300 {
		flood = append(flood, fmt.Sprintf("/w/ws1/f%d.pem", i))
	}
	got, ok := collapseMatches(append(flood, "/w/ws2/cert.pem"), 256)
	require.True(t, ok)
	require.ElementsMatch(t, []string{"/w/ws1", "/w/ws2/cert.pem"}, got)

	var spread []string
	for i := range 300 {
		spread = append(spread, fmt.Sprintf("/w/ws1/d%d/f.pem", i))
	}
	got, ok = collapseMatches(spread, 256)
	require.True(t, ok)
	require.Equal(t, []string{"/w/ws1"}, got)
	got, ok = collapseMatches(append(spread, "/w/ws2/conf/db.key"), 256)
	require.True(t, ok)
	require.ElementsMatch(t, []string{"/w/ws1", "/w/ws2/conf/db.key"}, got, "a lone match elsewhere is not folded with the flood")

	var top []string
	for i := range 300 {
		top = append(top, fmt.Sprintf("/d%d", i))
	}
	_, ok = collapseMatches(top, 256)
	require.False(t, ok)
	few, ok := collapseMatches([]string{"/a/b"}, 256)
	require.True(t, ok)
	require.Equal(t, []string{"/a/b"}, few)
}

// TestGlobStrictFollowsNoLinkBelowItsPattern: below a pattern's first
// metacharacter no symlink is followed (a job's link to /proc or to
// another workspace hides nothing there), and a directory that cannot be
// listed is reported, not skipped.
func TestGlobStrictFollowsNoLinkBelowItsPattern(t *testing.T) {
	t.Parallel()
	base, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	other := filepath.Join(base, "other")
	for _, d := range []string{"ws1/conf", "ws2/conf", "other/conf"} {
		require.NoError(t, os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(base, "ws1/conf/a.key"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(other, "conf/b.key"), nil, 0o600))
	require.NoError(t, os.RemoveAll(filepath.Join(base, "ws2/conf")))
	require.NoError(t, os.Symlink(other, filepath.Join(base, "ws2", "conf")))
	require.NoError(t, os.Symlink(other, filepath.Join(base, "ws1", "conf", "c.key")))
	matches, unreadable := globStrict(filepath.Join(base, "*", "conf", "*.key"))
	require.Equal(t, []string{filepath.Join(base, "other/conf/b.key"), filepath.Join(base, "ws1/conf/a.key")}, matches)
	require.Empty(t, unreadable)
}

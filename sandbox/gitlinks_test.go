package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// gitIn runs git in dir with a configuration of its own (no user or
// system file), and returns its standard output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "protocol.file.allow=always", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s in %s: %s", strings.Join(args, " "), dir, out)
	return string(out)
}

// plantFSMonitor sets core.fsmonitor in the repository dir to a
// program that leaves a marker, and returns a function reporting whether
// the program ran since it was last called.
func plantFSMonitor(t *testing.T, dir string) func() bool {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(t.TempDir(), "fsmonitor")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho ran >> "+marker+"\n"), 0o755))
	gitIn(t, dir, "config", "core.fsmonitor", script)
	return func() bool {
		return os.Remove(marker) == nil
	}
}

// addGitlink adds dir (below top, a repository with a commit) to top's
// index as a submodule entry, as `git update-index --cacheinfo` does.
func addGitlink(t *testing.T, top, rel string) {
	t.Helper()
	head := strings.TrimSpace(gitIn(t, filepath.Join(top, rel), "rev-parse", "HEAD"))
	gitIn(t, top, "update-index", "--add", "--cacheinfo", "160000,"+head+","+rel)
}

// TestSettleGitlinks: once a job has ended, a submodule it made whose
// repository runs a program on the host's `git status` (added to the
// index, or the .git of one not checked out, or one nested in a
// submodule) has its .git moved aside, and git status then runs
// nothing; an index the job left unreadable is moved aside; a submodule
// added the usual way, the user's own submodule with its own fsmonitor,
// and one outside the writable roots are left as they are.
func TestSettleGitlinks(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		unavailable(t, "git is not installed: the repositories are made by it")
	}
	newTop := func(t *testing.T) string {
		top, err := filepath.EvalSymlinks(t.TempDir())
		require.NoError(t, err)
		gitIn(t, top, "init", "-q")
		gitIn(t, top, "commit", "-q", "--allow-empty", "-m", "first")
		return top
	}
	newRepo := func(t *testing.T, dir string) {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		gitIn(t, dir, "init", "-q")
		gitIn(t, dir, "commit", "-q", "--allow-empty", "-m", "sub")
	}
	policy := func(t *testing.T, top string) Policy {
		p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: top, Protect: []string{".git/config", ".git/hooks/"}})
		require.NoError(t, err)
		return p
	}
	status := func(t *testing.T, top string) { gitIn(t, top, "status", "--porcelain") }

	t.Run("made and added to the index", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		p := policy(t, top)
		require.Empty(t, p.AfterCommand("job-0", nil), "nothing made yet (and the index read is remembered)")
		// What the job does.
		sub := filepath.Join(top, "vendor", "lib")
		newRepo(t, sub)
		ran := plantFSMonitor(t, sub)
		addGitlink(t, top, "vendor/lib")
		status(t, top)
		require.True(t, ran(), "without paddock, the host's git status runs the job's program")

		why := p.AfterCommand("job-1", nil)
		t.Log(why)
		require.Contains(t, why, "the submodule "+sub+" in the index of "+filepath.Join(top, ".git")+" leads to a git directory the job could write, "+filepath.Join(sub, ".git"))
		require.Contains(t, why, "core.fsmonitor")
		require.Contains(t, why, filepath.Join(sub, ".git.paddock-created-job-1"))
		require.NoDirExists(t, filepath.Join(sub, ".git"))
		require.DirExists(t, filepath.Join(sub, ".git.paddock-created-job-1"))
		status(t, top)
		require.False(t, ran(), "git status runs nothing of the job's")
		require.Empty(t, p.AfterCommand("job-1", nil), "nothing left to settle")
	})

	t.Run("not checked out", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		other := filepath.Join(t.TempDir(), "other")
		newRepo(t, other)
		gitIn(t, top, "submodule", "add", "-q", other, "mod")
		gitIn(t, top, "commit", "-q", "-m", "mod")
		gitIn(t, top, "submodule", "deinit", "-q", "-f", "mod")
		p := policy(t, top)
		// The job makes the submodule's .git, with a hook git runs when
		// the user updates the submodule.
		mod := filepath.Join(top, "mod")
		gitIn(t, mod, "init", "-q")
		hook := filepath.Join(mod, ".git", "hooks", "post-checkout")
		require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755))
		why := p.AfterCommand("job-2", nil)
		require.Contains(t, why, "the submodule "+mod+" in the index of "+filepath.Join(top, ".git"))
		require.Contains(t, why, "the hook "+hook)
		require.NoDirExists(t, filepath.Join(mod, ".git"))
	})

	t.Run("added the usual way, and one nested in it", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		other := filepath.Join(t.TempDir(), "other")
		newRepo(t, other)
		p := policy(t, top)
		gitIn(t, top, "submodule", "add", "-q", other, "deps/x")
		require.Empty(t, p.AfterCommand("job-3", nil), "a submodule git made itself runs nothing")
		require.FileExists(t, filepath.Join(top, "deps", "x", ".git"))

		inner := filepath.Join(top, "deps", "x", "y")
		newRepo(t, inner)
		ran := plantFSMonitor(t, inner)
		addGitlink(t, filepath.Join(top, "deps", "x"), "y")
		status(t, top)
		require.True(t, ran(), "git status recurses into the nested submodule")
		why := p.AfterCommand("job-3", nil)
		require.Contains(t, why, "the submodule "+inner+" in the index of "+filepath.Join(top, ".git", "modules", "deps", "x"))
		require.FileExists(t, filepath.Join(top, "deps", "x", ".git"), "the outer submodule runs nothing: kept")
		require.NoDirExists(t, filepath.Join(inner, ".git"))
		status(t, top)
		require.False(t, ran())
	})

	t.Run("the user's own submodule", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		other := filepath.Join(t.TempDir(), "other")
		newRepo(t, other)
		gitIn(t, top, "submodule", "add", "-q", other, "mine")
		ran := plantFSMonitor(t, filepath.Join(top, "mine"))
		p := policy(t, top)
		require.Empty(t, p.AfterCommand("job-4", nil), "its config was the user's, and kept as it was")
		status(t, top)
		require.True(t, ran())
	})

	t.Run("an index the job left unreadable", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		p := policy(t, top)
		index := filepath.Join(top, ".git", "index")
		require.NoError(t, os.WriteFile(index, []byte("DIRC\x00\x00\x00\x09junk"), 0o644))
		why := p.AfterCommand("job-5", nil)
		require.Contains(t, why, "paddock cannot read the git index "+index)
		require.NoFileExists(t, index)
		require.FileExists(t, index+".paddock-created-job-5")
	})

	t.Run("a split index", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		gitIn(t, top, "update-index", "--split-index")
		p := policy(t, top)
		require.Empty(t, p.AfterCommand("job-8", nil))
		sub := filepath.Join(top, "lib")
		newRepo(t, sub)
		plantFSMonitor(t, sub)
		addGitlink(t, top, "lib")
		shared, err := filepath.Glob(filepath.Join(top, ".git", "sharedindex.*"))
		require.NoError(t, err)
		require.NotEmpty(t, shared, "git wrote no shared index")
		why := p.AfterCommand("job-8", nil)
		require.Contains(t, why, "the submodule "+sub+" in the index of "+filepath.Join(top, ".git"))
		require.NoDirExists(t, filepath.Join(sub, ".git"))
	})

	t.Run("a sparse directory", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		for _, f := range []string{"in/f", "out/f"} {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(top, f)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(top, f), []byte("x"), 0o644))
		}
		gitIn(t, top, "add", ".")
		gitIn(t, top, "commit", "-q", "-m", "files")
		gitIn(t, top, "sparse-checkout", "init", "--cone", "--sparse-index")
		gitIn(t, top, "sparse-checkout", "set", "in")
		require.NoDirExists(t, filepath.Join(top, "out"))
		p := policy(t, top)
		require.Empty(t, p.AfterCommand("job-7", nil), "the user's sparse checkout is left alone")
		// The job makes the directory git keeps sparse: git would expand
		// it, and enter whatever submodules its tree holds.
		require.NoError(t, os.MkdirAll(filepath.Join(top, "out", "sub", ".git"), 0o755))
		why := p.AfterCommand("job-7", nil)
		require.Contains(t, why, "the job made "+filepath.Join(top, "out")+", a directory the index of "+filepath.Join(top, ".git")+" keeps sparse")
		require.NoDirExists(t, filepath.Join(top, "out"))
		require.DirExists(t, filepath.Join(top, "out.paddock-created-job-7"))
	})

	t.Run("outside the writable roots", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		sub := filepath.Join(top, "theirs")
		newRepo(t, sub)
		ran := plantFSMonitor(t, sub)
		addGitlink(t, top, "theirs")
		ws := filepath.Join(top, "ws")
		require.NoError(t, os.Mkdir(ws, 0o755))
		p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{".git/config", ".git/hooks/"}})
		require.NoError(t, err)
		require.Empty(t, p.AfterCommand("job-6", nil), "a submodule the job could not make is not its doing")
		require.DirExists(t, filepath.Join(sub, ".git"))
		status(t, top)
		require.True(t, ran())
	})
}

// TestGitdirRuns: what makes a submodule's git directory one that runs
// a program or reads configuration from elsewhere, and what does not.
func TestGitdirRuns(t *testing.T) {
	t.Parallel()
	trustedDir := gitTree(t, map[string]string{"config": "[core]\n"})
	for _, c := range []struct {
		name   string
		files  map[string]string
		runs   string // a part of the reason, "" for none
		trusts bool   // trustedDir is trusted
	}{
		{name: "plain", files: map[string]string{"config": "[core]\n\tbare = false\n\tworktree = ../wt\n[remote \"origin\"]\n\turl = /x\n", "hooks/pre-commit.sample": "x", "hooks/sub/": ""}},
		{name: "fsmonitor on, git's daemon", files: map[string]string{"config": "[core]\n\tfsmonitor = true\n"}},
		{name: "fsmonitor hook", files: map[string]string{"config": "[core]\n\tfsmonitor = ./m.sh\n"}, runs: "core.fsmonitor"},
		{name: "hooksPath", files: map[string]string{"config": "[core]\n\thooksPath = /tmp/h\n"}, runs: "core.hookspath"},
		{name: "include", files: map[string]string{"config": "[include]\n\tpath = other\n", "other": "[core]\n"}, runs: "include.path"},
		{name: "worktree elsewhere", files: map[string]string{"config": "[core]\n\tworktree = /\n"}, runs: "core.worktree"},
		{name: "alias", files: map[string]string{"config": "[alias]\n\tst = !sh -c x\n"}, runs: "alias.st"},
		{name: "upload-pack", files: map[string]string{"config": "[remote \"o\"]\n\tuploadpack = /tmp/x\n"}, runs: "remote.o.uploadpack"},
		{name: "git proxy", files: map[string]string{"config": "[core]\n\tgitProxy = proxy\n"}, runs: "core.gitproxy"},
		{name: "ext protocol", files: map[string]string{"config": "[protocol \"ext\"]\n\tallow = always\n"}, runs: "protocol.ext.allow"},
		{name: "config.worktree", files: map[string]string{"config": "[core]\n", "config.worktree": "[core]\n\tpager = less\n"}, runs: "config.worktree line 2: core.pager"},
		{name: "bad config", files: map[string]string{"config": "[core\n"}, runs: "config"},
		{name: "hook", files: map[string]string{"config": "[core]\n", "hooks/post-merge": "#!/bin/sh\n"}, runs: "the hook"},
		{name: "commondir elsewhere", files: map[string]string{"config": "[core]\n", "commondir": "/tmp\n"}, runs: "commondir"},
		{name: "commondir trusted", files: map[string]string{"config": "[core]\n", "commondir": "TRUSTED\n"}, trusts: true},
	} {
		files := map[string]string{}
		for k, v := range c.files {
			files[k] = strings.ReplaceAll(v, "TRUSTED", trustedDir)
		}
		dir := gitTree(t, files)
		wt := gitTree(t, map[string]string{})
		if c.name == "plain" {
			// core.worktree = ../wt names the working tree given.
			require.NoError(t, os.Symlink(wt, filepath.Join(filepath.Dir(dir), "wt")))
		}
		trusted := map[string]bool{}
		if c.trusts {
			trusted[trustedDir] = true
		}
		got := gitdirRuns(dir, wt, trusted)
		if c.runs == "" {
			require.Empty(t, got, c.name)
		} else {
			require.Contains(t, got, c.runs, c.name)
		}
	}
}

// BenchmarkAfterCommandGitlinks: what reading the index after a job
// adds to AfterCommand, in a repository of 10,000 files and 5
// submodules not checked out: with ".git/config" protected (its index
// read) against the same list without it (no repository to read).
func BenchmarkAfterCommandGitlinks(b *testing.B) {
	r := newGitIndexRepo(b)
	r.add(manyPaths(10000-5), []string{"a", "deps/x", "deps/y", "src/module01/sub", "zz"})
	for _, c := range []struct {
		name    string
		protect []string
	}{{"index read", []string{".git/config", ".git/hooks/"}}, {"none", []string{".git/hooks/"}}} {
		b.Run(c.name, func(b *testing.B) {
			p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: r.dir, Protect: c.protect})
			require.NoError(b, err)
			for b.Loop() {
				if why := p.AfterCommand("bench", nil); why != "" {
					b.Fatal(why)
				}
			}
		})
	}
}

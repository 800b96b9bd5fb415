package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
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

// plantFSMonitorIn is plantFSMonitor for the git directory gitdir.
func plantFSMonitorIn(t *testing.T, gitdir string) func() bool {
	t.Helper()
	marker := filepath.Join(t.TempDir(), "ran")
	script := filepath.Join(t.TempDir(), "fsmonitor")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho ran >> "+marker+"\n"), 0o755))
	gitIn(t, filepath.Dir(gitdir), "--git-dir", gitdir, "config", "core.fsmonitor", script)
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
	// addSubmodule adds a submodule at path of top, cloned from a
	// repository of its own, as git submodule add does.
	addSubmodule := func(t *testing.T, top, path string) {
		other := filepath.Join(t.TempDir(), "other")
		newRepo(t, other)
		gitIn(t, top, "submodule", "add", "-q", other, path)
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
		require.Contains(t, why, "the submodule "+sub+" in the index of "+filepath.Join(top, ".git")+" could make git on the host run a program of the job's")
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
		addSubmodule(t, top, "mod")
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
		p := policy(t, top)
		addSubmodule(t, top, "deps/x")
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
		addSubmodule(t, top, "mine")
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

	// What an attack review left in the submodule's place: each a .git
	// git follows to a repository whose fsmonitor runs the job's
	// program, read by paddock as git reads it.
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, top, sub string) (evil string) // returns the repository to arm
	}{
		{"a .git link to a .git file", func(t *testing.T, top, sub string) string {
			evil := filepath.Join(sub, "real")
			newRepo(t, evil)
			require.NoError(t, os.WriteFile(filepath.Join(sub, "pointer"), []byte("gitdir: real/.git\n"), 0o644))
			require.NoError(t, os.Symlink("pointer", filepath.Join(sub, ".git")))
			return evil
		}},
		{"a trailing space", func(t *testing.T, top, sub string) string {
			evil := filepath.Join(sub, "x")
			newRepo(t, evil)
			require.NoError(t, os.Rename(filepath.Join(evil, ".git"), filepath.Join(sub, "g ")))
			require.NoError(t, os.WriteFile(filepath.Join(sub, ".git"), []byte("gitdir: g \n"), 0o644))
			return filepath.Join(sub, "g ")
		}},
		{"a second line", func(t *testing.T, top, sub string) string {
			evil := filepath.Join(sub, "x")
			newRepo(t, evil)
			require.NoError(t, os.Rename(filepath.Join(evil, ".git"), filepath.Join(sub, "a\nb")))
			require.NoError(t, os.WriteFile(filepath.Join(sub, ".git"), []byte("gitdir: a\nb"), 0o644))
			return filepath.Join(sub, "a\nb")
		}},
		{"a link before ..", func(t *testing.T, top, sub string) string {
			evil := filepath.Join(sub, "deep", "x")
			newRepo(t, evil)
			require.NoError(t, os.Rename(filepath.Join(evil, ".git"), filepath.Join(sub, "deep", "g")))
			require.NoError(t, os.Symlink("deep/x", filepath.Join(sub, "link")))
			require.NoError(t, os.WriteFile(filepath.Join(sub, ".git"), []byte("gitdir: link/../g\n"), 0o644))
			return filepath.Join(sub, "deep", "g")
		}},
		{"a git directory elsewhere", func(t *testing.T, top, sub string) string {
			evil := filepath.Join(t.TempDir(), "cache", "evil")
			newRepo(t, evil)
			require.NoError(t, os.WriteFile(filepath.Join(sub, ".git"), []byte("gitdir: "+filepath.Join(evil, ".git")+"\n"), 0o644))
			return "" // benign now: armed later, by another job
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			top := newTop(t)
			p := policy(t, top)
			sub := filepath.Join(top, "evil")
			newRepo(t, sub)
			addGitlink(t, top, "evil")
			require.NoError(t, os.RemoveAll(filepath.Join(sub, ".git")))
			evil := c.plant(t, top, sub)
			var ran func() bool
			if evil != "" {
				gitdir := evil
				if filepath.Base(evil) != "g " && filepath.Base(evil) != "a\nb" && filepath.Base(evil) != "g" {
					gitdir = filepath.Join(evil, ".git")
				}
				ran = plantFSMonitorIn(t, gitdir)
				status(t, top)
				require.True(t, ran(), "without paddock, the host's git status runs the job's program")
			}
			why := p.AfterCommand("job-9", nil)
			require.Contains(t, why, "the submodule "+sub+" in the index of "+filepath.Join(top, ".git")+" could make git on the host run a program of the job's")
			require.NoFileExists(t, filepath.Join(sub, ".git"))
			if ran != nil {
				status(t, top)
				require.False(t, ran())
			}
		})
	}

	t.Run("another working tree's git directory", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		addSubmodule(t, top, "old")
		gitIn(t, top, "commit", "-q", "-m", "old")
		gitIn(t, top, "rm", "-q", "old")
		gitIn(t, top, "commit", "-q", "-m", "no old")
		p := policy(t, top)
		// The job points a new submodule at the git directory the old
		// one left, whose core.worktree still names old/.
		y := filepath.Join(top, "y")
		newRepo(t, y)
		addGitlink(t, top, "y")
		require.NoError(t, os.RemoveAll(filepath.Join(y, ".git")))
		require.NoError(t, os.WriteFile(filepath.Join(y, ".git"), []byte("gitdir: ../.git/modules/old\n"), 0o644))
		why := p.AfterCommand("job-10", nil)
		require.Contains(t, why, "it leads to the git directory "+filepath.Join(top, ".git", "modules", "old")+", which is another working tree's")
		require.NoFileExists(t, filepath.Join(y, ".git"))
	})

	t.Run("git directories the job made below modules", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		addSubmodule(t, top, "lib")
		gitIn(t, top, "commit", "-q", "-m", "lib")
		gitIn(t, top, "submodule", "deinit", "-q", "-f", "lib")
		require.NoError(t, os.RemoveAll(filepath.Join(top, ".git", "modules"))) // as a clone without --recurse-submodules
		benign := filepath.Join(top, "ok")
		newRepo(t, benign)
		addGitlink(t, top, "ok")
		p := policy(t, top)
		// The job makes the git directory git update --init would reuse
		// for lib, one below a submodule of its own, and a link git
		// would follow.
		lib := filepath.Join(top, ".git", "modules", "lib")
		gitIn(t, top, "init", "-q", "--bare", lib)
		gitIn(t, top, "--git-dir", lib, "config", "core.bare", "false")
		plantFSMonitorIn(t, lib)
		inner := filepath.Join(benign, ".git", "modules", "inner")
		gitIn(t, top, "init", "-q", "--bare", inner)
		require.NoError(t, os.WriteFile(filepath.Join(inner, "hooks", "post-checkout"), []byte("#!/bin/sh\n"), 0o755))
		require.NoError(t, os.Symlink("/etc", filepath.Join(top, ".git", "modules", "x")))
		why := p.AfterCommand("job-11", nil)
		require.Contains(t, why, "the job made "+lib+", a submodule's git directory git would use")
		require.Contains(t, why, "core.fsmonitor")
		require.Contains(t, why, "the job made "+inner+", a submodule's git directory git would use")
		require.Contains(t, why, "the job left "+filepath.Join(top, ".git", "modules", "x")+", which stops paddock")
		require.NoDirExists(t, lib)
		require.NoDirExists(t, inner)
		require.NoFileExists(t, filepath.Join(top, ".git", "modules", "x"))
		require.DirExists(t, filepath.Join(top, ".git", "lib.paddock-created-job-11"), "moved out of modules/, where the next job would take it for the user's")
		require.DirExists(t, filepath.Join(benign, ".git"), "the submodule of the job's that runs nothing is kept")
		_, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: top, Protect: []string{".git/config", ".git/hooks/"}})
		require.NoError(t, err, "the next job in the workspace is not refused for what this one left")
	})

	t.Run("a linked worktree", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		addSubmodule(t, top, "lib")
		gitIn(t, top, "commit", "-q", "-m", "lib")
		feature := filepath.Join(top, ".wt", "feature")
		gitIn(t, top, "worktree", "add", "-q", feature)
		gitIn(t, feature, "submodule", "update", "-q", "--init")
		wmod := filepath.Join(top, ".git", "worktrees", "feature", "modules", "lib")
		require.DirExists(t, wmod)
		got := protectedKinds(t, []string{top}, []string{".git/config", ".git/hooks/"})
		require.Equal(t, protectFile, got[filepath.Join(wmod, "config")], "a linked worktree's submodule's config")
		require.Contains(t, got, filepath.Join(wmod, "hooks"))
		p := policy(t, top)
		// The job registers a repository of its own in the linked
		// worktree's index.
		evil := filepath.Join(feature, "evil")
		newRepo(t, evil)
		ran := plantFSMonitor(t, evil)
		addGitlink(t, feature, "evil")
		status(t, feature)
		require.True(t, ran(), "without paddock, git status in the worktree runs the job's program")
		why := p.AfterCommand("job-12", nil)
		require.Contains(t, why, "the submodule "+evil+" in the index of "+filepath.Join(top, ".git", "worktrees", "feature"))
		require.NoDirExists(t, filepath.Join(evil, ".git"))
		status(t, feature)
		require.False(t, ran())
	})

	// What one job leaves for the next job's policy to trust: each is
	// looked at when the first job ends.
	withGlob := func(t *testing.T, top string) Policy {
		p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: top, Protect: []string{".git/config", ".git/hooks/", "*/.git/config", "*/.git/hooks/"}})
		require.NoError(t, err)
		return p
	}
	t.Run("a repository one level down, for the next job", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		p := withGlob(t, top)
		x := filepath.Join(top, "x")
		newRepo(t, x)
		plantFSMonitor(t, x)
		why := p.AfterCommand("job-13", nil)
		require.Contains(t, why, "the job made "+filepath.Join(x, ".git")+", a git directory the next job would take for the user's")
		require.NoDirExists(t, filepath.Join(x, ".git"))
		ok := filepath.Join(top, "ok")
		newRepo(t, ok)
		require.Empty(t, withGlob(t, top).AfterCommand("job-14", nil), "a repository the job makes that runs nothing is its own")
		require.DirExists(t, filepath.Join(ok, ".git"))
	})
	t.Run("a submodule a .gitmodules the job made names, for the next job", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		p := policy(t, top)
		z := filepath.Join(top, "z")
		newRepo(t, z)
		s := filepath.Join(z, "s")
		newRepo(t, s)
		plantFSMonitor(t, s)
		require.NoError(t, os.WriteFile(filepath.Join(z, ".gitmodules"), []byte("[submodule \"s\"]\n\tpath = s\n\turl = x\n"), 0o644))
		addGitlink(t, top, "z")
		why := p.AfterCommand("job-15", nil)
		require.Contains(t, why, "the job made "+filepath.Join(s, ".git")+", a git directory the next job would take for the user's")
		require.NoDirExists(t, filepath.Join(s, ".git"))
	})
	t.Run("a linked worktree's submodule, for the next job", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		p := policy(t, top)
		gitIn(t, top, "worktree", "add", "-q", "wtree")
		d := filepath.Join(top, "d", "s")
		require.NoError(t, os.MkdirAll(d, 0o755))
		sgit := filepath.Join(top, ".git", "worktrees", "wtree", "modules", "s")
		require.NoError(t, os.MkdirAll(filepath.Dir(sgit), 0o755))
		gitIn(t, d, "init", "-q", "--separate-git-dir", sgit)
		gitIn(t, d, "config", "core.worktree", d)
		plantFSMonitorIn(t, sgit)
		why := p.AfterCommand("job-16", nil)
		require.Contains(t, why, "the job made "+sgit+", a git directory the next job would take for the user's")
		require.NoDirExists(t, sgit)
		require.DirExists(t, filepath.Join(top, ".git", "worktrees", "wtree"), "a worktree git made is kept")
		gitIn(t, top, "worktree", "add", "-q", "other")
		require.Empty(t, policy(t, top).AfterCommand("job-17", nil), "a worktree the job adds is its own")
	})
	t.Run("a .git through /proc, or to another job's tree", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		elsewhere := filepath.Join(t.TempDir(), "evil")
		newRepo(t, elsewhere)
		p := withGlob(t, top)
		made := map[string]string{
			"procfile": "gitdir: /proc/self/cwd/evil\n",
			"outside":  "gitdir: " + filepath.Join(elsewhere, ".git") + "\n",
			"nowhere":  "gitdir: " + filepath.Join(t.TempDir(), "later") + "\n",
		}
		for dir, text := range made {
			require.NoError(t, os.MkdirAll(filepath.Join(top, dir), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(top, dir, ".git"), []byte(text), 0o644))
		}
		require.NoError(t, os.MkdirAll(filepath.Join(top, "proclink"), 0o755))
		require.NoError(t, os.Symlink("/proc/self/cwd/evil", filepath.Join(top, "proclink", ".git")))
		why := p.AfterCommand("job-19", nil)
		for _, dir := range []string{"procfile", "outside", "nowhere", "proclink"} {
			require.Contains(t, why, "the job made "+filepath.Join(top, dir, ".git")+", which the next job would follow", dir)
			_, err := os.Lstat(filepath.Join(top, dir, ".git"))
			require.ErrorIs(t, err, os.ErrNotExist, dir)
		}
	})
	t.Run("one git directory for two working trees", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		p := withGlob(t, top)
		g := filepath.Join(top, "G")
		gitIn(t, top, "init", "-q", "--bare", g)
		gitIn(t, top, "--git-dir", g, "config", "core.bare", "false")
		for _, s := range []string{"s1", "s2"} {
			require.NoError(t, os.MkdirAll(filepath.Join(top, s), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(top, s, ".git"), []byte("gitdir: ../G\n"), 0o644))
		}
		why := p.AfterCommand("job-20", nil)
		require.Contains(t, why, "it is the git directory of 2 working trees")
	})
	t.Run("another worktree's index, and another working tree for the user's git directory", func(t *testing.T) {
		t.Parallel()
		repo := newTop(t)
		wsA := filepath.Join(t.TempDir(), "wsA")
		gitIn(t, repo, "worktree", "add", "-q", wsA)
		// A job in wsA (another job's, side by side) leaves an untracked
		// repository there; this job, in repo, registers it in wsA's
		// index, which lives in repo's git directory.
		evil := filepath.Join(wsA, "d", "evil")
		newRepo(t, evil)
		p := policy(t, repo)
		wIndex := filepath.Join(repo, ".git", "worktrees", "wsA", "index")
		head := strings.TrimSpace(gitIn(t, evil, "rev-parse", "HEAD"))
		cmd := exec.Command("git", "update-index", "--add", "--cacheinfo", "160000,"+head+",d/evil")
		cmd.Dir, cmd.Env = wsA, append(os.Environ(), "GIT_INDEX_FILE="+wIndex)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		why := p.AfterCommand("job-21", nil)
		require.Contains(t, why, "the index "+wIndex+" names the submodule "+evil+", outside the job's writable roots")
		require.NoFileExists(t, wIndex)

		// And a .git the job makes that gives repo's git directory a
		// second working tree (whose submodules git would look for there).
		pGlob := withGlob(t, repo)
		x := filepath.Join(repo, "x")
		require.NoError(t, os.Mkdir(x, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(x, ".git"), []byte("gitdir: "+filepath.Join(repo, ".git")+"\n"), 0o644))
		why = pGlob.AfterCommand("job-22", nil)
		require.Contains(t, why, "it gives the git directory "+filepath.Join(repo, ".git")+", protected when the job started, another working tree")
		require.NoFileExists(t, filepath.Join(x, ".git"))
	})
	t.Run("the workspace's own new repository is the job's", func(t *testing.T) {
		t.Parallel()
		ws, err := filepath.EvalSymlinks(t.TempDir())
		require.NoError(t, err)
		p := policy(t, ws)
		gitIn(t, ws, "init", "-q")
		gitIn(t, ws, "config", "core.pager", "less")
		gitIn(t, ws, "commit", "-q", "--allow-empty", "-m", "first")
		require.Empty(t, p.AfterCommand("job-23", nil), "its history is not moved aside")
		require.DirExists(t, filepath.Join(ws, ".git"))
	})
	t.Run("what would refuse the next job", func(t *testing.T) {
		t.Parallel()
		top := newTop(t)
		p := withGlob(t, top)
		x := filepath.Join(top, "x", ".git")
		require.NoError(t, os.MkdirAll(x, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(x, "config"), []byte("[\n"), 0o644))
		why := p.AfterCommand("job-18", nil)
		require.Contains(t, why, "the next job in it will be refused until what this names is removed")
		require.Contains(t, why, filepath.Join(x, "config"))
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

// TestSubmoduleRuns: a git directory the job made passes only with
// what git writes for a submodule (an allow-list of keys, git's sample
// hooks); every other key, a hook, a file git reads beside the config,
// or a hooks directory that is a link or a FIFO (answered at once, not
// waited on) makes it one that may run a program.
func TestSubmoduleRuns(t *testing.T) {
	t.Parallel()
	wt := gitTree(t, map[string]string{})
	const plain = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n\tworktree = WT\n" +
		"[remote \"origin\"]\n\turl = /srv/x.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n" +
		"[submodule \"deps/y\"]\n\turl = /srv/y.git\n\tactive = true\n[submodule]\n\tactive = .\n[user]\n\tname = a\n"
	for _, c := range []struct {
		name  string
		files map[string]string
		runs  string // a part of the reason, "" for none
		fifo  bool   // hooks is a FIFO
	}{
		{name: "as git makes it", files: map[string]string{"config": plain, "hooks/pre-commit.sample": "x"}},
		{name: "sha256", files: map[string]string{"config": "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n"}},
		{name: "a partial clone, no tags", files: map[string]string{"config": "[core]\n\trepositoryformatversion = 1\n\tautocrlf = input\n[extensions]\n\tpartialclone = origin\n[remote \"origin\"]\n\turl = /srv/x.git\n\tpromisor = true\n\tpartialclonefilter = blob:none\n\ttagopt = --no-tags\n[pull]\n\trebase = true\n"}},
		{name: "ext as a branch's remote", files: map[string]string{"config": "[branch \"main\"]\n\tremote = ext::sh -c x\n"}, runs: "a transport that runs a command"},
		{name: "remotes file", files: map[string]string{"config": "[core]\n", "remotes/origin": "URL: ext::sh -c x\n"}, runs: "remotes exists"},
		{name: "fsmonitor", files: map[string]string{"config": "[core]\n\tfsmonitor = ./m.sh\n"}, runs: "core.fsmonitor"},
		{name: "fsmonitor on, all the same", files: map[string]string{"config": "[core]\n\tfsmonitor = true\n"}, runs: "core.fsmonitor"},
		{name: "hooksPath", files: map[string]string{"config": "[core]\n\thooksPath = /tmp/h\n"}, runs: "core.hookspath"},
		{name: "include", files: map[string]string{"config": "[include]\n\tpath = other\n"}, runs: "include.path"},
		{name: "worktree elsewhere", files: map[string]string{"config": "[core]\n\tworktree = /\n"}, runs: "core.worktree"},
		{name: "alias", files: map[string]string{"config": "[alias]\n\tst = !sh -c x\n"}, runs: "alias.st"},
		{name: "upload-pack", files: map[string]string{"config": "[remote \"o\"]\n\tuploadpack = /tmp/x\n"}, runs: "remote.o.uploadpack"},
		{name: "ext allowed for the user", files: map[string]string{"config": "[protocol \"ext\"]\n\tallow = user\n"}, runs: "protocol.ext.allow"},
		{name: "alternate refs command", files: map[string]string{"config": "[core]\n\talternateRefsCommand = x\n"}, runs: "core.alternaterefscommand"},
		{name: "ext url", files: map[string]string{"config": "[remote \"o\"]\n\turl = ext::sh -c x\n"}, runs: "a transport that runs a command"},
		{name: "bare", files: map[string]string{"config": "[core]\n\tbare = true\n"}, runs: "core.bare"},
		{name: "other extension", files: map[string]string{"config": "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tworktreeConfig = true\n"}, runs: "extensions.worktreeconfig"},
		{name: "format version", files: map[string]string{"config": "[core]\n\trepositoryformatversion = 2\n"}, runs: "core.repositoryformatversion"},
		{name: "remote key without a remote", files: map[string]string{"config": "[remote]\n\turl = x\n"}, runs: "remote.url"},
		{name: "config.worktree", files: map[string]string{"config": "[core]\n", "config.worktree": "[core]\n"}, runs: "config.worktree exists"},
		{name: "commondir", files: map[string]string{"config": "[core]\n", "commondir": "../..\n"}, runs: "commondir exists"},
		{name: "bad config", files: map[string]string{"config": "[core\n"}, runs: "an unclosed section header"},
		{name: "no config", files: map[string]string{"HEAD": "x"}, runs: "has no config"},
		{name: "hook", files: map[string]string{"config": "[core]\n", "hooks/post-merge": "#!/bin/sh\n"}, runs: "the hook"},
		{name: "hooks a FIFO", files: map[string]string{"config": "[core]\n"}, fifo: true, runs: "hooks is not a directory"},
	} {
		files := map[string]string{}
		for k, v := range c.files {
			files[k] = strings.ReplaceAll(v, "WT", wt)
		}
		dir := gitTree(t, files)
		if c.fifo {
			require.NoError(t, unix.Mkfifo(filepath.Join(dir, "hooks"), 0o644))
		}
		done := make(chan string, 1)
		go func() { done <- submoduleRuns(dir, wt, "") }()
		var got string
		select {
		case got = <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%s: submoduleRuns has not returned after a minute: it blocks", c.name)
		}
		if c.runs == "" {
			require.Empty(t, got, c.name)
		} else {
			require.Contains(t, got, c.runs, c.name)
		}
	}
	// A hooks directory that is a link, and a sample that is one.
	dir := gitTree(t, map[string]string{"config": "[core]\n", "real/": ""})
	require.NoError(t, os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "hooks")))
	require.Contains(t, submoduleRuns(dir, wt, ""), "hooks is not a directory paddock can list")
	dir = gitTree(t, map[string]string{"config": "[core]\n", "hooks/": "", "x": "#!/bin/sh\n"})
	require.NoError(t, os.Symlink(filepath.Join(dir, "x"), filepath.Join(dir, "hooks", "pre-commit.sample")))
	require.Contains(t, submoduleRuns(dir, wt, ""), "the hook")
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

// TestIndexCacheBudget: an index larger than what is left of a job's
// budget is refused before it is read, and what is read is taken from
// the budget; an index the cache answers (the same file, through a hard
// link too) costs nothing of it.
func TestIndexCacheBudget(t *testing.T) {
	t.Parallel()
	r := newGitIndexRepo(t)
	r.add(manyPaths(100), []string{"sub"})
	size := int64(len(r.index()))
	// Linked first: a new link changes the file's change time.
	other := filepath.Join(t.TempDir(), "index")
	require.NoError(t, os.Link(r.indexPath(), other))
	cache := &indexCache{entries: map[indexID][]string{}}
	budget := size - 1
	_, err := cache.read(r.gitdir(), r.indexPath(), 20, &budget)
	require.ErrorContains(t, err, "more than paddock reads")
	require.Equal(t, size-1, budget, "nothing taken for what was not read")
	budget = size
	links, err := cache.read(r.gitdir(), r.indexPath(), 20, &budget)
	require.NoError(t, err)
	require.Equal(t, []string{"sub"}, links)
	require.Zero(t, budget)
	links, err = cache.read(r.gitdir(), other, 20, &budget)
	require.NoError(t, err, "a hard link of a file read is answered by the cache")
	require.Equal(t, []string{"sub"}, links)
}

// TestReadGitPointer: a gitdir or commondir file read as git reads it
// (setup.c): the prefix required, only the final line ends dropped, a
// NUL ending the value, nothing else trimmed; and joined without being
// cleaned.
func TestReadGitPointer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for text, want := range map[string]string{
		"gitdir: x\n":      "x",
		"gitdir: x\r\n\n":  "x",
		"gitdir: x \n":     "x ",
		"gitdir:  x":       " x",
		"gitdir: a\nb\n":   "a\nb",
		"gitdir: a\x00b\n": "a",
		"gitdir:x\n":       "",
		" gitdir: x\n":     "",
		"gitdir: \n":       "",
	} {
		f := filepath.Join(dir, "f")
		require.NoError(t, os.WriteFile(f, []byte(text), 0o644))
		got, ok := readGitdir(f)
		require.Equal(t, want != "", ok, "%q", text)
		require.Equal(t, want, got, "%q", text)
	}
	require.Equal(t, "/a/link/../g", joinGitPath("/a", "link/../g"))
	require.Equal(t, "/abs", joinGitPath("/a", "/abs"))
}

// TestResolveProtectIndexOnlySubmodule: a repository registered in the
// index alone (git add of an embedded repository, no .gitmodules) is
// protected like a submodule .gitmodules names: its config and hooks
// are read-only for the job, and its git directory is trusted.
func TestResolveProtectIndexOnlySubmodule(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		unavailable(t, "git is not installed: the repositories are made by it")
	}
	top, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	gitIn(t, top, "init", "-q")
	sub := filepath.Join(top, "vendor", "x")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	gitIn(t, sub, "init", "-q")
	gitIn(t, sub, "commit", "-q", "--allow-empty", "-m", "x")
	addGitlink(t, top, "vendor/x")
	got := protectedKinds(t, []string{top}, []string{".git/config", ".git/hooks/"})
	require.Equal(t, protectFile, got[filepath.Join(sub, ".git", "config")], "%v", got)
	require.Contains(t, got, filepath.Join(sub, ".git", "hooks"))
	_, _, repos, err := resolveProtect([]string{top}, []string{".git/config", ".git/hooks/"})
	require.NoError(t, err)
	require.True(t, repos.trusted[filepath.Join(sub, ".git")][sub], "trusted, with its working tree")
}

// TestIndexCacheBudgetSplit: a split index costs the budget its shared
// file as well, each time it is read (it is never cached).
func TestIndexCacheBudgetSplit(t *testing.T) {
	t.Parallel()
	r := newGitIndexRepo(t)
	r.add(manyPaths(100), []string{"sub"})
	r.git("update-index", "--split-index")
	shared, err := filepath.Glob(filepath.Join(r.gitdir(), "sharedindex.*"))
	require.NoError(t, err)
	require.Len(t, shared, 1)
	fi, err := os.Stat(shared[0])
	require.NoError(t, err)
	cost := int64(len(r.index())) + fi.Size()
	cache := &indexCache{entries: map[indexID][]string{}}
	budget := 2 * cost
	for range 2 {
		links, err := cache.read(r.gitdir(), r.indexPath(), 20, &budget)
		require.NoError(t, err)
		require.Equal(t, []string{"sub"}, links)
	}
	require.Zero(t, budget, "the index and its shared file, twice")
	_, err = cache.read(r.gitdir(), r.indexPath(), 20, &budget)
	require.ErrorContains(t, err, "more than paddock reads")
}

// TestReadGitlinksRefusesProcLinks: an index that is a link through
// /proc/self leads git (in the repository) and paddock (in the worker)
// to different files: it is refused, not read as the worker's.
func TestReadGitlinksRefusesProcLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	index := filepath.Join(dir, "index")
	require.NoError(t, os.Symlink("/proc/self/cwd/index", index))
	_, err := readGitlinks(dir, index, 20)
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, "/proc")
}

// TestSettleNewTrustLooksAsDeepAsTheList: a job that started with no
// repository in reach and left one two levels down, where an entry of
// the list reaches, is looked at; the cheap look for a .git near the
// roots is skipped only for lists that reach no deeper than it.
func TestSettleNewTrustLooksAsDeepAsTheList(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		unavailable(t, "git is not installed: the repositories are made by it")
	}
	require.False(t, reachesDeep(".git/config"))
	require.False(t, reachesDeep("*/.git/config"))
	require.False(t, reachesDeep("*/*/.git/hooks/"), "not a config entry")
	require.True(t, reachesDeep("*/*/.git/config"))
	require.True(t, reachesDeep("/srv/repo/.git/config"))
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{".git/config", "*/.git/config", "*/*/.git/config"}})
	require.NoError(t, err)
	deep := filepath.Join(ws, "a", "b")
	require.NoError(t, os.MkdirAll(deep, 0o755))
	gitIn(t, deep, "init", "-q")
	gitIn(t, deep, "config", "core.fsmonitor", "./m.sh")
	require.Contains(t, p.AfterCommand("job-24", nil), "the job made "+filepath.Join(deep, ".git")+", a git directory the next job would take for the user's")
}

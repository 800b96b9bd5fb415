package e2etest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// protectAttack is a job's script that tries every way it knows to
// change what git runs from the repository at the workspace, printing a
// marker for each that worked: write the hook, create a new one, remove
// it, rename the hooks directory or the real git directory (%[2]s, as
// git finds it) away and put its own in place, rewrite the config; it
// prints what it can read of the hook, so the test knows the sandbox
// showed the repository at all; and last (with %[3]s "check-dotgit") it
// renames or rewrites the workspace's .git.
const protectAttack = `
cd %[1]q
G=%[2]q
echo pwned >> $G/hooks/pre-commit 2>/dev/null && echo WROTE-hook
echo pwned > $G/hooks/post-checkout 2>/dev/null && echo CREATED-hook
rm $G/hooks/pre-commit 2>/dev/null && echo REMOVED-hook
mv $G/hooks $G/hooks-away 2>/dev/null && echo RENAMED-hooks
mkdir -p $G/hooks 2>/dev/null; echo pwned > $G/hooks/pre-commit 2>/dev/null
real=$(cd $G && pwd -P)
mv "$real" "$real-away" 2>/dev/null && echo RENAMED-gitdir
echo '[core] hooksPath = /x' >> $G/config 2>/dev/null && echo WROTE-config
echo "hook=[$(cat $G/hooks/pre-commit 2>&1)]"
if [ %[3]q = check-dotgit ]; then
	mv .git .git-away 2>/dev/null && echo RENAMED-dotgit
	echo 'gitdir: /x' > .git 2>/dev/null && echo WROTE-dotgit
fi
true
`

// TestE2EProtectedGitHooks: with no policy set, the default protect list
// keeps a repository's .git/hooks and .git/config read-only inside a
// workspace_write job's workspace, at both grades, with .git a directory,
// a symlink to the real one elsewhere in the workspace, and a "gitdir:"
// file (a linked worktree's) naming one in a writable root: the hook
// cannot be written, created, removed, nor replaced by renaming
// .git/hooks, the real .git directory or the workspace's .git away (a
// symlinked .git, which no mount can pin, is put back after the job and
// the attempt denied). A policy that protects nothing lets the same job
// through, so the checks can fail.
func TestE2EProtectedGitHooks(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		// One bundle for the three layouts: no subtests (the bundle
		// fails its own test).
		for _, layout := range []string{"dir", "symlink", "gitdir"} {
			func() {
				ws := t.TempDir()
				writable := ""
				gitdir := filepath.Join(ws, ".git")
				switch layout {
				case "symlink":
					gitdir = filepath.Join(ws, "meta", "repo.git")
					require.NoError(t, os.MkdirAll(gitdir, 0o755))
					require.NoError(t, os.Symlink("meta/repo.git", filepath.Join(ws, ".git")))
				case "gitdir":
					// The main repository's gitdir is another writable
					// root; the worktree's .git file points into it.
					writable = t.TempDir()
					main := filepath.Join(writable, ".git")
					gitdir = filepath.Join(main, "worktrees", "wt")
					require.NoError(t, os.MkdirAll(filepath.Join(main, "hooks"), 0o755))
					require.NoError(t, os.MkdirAll(gitdir, 0o755))
					require.NoError(t, os.WriteFile(filepath.Join(gitdir, "commondir"), []byte("../..\n"), 0o644))
					require.NoError(t, os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: "+gitdir+"\n"), 0o644))
					gitdir = main // where git keeps a worktree's hooks and config
					// The worktree's own gitdir has hooks too in this test, so
					// that the script's paths reach something.
					require.NoError(t, os.MkdirAll(filepath.Join(main, "worktrees", "wt", "hooks"), 0o755))
					require.NoError(t, os.WriteFile(filepath.Join(main, "worktrees", "wt", "hooks", "pre-commit"), []byte("#!/bin/sh\necho original\n"), 0o755))
					require.NoError(t, os.WriteFile(filepath.Join(main, "worktrees", "wt", "config"), []byte("[core]\n"), 0o644))
				default:
					require.NoError(t, os.MkdirAll(gitdir, 0o755))
				}
				require.NoError(t, os.MkdirAll(filepath.Join(gitdir, "hooks"), 0o755))
				hook := filepath.Join(gitdir, "hooks", "pre-commit")
				require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\necho original\n"), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(gitdir, "config"), []byte("[core]\n"), 0o644))
				wr := ""
				if writable != "" {
					wr = fmt.Sprintf("writable = [%q]\n", writable)
				}
				job := b.WriteJob("attack-"+layout+".toml", fmt.Sprintf("mode = \"workspace_write\"\nworkspace = %q\n%scommand = '''%s'''\n", ws, wr, fmt.Sprintf(protectAttack, ws, gitdir, "check-dotgit")))

				b.SetPolicy("protect = [\"@default\"]\n") // the defaults
				out, errOut, code := b.Run("run", job)
				require.Contains(t, out, "hook=[#!/bin/sh", "the job saw the hook: %s", out)
				marks := []string{"WROTE-hook", "CREATED-hook", "REMOVED-hook", "RENAMED-hooks", "RENAMED-gitdir", "WROTE-config", "RENAMED-dotgit", "WROTE-dotgit", "pwned"}
				if layout == "symlink" {
					// A symlinked .git is an entry of the workspace that no
					// mount can pin: the job can rename it, which the
					// runner undoes as soon as it sees it, stopping the
					// job and denying the attempt (whether the job got to
					// write a .git of its own first is a race:
					// TestE2EProtectedStoppedWhenCreated).
					require.NotEqual(t, 0, code, "%s\n%s", out, errOut)
					marks = marks[:6]
					target, err := os.Readlink(filepath.Join(ws, ".git"))
					require.NoError(t, err, "the .git link is back")
					require.Equal(t, "meta/repo.git", target)
					denied := false
					for _, l := range b.List() {
						denied = denied || l.State == "denied" && strings.Contains(l.Reason, "replaced the symlink "+filepath.Join(ws, ".git"))
					}
					require.True(t, denied, "the attempt is denied, saying why")
				} else {
					require.Equal(t, 0, code, "%s\n%s", out, errOut)
				}
				for _, m := range marks {
					require.NotContains(t, out, m, "protected path changed (%s)", layout)
				}
				data, err := os.ReadFile(hook)
				require.NoError(t, err)
				require.Equal(t, "#!/bin/sh\necho original\n", string(data))
				cfg, err := os.ReadFile(filepath.Join(gitdir, "config"))
				require.NoError(t, err)
				require.Equal(t, "[core]\n", string(cfg))
				require.NoFileExists(t, filepath.Join(gitdir, "hooks", "post-checkout"))
				if layout == "gitdir" {
					ptr, err := os.ReadFile(filepath.Join(ws, ".git"))
					require.NoError(t, err)
					require.True(t, strings.HasPrefix(string(ptr), "gitdir: "), "the .git file was rewritten: %q", ptr)
				}

				// With nothing protected, the same job changes the hook:
				// the checks above can fail.
				b.SetPolicy("protect = []\n")
				out, errOut, code = b.Run("run", job)
				require.Equal(t, 0, code, "%s\n%s", out, errOut)
				require.Contains(t, out, "WROTE-hook", "unprotected, the hook is writable (%s)", layout)
			}()
		}
	})
}

// TestE2EProtectedMissingAndLinked: a protected path that does not exist
// yet (.git/hooks in a fresh .git) cannot be created, and a symlink that
// the job's workspace holds (left by an earlier job) pointing at a
// protected file elsewhere in its writable roots does not make it
// writable: the file is protected where it really is.
func TestE2EProtectedMissingAndLinked(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		ws := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(ws, ".git"), 0o755))
		other := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(other, ".bashrc"), []byte("# original\n"), 0o644))
		require.NoError(t, os.Symlink(filepath.Join(other, ".bashrc"), filepath.Join(ws, "rc")))
		job := b.WriteJob("missing.toml", fmt.Sprintf(`mode = "workspace_write"
workspace = %[1]q
writable = [%[2]q]
command = '''
cd %[1]q; ls -la . .git .git/hooks; grep -c "" /proc/self/mountinfo; grep " %[1]s" /proc/self/mountinfo
mkdir -p .git/hooks 2>/dev/null
echo pwned > .git/hooks/pre-commit 2>/dev/null && echo CREATED-hook
echo pwned >> rc 2>/dev/null && echo WROTE-through-link
echo pwned >> %[2]s/.bashrc 2>/dev/null && echo WROTE-bashrc
echo done
'''
`, ws, other))
		b.SetPolicy("protect = [\"@default\"]\n")
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "done")
		require.NotContains(t, out, "CREATED-hook")
		require.NotContains(t, out, "WROTE-")
		require.NoFileExists(t, filepath.Join(ws, ".git", "hooks", "pre-commit"))
		data, err := os.ReadFile(filepath.Join(other, ".bashrc"))
		require.NoError(t, err)
		require.Equal(t, "# original\n", string(data))

		b.SetPolicy("protect = []\n")
		out, errOut, code = b.Run("run", job)
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "CREATED-hook")
		require.Contains(t, out, "WROTE-through-link")
	})
}

// TestE2EHookAddsProtect: a hook that adds a protected path (an
// adjustment that narrows the fence, no may_widen needed) makes it
// read-only for the job, beside the policy's own list; the attempt's
// confined argv binds it read-only.
func TestE2EHookAddsProtect(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	b := Setup(t, "")
	wasm := Wat(t, filepath.Join("testdata", "protect-makefile.wat"))
	data, err := os.ReadFile(wasm)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	ws := t.TempDir()
	mk := filepath.Join(ws, "Makefile")
	require.NoError(t, os.WriteFile(mk, []byte("all:\n"), 0o644))
	job := b.WriteJob("mk.toml", fmt.Sprintf("mode = \"workspace_write\"\nworkspace = %q\ncommand = '''\necho pwned >> Makefile 2>/dev/null && echo WROTE-makefile\necho other > other.txt && echo WROTE-other\n'''\n", ws))

	b.SetPolicy(fmt.Sprintf("[[hook]]\nname = \"keep-makefile\"\npath = %q\nsha256 = %q\n", wasm, hex.EncodeToString(sum[:])))
	out, errOut, code := b.Run("run", job)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "WROTE-other", "the rest of the workspace stays writable")
	require.NotContains(t, out, "WROTE-makefile")
	got, err := os.ReadFile(mk)
	require.NoError(t, err)
	require.Equal(t, "all:\n", string(got))
	j := b.Show(b.List()[0].ID)
	argv := strings.Join(j.Attempts[0].ConfinedArgv, " ")
	require.Regexp(t, `--ro-bind-fd \d+ `+regexp.QuoteMeta(mk)+`( |$)`, argv)

	// Without the hook the same job writes it: the check above can fail.
	b.SetPolicy("protect = [\"@default\"]\n")
	out, errOut, code = b.Run("run", job)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "WROTE-makefile")
}

// TestE2EProtectedCreatedAtTheTop: a protected path missing directly in
// the workspace (.bashrc, .gitmodules) gets no mount, so the job can make
// it, but it never outlives the job under its name: the runner moves it
// aside and denies the attempt. The placeholders bwrap made for covered
// paths (an empty .git/hooks) are gone after the job, and a job that
// creates nothing leaves nothing behind.
func TestE2EProtectedCreatedAtTheTop(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		ws := t.TempDir()
		git := exec.Command("git", "init", "-q", ws)
		out, err := git.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.NoError(t, os.RemoveAll(filepath.Join(ws, ".git", "hooks")))
		before, err := os.ReadDir(filepath.Join(ws, ".git"))
		require.NoError(t, err)
		b.SetPolicy("protect = [\"@default\"]\n")
		// git works under the default list: nothing it looks for is an
		// unreadable placeholder.
		quiet := b.WriteJob("quiet.toml", fmt.Sprintf("name = \"quiet\"\nmode = \"workspace_write\"\nworkspace = %q\ncommand = \"echo hi > out.txt && git add -A && git -c user.name=a -c user.email=a@b commit -qm one && echo committed\"\n", ws))
		out2, errOut, code := b.Run("run", quiet)
		require.Equal(t, 0, code, "%s\n%s", out2, errOut)
		require.Contains(t, out2, "committed")
		entries, err := os.ReadDir(ws)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		require.ElementsMatch(t, []string{".git", "out.txt"}, names, "no placeholder left in the workspace")
		after, err := os.ReadDir(filepath.Join(ws, ".git"))
		require.NoError(t, err)
		for _, e := range after {
			require.NotEqual(t, "hooks", e.Name(), "no placeholder left in .git")
		}
		require.GreaterOrEqual(t, len(after), len(before)-1)

		// A commondir would lead git to a config of the job's: the job
		// is stopped as soon as it makes one, which does not outlive it.
		plant := b.WriteJob("plant.toml", fmt.Sprintf("name = \"plant\"\nmode = \"workspace_write\"\nworkspace = %q\ncommand = \"echo c > .git/commondir; sleep 300; echo planted\"\n", ws))
		out3, errOut, code := b.Run("run", plant)
		require.NotEqual(t, 0, code, "%s\n%s", out3, errOut)
		require.NotContains(t, out3, "planted")
		require.NoFileExists(t, filepath.Join(ws, ".git", "commondir"))
		j := b.Show("plant")
		require.Equal(t, "denied", j.State, j.Reason)
		require.Contains(t, j.Reason, "created the protected path "+filepath.Join(ws, ".git", "commondir"))
		require.FileExists(t, filepath.Join(ws, ".git", "commondir.paddock-created-"+j.ID))
	})
}

// TestE2EProtectedStoppedWhenCreated: a job that creates a missing
// protected path in its workspace, in place (.bashrc) or under another
// name renamed into place (.gitmodules), or that replaces a symlinked
// .git, is stopped as soon as it does, and what it made is moved aside
// (the link put back) while it runs: each job then sleeps for 300 s and
// would write a marker, which never appears; the attempt ends denied,
// saying what it did. Nothing bounds how soon but the test's timeout.
func TestE2EProtectedStoppedWhenCreated(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		b.SetPolicy("protect = [\"@default\"]\n")
		cases := []struct {
			name, script string
			setup        func(ws string)
			check        func(ws string, j Job)
		}{{
			name:   "create",
			script: "echo evil > .bashrc",
			check: func(ws string, j Job) {
				require.Contains(t, j.Reason, "the job created the protected path "+filepath.Join(ws, ".bashrc")+"; it is now "+filepath.Join(ws, ".bashrc.paddock-created-"+j.ID))
				require.NoFileExists(t, filepath.Join(ws, ".bashrc"))
				require.FileExists(t, filepath.Join(ws, ".bashrc.paddock-created-"+j.ID))
			},
		}, {
			name:   "rename",
			script: "echo '[submodule]' > m.tmp && mv m.tmp .gitmodules",
			check: func(ws string, j Job) {
				require.Contains(t, j.Reason, "the job created the protected path "+filepath.Join(ws, ".gitmodules"))
				require.NoFileExists(t, filepath.Join(ws, ".gitmodules"))
				data, err := os.ReadFile(filepath.Join(ws, ".gitmodules.paddock-created-"+j.ID))
				require.NoError(t, err)
				require.Equal(t, "[submodule]\n", string(data))
			},
		}, {
			// A directory holding a watched path cannot be swapped for a
			// link to one of the job's own, holding the path: it is kept
			// (a mount point), so the renames fail and the path is made
			// in the watched directory.
			name: "swapped-dir",
			setup: func(ws string) {
				require.NoError(t, os.MkdirAll(filepath.Join(ws, ".ssh"), 0o700))
				require.NoError(t, os.WriteFile(filepath.Join(ws, ".ssh", "authorized_keys"), nil, 0o600))
			},
			script: `cp -a .ssh .d2 && echo evil > .d2/rc && ln -s .d2 .L
python3 -c 'import ctypes, sys; sys.exit(ctypes.CDLL(None).renameat2(-100, b".L", -100, b".ssh", 2) != 0)' && echo EXCHANGED
mv -T .ssh .ssh-away 2>/dev/null && echo MOVED
echo evil > .ssh/rc`,
			check: func(ws string, j Job) {
				fi, err := os.Lstat(filepath.Join(ws, ".ssh"))
				require.NoError(t, err)
				require.True(t, fi.IsDir(), ".ssh is still the directory, not the job's link")
				require.NoFileExists(t, filepath.Join(ws, ".ssh", "rc"))
				require.Contains(t, j.Reason, "the job created the protected path "+filepath.Join(ws, ".ssh", "rc"))
			},
		}, {
			// A protected path whose parent is missing too: followed
			// through the directories the job makes.
			name:   "missing-parent",
			script: `mkdir -p .config/git && printf '[core]\n\tfsmonitor = true\n' > .config/git/config`,
			check: func(ws string, j Job) {
				require.Contains(t, j.Reason, "the job created the protected path "+filepath.Join(ws, ".config", "git"))
				require.NoDirExists(t, filepath.Join(ws, ".config", "git"))
			},
		}, {
			// A job running as the worker's user may take away its own
			// directories' permissions: the worker gives them back to
			// look (as root, it needs none).
			name:   "unsearchable",
			script: `mkdir -p .t/git .t/systemd/user && echo '[core]' > .t/git/config && echo x > .t/systemd/user/e.service && chmod 000 .t && mv .t .config; echo evil > .bashrc; chmod 000 .`,
			check: func(ws string, j Job) {
				require.NoFileExists(t, filepath.Join(ws, ".bashrc"))
				require.NoDirExists(t, filepath.Join(ws, ".config", "git"))
				require.NoDirExists(t, filepath.Join(ws, ".config", "systemd", "user"))
				require.Contains(t, j.Reason, filepath.Join(ws, ".config", "git"))
			},
		}, {
			name: "link",
			setup: func(ws string) {
				require.NoError(t, os.MkdirAll(filepath.Join(ws, "meta", "repo.git", "hooks"), 0o755))
				require.NoError(t, os.Symlink("meta/repo.git", filepath.Join(ws, ".git")))
			},
			// The link may be back before mkdir runs: then mkdir fails.
			script: "mv .git .git-away; mkdir .git",
			check: func(ws string, j Job) {
				require.Contains(t, j.Reason, "the job replaced the symlink "+filepath.Join(ws, ".git"))
				target, err := os.Readlink(filepath.Join(ws, ".git"))
				require.NoError(t, err, "the .git link is back")
				require.Equal(t, "meta/repo.git", target)
			},
		}}
		for _, c := range cases {
			ws := t.TempDir()
			if c.setup != nil {
				c.setup(ws)
			}
			job := b.WriteJob(c.name+".toml", fmt.Sprintf("name = %q\nmode = \"workspace_write\"\nworkspace = %q\ntimeout = \"10m\"\ncommand = '''\n%s\nsleep 300\necho late > marker\n'''\n", c.name, ws, c.script))
			out, errOut, code := b.Run("run", job)
			require.NotEqual(t, 0, code, "%s: %s\n%s", c.name, out, errOut)
			j := b.Show(c.name)
			require.Equal(t, "denied", j.State, "%s: %s", c.name, j.Reason)
			require.Contains(t, j.Reason, "paddock stopped the job as soon as it did", c.name)
			require.NoFileExists(t, filepath.Join(ws, "marker"), c.name)
			c.check(ws, j)
		}
	})
}

// TestE2EProtectedLinkRace: one job swaps a symlinked .git between the
// real git directory and a decoy as fast as it can, while jobs beside it
// (worker -c 2) try to write the real directory's hook: half of them in
// the same workspace, half in the repository nested inside it (roots that
// overlap). Jobs writing overlapping trees hold their roots' locks from
// before they resolve their protected paths until the link is checked
// after them: no writer resolves while the swapper runs, so none protects
// the decoy instead or records the decoy as the link to put back, and the
// hook is never written.
func TestE2EProtectedLinkRace(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	b := Setup(t, "")
	b.SetPolicy("protect = [\"@default\", \"*/.git/hooks/\", \"*/.git/config\"]\n")
	ws := t.TempDir()
	repo := filepath.Join(ws, "repo")
	for _, d := range []string{"real.git/hooks", "decoy/hooks"} {
		require.NoError(t, os.MkdirAll(filepath.Join(repo, d), 0o755))
	}
	hook := filepath.Join(repo, "real.git", "hooks", "pre-commit")
	require.NoError(t, os.WriteFile(hook, []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.Symlink("real.git", filepath.Join(repo, ".git")))

	const writers = 8
	var jobs strings.Builder
	fmt.Fprintf(&jobs, "[defaults]\nmode = \"workspace_write\"\nworkspace = %q\n", ws)
	fmt.Fprintf(&jobs, `[[job]]
name = "swapper"
command = '''
cd repo
end=$(( $(date +%%s) + 3 ))
while [ $(date +%%s) -lt $end ]; do
	ln -sfn decoy .git.new && mv -T .git.new .git
	ln -sfn real.git .git.new && mv -T .git.new .git
done
'''
`)
	for i := range writers {
		w := ws
		if i%2 == 1 {
			w = repo
		}
		// Due a second later: claimed while the swapper runs.
		fmt.Fprintf(&jobs, "[[job]]\nname = \"writer-%d\"\ndelay = \"1s\"\nworkspace = %q\ncommand = '''\necho pwned >> %s 2>/dev/null && echo WROTE-hook\ntrue\n'''\n", i, w, hook)
	}
	b.Submit(b.WriteJob("race.toml", jobs.String()))
	// The swapper is denied when the link it left is not the one it found
	// (exit status 1); one that ends with the same text at the same inode
	// number (file systems reuse them) left nothing to undo.
	out, errOut, code := b.Run("worker", "--drain", "-c", "2")
	require.Contains(t, []int{0, 1}, code, "%s\n%s", out, errOut)
	data, err := os.ReadFile(hook)
	require.NoError(t, err)
	require.Equal(t, "#!/bin/sh\n", string(data), "a writer wrote the real hook")
	for _, j := range b.List() {
		if j.Name != "swapper" {
			require.Equal(t, "succeeded", j.State, "%s: %s", j.Name, j.Reason)
		}
	}
	target, err := os.Readlink(filepath.Join(repo, ".git"))
	require.NoError(t, err)
	require.Equal(t, "real.git", target)

}

// TestE2EProtectedAcrossJobs: a protected path is pinned by a mount in
// its own job's namespace only, and another job writing the same tree
// could remove it (the kernel then detaches the first job's mount), or
// have the runner's clean-up remove a placeholder the first relies on.
// Jobs writing overlapping trees therefore run one after the other: here
// a benign job in a repository without .git/hooks (whose empty
// placeholder the runner removes after it) and a hostile one that waits
// for that removal to create the hook. The hook is never created. Jobs
// in sibling workspaces still run side by side: each records when it
// started and ended.
func TestE2EProtectedAcrossJobs(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	b := Setup(t, "")
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".git"), 0o755))
	b.Submit(b.WriteJob("two.toml", fmt.Sprintf(`[defaults]
mode = "workspace_write"
workspace = %q
[[job]]
name = "benign"
command = ["sleep", "3"]
[[job]]
name = "hostile"
command = '''
sleep 1; mkdir -p .git/hooks/x 2>/dev/null && echo CREATED-early
sleep 4; mkdir -p .git/hooks 2>/dev/null; echo pwned > .git/hooks/pre-commit 2>/dev/null && echo CREATED-hook
true
'''
`, ws)))
	out, errOut, code := b.Run("worker", "--drain", "-c", "2")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Contains(t, errOut, "msg=waiting", "the worker says a job waits")
	require.Contains(t, errOut, "another job writes "+ws)
	require.NoFileExists(t, filepath.Join(ws, ".git", "hooks", "pre-commit"))
	require.NoDirExists(t, filepath.Join(ws, ".git", "hooks", "x"))

	// Jobs in sibling workspaces run side by side: each waits (up to a
	// minute) for the other's start mark, which it can only see if the
	// other started while it ran. Not under /tmp, which a job sees as a
	// tmpfs of its own.
	base, err := os.MkdirTemp("/var/tmp", "paddock-side-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	var two strings.Builder
	for i := range 2 {
		dir := filepath.Join(base, fmt.Sprint(i))
		other := filepath.Join(base, fmt.Sprint(1-i), "start")
		require.NoError(t, os.MkdirAll(filepath.Join(dir, ".git", "hooks"), 0o755))
		fmt.Fprintf(&two, "[[job]]\nname = \"side-%d\"\nmode = \"workspace_write\"\nworkspace = %q\ncommand = '''\n"+
			"touch start; i=0\nwhile [ ! -e %q ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n[ -e %q ] && touch saw\ntrue\n'''\n",
			i, dir, other, other)
	}
	b.Submit(b.WriteJob("side.toml", two.String()))
	out, errOut, code = b.Run("worker", "--drain", "-c", "2")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	for i := range 2 {
		require.FileExists(t, filepath.Join(base, fmt.Sprint(i), "saw"), "jobs in sibling workspaces ran one after the other")
	}
}

// TestE2EWidenedJobTakesTheRootLocks: a read_only job that a may_widen
// hook makes workspace_write takes its roots' locks like any writing job:
// it and a job writing the same workspace run one after the other,
// whichever starts first.
func TestE2EWidenedJobTakesTheRootLocks(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	b := Setup(t, "")
	wasm := Wat(t, filepath.Join("testdata", "widen-write.wat"))
	data, err := os.ReadFile(wasm)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	b.SetPolicy(fmt.Sprintf("[[hook]]\nname = \"widen\"\npath = %q\nsha256 = %q\nmay_widen = true\n", wasm, hex.EncodeToString(sum[:])))
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "real.git", "hooks"), 0o755))
	require.NoError(t, os.Symlink("real.git", filepath.Join(ws, ".git")))
	b.Submit(b.WriteJob("two.toml", fmt.Sprintf(`[defaults]
workspace = %q
[[job]]
name = "linked"
mode = "workspace_write"
command = '''
date +%%s.%%N > linked-start; sleep 2; date +%%s.%%N > linked-end
'''
[[job]]
name = "widened"
mode = "read_only"
command = '''
date +%%s.%%N > widened-start; sleep 1; date +%%s.%%N > widened-end
'''
`, ws)))
	out, errOut, code := b.Run("worker", "--drain", "-c", "2")
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	at := func(name string) float64 {
		data, err := os.ReadFile(filepath.Join(ws, name))
		require.NoError(t, err, "%s\n%s", out, errOut)
		var f float64
		_, err = fmt.Sscan(string(data), &f)
		require.NoError(t, err)
		return f
	}
	require.GreaterOrEqual(t, max(at("widened-start"), at("linked-start")), min(at("widened-end"), at("linked-end")),
		"the widened job ran beside the linked one")
}

// TestE2EProtectedUserConfig: in a workspace that is a home directory,
// git's user config (whose core.fsmonitor git runs in every repository)
// and a shell's exit file stay read-only under the default list; with
// protect = [] the same job writes them, so the check can fail.
func TestE2EProtectedUserConfig(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	b := Setup(t, "")
	home := t.TempDir()
	for _, f := range []string{".gitconfig", ".bash_logout", ".config/git/config"} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(home, f)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(home, f), []byte("# mine\n"), 0o644))
	}
	job := b.WriteJob("home.toml", fmt.Sprintf(`mode = "workspace_write"
workspace = %q
command = '''
printf '[core]\n\tfsmonitor = "echo pwned"\n' >> .gitconfig 2>/dev/null && echo WROTE-gitconfig
echo pwned >> .config/git/config 2>/dev/null && echo WROTE-xdg
echo pwned >> .bash_logout 2>/dev/null && echo WROTE-logout
true
'''
`, home))
	out, errOut, code := b.Run("run", job)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.NotContains(t, out, "WROTE-")
	requireMine(t, home, ".gitconfig", ".bash_logout", ".config/git/config")
	b.SetPolicy("protect = []\n")
	out, errOut, code = b.Run("run", job)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "WROTE-gitconfig")
	require.Contains(t, out, "WROTE-xdg")
}

// TestE2EProtectedSessionFiles: in a workspace that is a home directory,
// what sshd and a login read under the default list stay read-only: a
// second authorized_keys file (sshd reads .ssh/authorized_keys2 by
// default), a user service's environment (.config/environment.d), the
// user manager's configuration and units (.config/systemd/user.conf,
// .local/share/systemd/user drop-ins), a program on $PATH (.local/bin)
// and a .pth file Python runs (.local/lib). With protect = [] the same job
// writes them, so the check can fail.
func TestE2EProtectedSessionFiles(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	b := Setup(t, "")
	home := t.TempDir()
	for _, d := range []string{".ssh", ".config/environment.d", ".config/systemd", ".local/share/systemd/user", ".local/bin", ".local/lib/python3.11/site-packages"} {
		require.NoError(t, os.MkdirAll(filepath.Join(home, d), 0o755))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".cargo"), 0o755))
	for _, f := range []string{".ssh/authorized_keys2", ".config/systemd/user.conf", ".vimrc", ".npmrc", ".cargo/config.toml"} {
		require.NoError(t, os.WriteFile(filepath.Join(home, f), []byte("# mine\n"), 0o644))
	}
	job := b.WriteJob("session.toml", fmt.Sprintf(`mode = "workspace_write"
workspace = %q
command = '''
echo ssh-ed25519 AAAA attacker >> .ssh/authorized_keys2 2>/dev/null && echo WROTE-keys2
echo LD_PRELOAD=/tmp/x.so > .config/environment.d/50-x.conf 2>/dev/null && echo WROTE-envd
echo DefaultEnvironment=LD_PRELOAD=/tmp/x.so >> .config/systemd/user.conf 2>/dev/null && echo WROTE-userconf
mkdir -p .local/share/systemd/user/dbus.service.d 2>/dev/null && echo WROTE-dropin
echo 'import os' > .local/lib/python3.11/site-packages/zz.pth 2>/dev/null && echo WROTE-pth
printf '#!/bin/sh\n' > .local/bin/ls 2>/dev/null && echo WROTE-bin
echo '!sh -c evil' >> .vimrc 2>/dev/null && echo WROTE-vimrc
echo 'script-shell=/tmp/x' >> .npmrc 2>/dev/null && echo WROTE-npmrc
printf '[build]\nrustc-wrapper = "/tmp/x"\n' >> .cargo/config.toml 2>/dev/null && echo WROTE-cargo
true
'''
`, home))
	out, errOut, code := b.Run("run", job)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	require.NotContains(t, out, "WROTE-")
	require.NoFileExists(t, filepath.Join(home, ".config/environment.d/50-x.conf"))
	require.NoDirExists(t, filepath.Join(home, ".local/share/systemd/user/dbus.service.d"))
	requireMine(t, home, ".ssh/authorized_keys2", ".config/systemd/user.conf", ".vimrc", ".npmrc", ".cargo/config.toml")
	b.SetPolicy("protect = []\n")
	out, errOut, code = b.Run("run", job)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	for _, w := range []string{"WROTE-keys2", "WROTE-envd", "WROTE-userconf", "WROTE-dropin", "WROTE-pth", "WROTE-bin", "WROTE-vimrc", "WROTE-npmrc", "WROTE-cargo"} {
		require.Contains(t, out, w)
	}
}

// TestE2EProtectedRootInsideGit: a job whose workspace is a
// repository's .git/hooks is refused before it runs, and one whose
// workspace is the .git directory itself gets hooks read-only inside it
// (the rest of .git stays writable). Both grades.
func TestE2EProtectedRootInsideGit(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		repo := hostDirUnder(t, "/var/tmp")
		hooks := filepath.Join(repo, ".git", "hooks")
		require.NoError(t, os.MkdirAll(hooks, 0o777))
		require.NoError(t, os.Chmod(filepath.Join(repo, ".git"), 0o777))
		inHooks := b.WriteJob("hooks.toml", fmt.Sprintf("mode = \"workspace_write\"\nworkspace = %q\ncommand = \"echo evil > pre-commit\"\n", hooks))
		out, errOut, code := b.Run("run", inHooks)
		require.Equal(t, 125, code, out+errOut)
		require.Contains(t, errOut, "is or lies inside the protected path")
		require.NoFileExists(t, filepath.Join(hooks, "pre-commit"))
		out, errOut, _ = b.Run("check", inHooks)
		require.Contains(t, out, "hooks.toml:2:", "placed at the workspace key's line: %s", errOut)

		inGit := b.WriteJob("git.toml", fmt.Sprintf("mode = \"workspace_write\"\nworkspace = %q\ncommand = '''\necho evil > hooks/pre-commit 2>/dev/null && echo WROTE-hook\necho mine > description && echo WROTE-description\n'''\n", filepath.Join(repo, ".git")))
		out, errOut, code = b.Run("run", inGit)
		require.Equal(t, 0, code, out+errOut)
		require.NotContains(t, out, "WROTE-hook")
		require.Contains(t, out, "WROTE-description")
		require.NoFileExists(t, filepath.Join(hooks, "pre-commit"))
	})
}

// requireMine checks that each of files under dir still holds the
// "# mine" line the test wrote there.
func requireMine(t *testing.T, dir string, files ...string) {
	t.Helper()
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		require.Equal(t, "# mine\n", string(data), f)
	}
}

// TestE2EProtectedCreatedThenLocked: a job that makes a protected path
// and, in the same breath, takes away its own write permission on the
// directory (chmod 0555: a worker that is not root is held to it) still
// has the path moved aside, the directory's permission given back, and
// is denied. Run as nobody (make test's escape run), the move failed
// before, and the path outlived the job. Both grades.
func TestE2EProtectedCreatedThenLocked(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		// The job's own directory, which it may chmod; made writable
		// again before TempDir's removal.
		ws := t.TempDir()
		t.Cleanup(func() { _ = os.Chmod(ws, 0o755) })
		b.SetPolicy("protect = [\"@default\"]\n")
		job := b.WriteJob("lock.toml", fmt.Sprintf(`name = "lock"
mode = "workspace_write"
workspace = %q
command = '''
python3 -c 'import os; open(".t", "w").write("evil"); os.rename(".t", ".bashrc"); os.chmod(".", 0o555)'
sleep 300; echo outlived
'''
`, ws))
		out, errOut, code := b.Run("run", job)
		require.NotEqual(t, 0, code, "%s\n%s", out, errOut)
		require.NotContains(t, out, "outlived")
		require.NoFileExists(t, filepath.Join(ws, ".bashrc"))
		j := b.Show("lock")
		require.Equal(t, "denied", j.State, j.Reason)
		require.Contains(t, j.Reason, "created the protected path "+filepath.Join(ws, ".bashrc"))
		require.NotContains(t, j.Reason, "failed")
	})
}

// TestE2EProtectedNestedRoots: a writable root inside the workspace keeps
// its place: the job cannot rename a directory between the two (EBUSY)
// to carry the inner root's protected and hidden paths away and make
// its own directories at the inner root's name. Both grades.
func TestE2EProtectedNestedRoots(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		ws := hostDirUnder(t, "/var/tmp")
		require.NoError(t, os.Chmod(ws, 0o777))
		sub := filepath.Join(ws, "a", "sub")
		require.NoError(t, os.MkdirAll(sub, 0o777))
		require.NoError(t, os.Chmod(filepath.Join(ws, "a"), 0o777))
		require.NoError(t, os.Chmod(sub, 0o777))
		require.NoError(t, os.WriteFile(filepath.Join(sub, ".bashrc"), []byte("# mine\n"), 0o666))
		require.NoError(t, os.WriteFile(filepath.Join(sub, "secret"), []byte("SECRET-NESTED\n"), 0o644))
		b.SetPolicy(fmt.Sprintf("hide = [\"@default\", %q]\n", filepath.Join(sub, "secret")))
		job := b.WriteJob("nested.toml", fmt.Sprintf(`name = "nested"
mode = "workspace_write"
workspace = %q
writable = [%q]
command = '''
mv a moved 2>/dev/null && echo MOVED
mkdir -p a/sub 2>/dev/null
echo evil > a/sub/.bashrc 2>/dev/null && echo WROTE
cat a/sub/secret moved/sub/secret 2>/dev/null
true
'''
`, ws, sub))
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		require.NotContains(t, out, "MOVED")
		require.NotContains(t, out, "WROTE")
		require.NotContains(t, out, "SECRET")
		require.NoDirExists(t, filepath.Join(ws, "moved"))
		requireMine(t, sub, ".bashrc")
	})
}

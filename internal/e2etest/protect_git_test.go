package e2etest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// hostGit runs git with args as the test's user, with no system or user
// configuration and file:// submodules allowed, and returns its output.
func hostGit(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "protocol.file.allow=always", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// gitRepoWithSubmodules makes, with the real git, a repository in a new
// directory whose submodule third_party/foo (git directory
// .git/modules/third_party/foo: a name holding "/") has a submodule of
// its own, deps/inner (.git/modules/third_party/foo/modules/deps/inner),
// and whose core.hooksPath is .husky/_ with a pre-commit hook there, as
// husky sets it up. It returns the repository's directory.
func gitRepoWithSubmodules(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		Unavailable(t, "git is not installed")
	}
	inner, up, ws := t.TempDir(), t.TempDir(), t.TempDir()
	hostGit(t, "init", "-q", inner)
	hostGit(t, "-C", inner, "commit", "-q", "--allow-empty", "-m", "inner")
	hostGit(t, "init", "-q", up)
	hostGit(t, "-C", up, "submodule", "add", "-q", inner, "deps/inner")
	hostGit(t, "-C", up, "commit", "-q", "-m", "up")
	hostGit(t, "init", "-q", ws)
	hostGit(t, "-C", ws, "submodule", "add", "-q", up, "third_party/foo")
	hostGit(t, "-C", ws, "submodule", "update", "-q", "--init", "--recursive")
	hostGit(t, "-C", ws, "config", "core.hooksPath", ".husky/_")
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".husky", "_"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".husky", "_", "pre-commit"), []byte("# mine\n"), 0o755))
	for _, d := range []string{"third_party/foo", "third_party/foo/modules/deps/inner"} {
		require.FileExists(t, filepath.Join(ws, ".git", "modules", d, "config"), "git keeps the submodule's git directory there")
	}
	return ws
}

// TestE2EProtectedSubmodulesAndHooksPath: under the default list, in a
// repository made by the real git, a job can write neither the config
// nor the hooks of a submodule whose name holds "/"
// (.git/modules/third_party/foo), nor of one nested in it
// (.../modules/deps/inner), where a core.fsmonitor would run at the
// host's next `git status` in the outer repository; nor the hooks
// directory the repository's core.hooksPath names (.husky/_), whose
// pre-commit the host's next commit would run, nor put its own in
// place by renaming it. Checked from the host: the files are as they
// were, the submodules' .git files too, and the host's `git status` (which recurses into the submodules) runs nothing
// of the job's. With protect = [] the same job writes them all, so the
// checks can fail. Both grades; as nobody too (make test-unprivileged).
func TestE2EProtectedSubmodulesAndHooksPath(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		ws := gitRepoWithSubmodules(t)
		subs := []string{".git/modules/third_party/foo", ".git/modules/third_party/foo/modules/deps/inner"}
		before := map[string]string{}
		for _, s := range subs {
			data, err := os.ReadFile(filepath.Join(ws, s, "config"))
			require.NoError(t, err)
			before[s] = string(data)
		}
		pwned := filepath.Join(ws, "PWNED")
		var script strings.Builder
		fmt.Fprintf(&script, "cd %q\n", ws)
		for i, s := range subs {
			fmt.Fprintf(&script, "printf '[core]\\n\\tfsmonitor = \"touch %s; false\"\\n' >> %s/config 2>/dev/null && echo WROTE-config-%d\n", pwned, s, i)
			fmt.Fprintf(&script, "echo 'touch %s' > %s/hooks/post-checkout 2>/dev/null && echo WROTE-hook-%d\n", pwned, s, i)
		}
		// The submodules' .git files lead host git to their git
		// directories: rewritten (with the same text, so that git
		// still works when nothing is protected) or renamed away.
		for i, wt := range []string{"third_party/foo", "third_party/foo/deps/inner"} {
			fmt.Fprintf(&script, "t=$(cat %[1]s/.git); echo \"$t\" > %[1]s/.git 2>/dev/null && echo WROTE-dotgit-%[2]d\n", wt, i)
			fmt.Fprintf(&script, "mv %[1]s/.git %[1]s/.git-away 2>/dev/null && echo RENAMED-dotgit-%[2]d && mv %[1]s/.git-away %[1]s/.git\n", wt, i)
		}
		fmt.Fprintf(&script, "echo 'touch %s' >> .husky/_/pre-commit 2>/dev/null && echo WROTE-hookspath\n", pwned)
		fmt.Fprintf(&script, "echo 'touch %s' > .husky/_/post-checkout 2>/dev/null && echo CREATED-hookspath\n", pwned)
		script.WriteString("mv .husky/_ .husky/away 2>/dev/null && echo RENAMED-hookspath\n")
		script.WriteString("mv .husky .husky-away 2>/dev/null && echo RENAMED-husky\n")
		script.WriteString("echo done\n")
		job := b.WriteJob("subs.toml", fmt.Sprintf("mode = \"workspace_write\"\nworkspace = %q\ncommand = '''\n%s'''\n", ws, script.String()))

		b.SetPolicy("protect = [\"@default\"]\n")
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "done")
		require.NotContains(t, out, "WROTE-")
		require.NotContains(t, out, "CREATED-")
		require.NotContains(t, out, "RENAMED-")
		for _, s := range subs {
			data, err := os.ReadFile(filepath.Join(ws, s, "config"))
			require.NoError(t, err)
			require.Equal(t, before[s], string(data), s)
			require.NoFileExists(t, filepath.Join(ws, s, "hooks", "post-checkout"), s)
		}
		for _, wt := range []string{"third_party/foo", "third_party/foo/deps/inner"} {
			data, err := os.ReadFile(filepath.Join(ws, wt, ".git"))
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(string(data), "gitdir: "), "%s/.git: %q", wt, data)
		}
		requireMine(t, ws, ".husky/_/pre-commit")
		require.NoFileExists(t, filepath.Join(ws, ".husky/_/post-checkout"))
		hostGit(t, "-C", ws, "status", "--ignore-submodules=none") // recurses into each submodule
		require.NoFileExists(t, pwned, "the host's git ran what the job wrote")

		// With nothing protected, the same job writes them all.
		b.SetPolicy("protect = []\n")
		out, errOut, code = b.Run("run", job)
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		for _, m := range []string{"WROTE-config-0", "WROTE-config-1", "WROTE-hook-0", "WROTE-hook-1", "WROTE-dotgit-0", "WROTE-dotgit-1", "RENAMED-dotgit-0", "RENAMED-dotgit-1", "WROTE-hookspath", "CREATED-hookspath"} {
			require.Contains(t, out, m, "unprotected, the job writes it")
		}
		hostGit(t, "-C", ws, "status", "--ignore-submodules=none")
		require.FileExists(t, pwned, "unprotected, the host's git status runs the submodule's fsmonitor")
	})
}

// TestE2EProtectedIncludedConfig: a file the repository's config
// includes (include.path), inside the workspace, and the fsmonitor
// script it names, stay read-only under the default list: what they
// set, git reads as the repository's own configuration. With
// protect = [] the same job writes them.
func TestE2EProtectedIncludedConfig(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		if _, err := exec.LookPath("git"); err != nil {
			Unavailable(t, "git is not installed")
		}
		ws := t.TempDir()
		hostGit(t, "init", "-q", ws)
		hostGit(t, "-C", ws, "config", "include.path", "../tools/git.inc")
		require.NoError(t, os.MkdirAll(filepath.Join(ws, "tools"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(ws, "tools", "git.inc"), []byte("# mine\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(ws, "tools", "fsmon.sh"), []byte("# mine\n"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(ws, "tools", "extra.inc"), []byte("# mine\n"), 0o644))
		// The included file includes another and names a script.
		require.NoError(t, os.WriteFile(filepath.Join(ws, "tools", "git.inc"), []byte("[include]\n\tpath = extra.inc\n[core]\n\tfsmonitor = tools/fsmon.sh\n"), 0o644))
		job := b.WriteJob("inc.toml", fmt.Sprintf(`mode = "workspace_write"
workspace = %q
command = '''
printf '[core]\n\thooksPath = /tmp\n' >> tools/git.inc 2>/dev/null && echo WROTE-include
printf '[core]\n\thooksPath = /tmp\n' >> tools/extra.inc 2>/dev/null && echo WROTE-nested-include
echo 'touch pwned' >> tools/fsmon.sh 2>/dev/null && echo WROTE-fsmonitor
echo done
'''
`, ws))
		b.SetPolicy("protect = [\"@default\"]\n")
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "done")
		require.NotContains(t, out, "WROTE-")
		requireMine(t, ws, "tools/fsmon.sh", "tools/extra.inc")

		b.SetPolicy("protect = []\n")
		out, errOut, code = b.Run("run", job)
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		for _, m := range []string{"WROTE-include", "WROTE-nested-include", "WROTE-fsmonitor"} {
			require.Contains(t, out, m)
		}
	})
}

// TestE2EProtectedAgainstJobsSubmodules: a job that makes a directory
// of its workspace a repository whose core.fsmonitor runs a program,
// and adds it to the index as a submodule, or makes the .git of a
// submodule that is not checked out, would have the host's `git
// status` at the top run that program: the attempt ends denied, the
// submodule's .git is moved aside, and git status runs nothing; a
// submodule whose hooks are a FIFO does not stop the worker (nothing
// bounds how soon but the test's timeout). With protect = [] the same
// job has git status run its program.
func TestE2EProtectedAgainstJobsSubmodules(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		if _, err := exec.LookPath("git"); err != nil {
			Unavailable(t, "git is not installed")
		}
		setup := func() (ws, pwned string) {
			ws = t.TempDir()
			other := filepath.Join(t.TempDir(), "other")
			hostGit(t, "init", "-q", other)
			hostGit(t, "-C", other, "commit", "-q", "--allow-empty", "-m", "other")
			hostGit(t, "init", "-q", ws)
			hostGit(t, "-C", ws, "submodule", "add", "-q", other, "mod")
			hostGit(t, "-C", ws, "commit", "-q", "-m", "mod")
			hostGit(t, "-C", ws, "submodule", "deinit", "-q", "-f", "mod")
			return ws, filepath.Join(t.TempDir(), "PWNED")
		}
		script := func(ws, pwned string) string {
			g := "git -c user.name=j -c user.email=j@example.com -c protocol.file.allow=always"
			return fmt.Sprintf(`cd %[1]q
mkdir -p vendor/lib && (cd vendor/lib && git init -q && %[2]s commit -q --allow-empty -m x && git config core.fsmonitor 'touch %[3]s; false') && git update-index --add --cacheinfo 160000,$(git -C vendor/lib rev-parse HEAD),vendor/lib && echo ADDED-gitlink
(cd mod && git init -q && git config core.fsmonitor 'touch %[3]s; false') && echo MADE-mod
mkdir fifo && (cd fifo && git init -q && %[2]s commit -q --allow-empty -m x && rm -rf .git/hooks && mkfifo .git/hooks) && git update-index --add --cacheinfo 160000,$(git -C fifo rev-parse HEAD),fifo && echo MADE-fifo
echo done
`, ws, g, pwned)
		}
		ws, pwned := setup()
		job := b.WriteJob("subs.toml", fmt.Sprintf("name = \"subs\"\nmode = \"workspace_write\"\nworkspace = %q\ncommand = '''\n%s'''\n", ws, script(ws, pwned)))
		b.SetPolicy("protect = [\"@default\"]\n")
		out, errOut, code := b.Run("run", job)
		require.NotEqual(t, 0, code, "%s\n%s", out, errOut)
		for _, m := range []string{"ADDED-gitlink", "MADE-mod", "MADE-fifo", "done"} {
			require.Contains(t, out, m, "the job does what it may in its workspace")
		}
		j := b.Show("subs")
		require.Equal(t, "denied", j.State, j.Reason)
		for _, sub := range []string{"vendor/lib", "mod", "fifo"} {
			require.Contains(t, j.Reason, "the submodule "+filepath.Join(ws, sub)+" in the index of "+filepath.Join(ws, ".git")+" could make git on the host run a program of the job's")
			require.NoDirExists(t, filepath.Join(ws, sub, ".git"))
			require.DirExists(t, filepath.Join(ws, sub, ".git.paddock-created-"+j.ID))
		}
		hostGit(t, "-C", ws, "status", "--ignore-submodules=none")
		require.NoFileExists(t, pwned, "the host's git ran what the job wrote")

		// With nothing protected, the same job has git status run it.
		ws, pwned = setup()
		job = b.WriteJob("subs2.toml", fmt.Sprintf("name = \"subs2\"\nmode = \"workspace_write\"\nworkspace = %q\ncommand = '''\n%s'''\n", ws, script(ws, pwned)))
		b.SetPolicy("protect = []\n")
		out, errOut, code = b.Run("run", job)
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		hostGit(t, "-C", ws, "status", "--ignore-submodules=none")
		require.FileExists(t, pwned, "unprotected, the host's git status runs the job's fsmonitor")
	})
}

// TestE2EProtectedCheckoutsInAWorkspace: a workspace that holds several
// checkouts gets each one's config and hooks protected by the default
// list, as its own repository's would be: a job cannot set their
// core.fsmonitor or write their hooks, and the host's git status in one
// runs nothing of the job's. With protect = [] the same job can.
func TestE2EProtectedCheckoutsInAWorkspace(t *testing.T) {
	t.Parallel()
	bothGrades(t, func(t *testing.T, b *Bundle) {
		if _, err := exec.LookPath("git"); err != nil {
			Unavailable(t, "git is not installed")
		}
		ws := t.TempDir()
		for _, r := range []string{"app", "lib"} {
			hostGit(t, "init", "-q", filepath.Join(ws, r))
			hostGit(t, "-C", filepath.Join(ws, r), "commit", "-q", "--allow-empty", "-m", r)
		}
		pwned := filepath.Join(t.TempDir(), "PWNED")
		job := b.WriteJob("co.toml", fmt.Sprintf(`mode = "workspace_write"
workspace = %q
command = '''
git -C app config core.fsmonitor 'touch %[2]s; false' 2>/dev/null && echo WROTE-config
echo 'touch %[2]s' > lib/.git/hooks/post-checkout 2>/dev/null && echo WROTE-hook
echo done
'''
`, ws, pwned))
		b.SetPolicy("protect = [\"@default\"]\n")
		out, errOut, code := b.Run("run", job)
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "done")
		require.NotContains(t, out, "WROTE-")
		hostGit(t, "-C", filepath.Join(ws, "app"), "status")
		require.NoFileExists(t, pwned, "the host's git ran what the job wrote")

		b.SetPolicy("protect = []\n")
		out, errOut, code = b.Run("run", job)
		require.Equal(t, 0, code, "%s\n%s", out, errOut)
		require.Contains(t, out, "WROTE-config")
		require.Contains(t, out, "WROTE-hook")
		hostGit(t, "-C", filepath.Join(ws, "app"), "status")
		require.FileExists(t, pwned, "unprotected, the host's git status runs the job's fsmonitor")
	})
}

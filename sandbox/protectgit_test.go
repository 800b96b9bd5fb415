package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestParseGitConfig: git's configuration syntax as git-config(1)
// describes it, with the corners a careless reader gets wrong: a
// variable on the header's line, quotes around part of a value, a
// comment character inside quotes, a continued line, escapes in a
// subsection, case-folded names, CRLF, a BOM; and what git refuses.
func TestParseGitConfig(t *testing.T) {
	t.Parallel()
	text := "\xef\xbb\xbf# comment\n" +
		"; another\n" +
		"[Core] HooksPath = .husky/_ ; trailing comment\n" +
		"\tbare\n" +
		"  FSMonitor = \"sh tools/fs#mon.sh\" # quoted hash\n" +
		"[include]\r\n" +
		"\tpath = a\\\n" +
		"b.inc\n" +
		"[includeIf \"gitdir:~/w\\\\x\\\"y/\"]\n" +
		"path = \"  spaced  \"   tail  \n" +
		"[CORE.Sub]\n" +
		"x = a\\tb\\nc\\\\\n" +
		"[core]\n" +
		"empty =\n" +
		"hookspath = last"
	vars, err := parseGitConfig("cfg", []byte(text))
	require.NoError(t, err)
	type kv struct {
		key, value string
		noValue    bool
		line       int
	}
	var got []kv
	for _, v := range vars {
		got = append(got, kv{v.key(), v.value, v.noValue, v.line})
	}
	require.Equal(t, []kv{
		{"core.hookspath", ".husky/_", false, 3},
		{"core.bare", "", true, 4},
		{"core.fsmonitor", "sh tools/fs#mon.sh", false, 5},
		{"include.path", "ab.inc", false, 7},
		{`includeif.gitdir:~/w\x"y/.path`, "  spaced     tail", false, 10}, // each space kept, as git does
		{"core.sub.x", "a\tb\nc\\", false, 12},
		{"core.empty", "", false, 14},
		{"core.hookspath", "last", false, 15},
	}, got)

	for name, bad := range map[string]string{
		"unknown escape":   "[a]\nx = \\q\n",
		"open quote":       "[a]\nx = \"abc\n",
		"open header":      "[a\nx = 1\n",
		"open subsection":  "[a \"b]\n",
		"bad header char":  "[a/b]\n",
		"junk after name":  "[a]\nx y\n",
		"line of junk":     "[a]\n=1\n",
		"no ] after quote": "[a \"b\" x]\n",
	} {
		_, err := parseGitConfig("cfg", []byte(bad))
		require.ErrorIs(t, err, errGitConfig, name)
		require.ErrorContains(t, err, "cfg line ", name)
	}
}

// TestParseGitConfigAgreesWithGit: for each text, the variables read
// are those `git config --list` reads, and a text git refuses is refused.
func TestParseGitConfigAgreesWithGit(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		unavailable(t, "git is not installed: nothing to compare with")
	}
	for i, text := range []string{
		"[a]x=1\n[b \"S u\\b\"]\n  y = \" q \" r ; c\n",
		"[a.B]\n\tk\n\tk2 = v\\\n  w\n",
		"[core]\thooksPath=\"a\\\"b\" # c\n\tFsMonitor = x\ty  z\n",
		"\xef\xbb\xbf[s]\r\nk = a;b\r\n[t]k=\"#\"\n",
		"[a]\nx = \\q\n",
		"[a]\nx = \"open\n",
		"[a \"b\" c]\n",
		"k = 1\n",
	} {
		f := filepath.Join(t.TempDir(), "config")
		require.NoError(t, os.WriteFile(f, []byte(text), 0o644))
		out, gitErr := exec.Command("git", "config", "-f", f, "--list", "-z", "--no-includes").Output()
		vars, err := parseGitConfig(f, []byte(text))
		if gitErr != nil {
			require.ErrorIs(t, err, errGitConfig, "case %d: git refuses %q", i, text)
			continue
		}
		require.NoError(t, err, "case %d", i)
		var got strings.Builder
		for _, v := range vars {
			got.WriteString(v.key())
			if !v.noValue {
				got.WriteString("\n" + v.value)
			}
			got.WriteByte(0)
		}
		require.Equal(t, string(out), got.String(), "case %d: %q", i, text)
	}
}

// protectedKinds returns resolveProtect's mounts for roots and entries
// as a map from path to kind.
func protectedKinds(t *testing.T, roots, entries []string) map[string]protectKind {
	t.Helper()
	got, _, _, err := resolveProtect(roots, entries)
	require.NoError(t, err)
	out := map[string]protectKind{}
	for _, m := range got {
		out[m.path] = m.kind
	}
	return out
}

// gitTree makes the files of a map (path below root: content; a path
// ending in "/" is a directory) and returns root, canonical.
func gitTree(t testing.TB, files map[string]string) string {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	for p, text := range files {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			require.NoError(t, os.MkdirAll(full, 0o755))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(text), 0o644))
	}
	return root
}

// TestResolveProtectSubmodules: the git directory of every submodule is
// protected like the top one's: one whose name holds "/"
// (modules/third_party/foo), one nested in another
// (modules/a/modules/b, and modules/a/modules/x/y), not only those
// .git/modules/*/ matches; a directory that is no git directory is only
// searched.
func TestResolveProtectSubmodules(t *testing.T) {
	t.Parallel()
	root := gitTree(t, map[string]string{
		".git/HEAD": "ref: refs/heads/main\n", ".git/config": "[core]\n", ".git/hooks/": "",
		".git/modules/third_party/foo/HEAD": "x\n", ".git/modules/third_party/foo/config": "[core]\n",
		".git/modules/third_party/foo/hooks/": "",
		".git/modules/a/HEAD":                 "x\n", ".git/modules/a/config": "[core]\n",
		".git/modules/a/modules/b/HEAD": "x\n", ".git/modules/a/modules/b/config": "[core]\n",
		".git/modules/a/modules/x/y/HEAD": "x\n", ".git/modules/a/modules/x/y/config": "[core]\n",
		".git/modules/a/objects/zz/HEAD": "x\n", ".git/modules/a/objects/zz/config": "not searched: inside a git dir, only modules/ is\n",
		".git/modules/empty/": "",
		// The working trees, whose .git files name those directories.
		".gitmodules":                                            "[submodule \"third_party/foo\"]\n\tpath = third_party/foo\n\turl = x\n[submodule \"esc\"]\n\tpath = ../out\n",
		"third_party/foo/.git":                                   "gitdir: ../../.git/modules/third_party/foo\n",
		"third_party/foo/.gitmodules":                            "[submodule \"deps/inner\"]\n\tpath = deps/inner\n",
		"third_party/foo/deps/inner/.git":                        "gitdir: ../../../../.git/modules/third_party/foo/modules/deps/inner\n",
		".git/modules/third_party/foo/modules/deps/inner/HEAD":   "x\n",
		".git/modules/third_party/foo/modules/deps/inner/config": "[core]\n\tworktree = ../../../../../../third_party/foo/deps/inner\n\thooksPath = hk\n",
	})
	got := protectedKinds(t, []string{root}, []string{".git/config", ".git/hooks/"})
	for _, m := range []string{"third_party/foo", "a", "a/modules/b", "a/modules/x/y"} {
		dir := filepath.Join(root, ".git/modules", m)
		require.Equal(t, protectFile, got[dir+"/config"], m)
		if m == "third_party/foo" {
			require.Equal(t, protectDir, got[dir+"/hooks"], m)
		} else {
			require.Equal(t, protectNewDir, got[dir+"/hooks"], m)
		}
		require.Equal(t, protectAbsent, got[dir+"/commondir"], m)
		require.Equal(t, protectKeep, got[dir], m)
	}
	require.Equal(t, protectKeep, got[root+"/.git/modules/third_party"])
	// The submodules' .git files, which host git follows into them, and
	// the nested one's .gitmodules.
	require.Equal(t, protectFile, got[root+"/third_party/foo/.git"])
	require.Equal(t, protectFile, got[root+"/third_party/foo/deps/inner/.git"])
	require.Equal(t, protectFile, got[root+"/third_party/foo/.gitmodules"])
	require.Equal(t, protectAbsent, got[root+"/third_party/foo/deps/inner/.gitmodules"])
	// The nested submodule's core.hooksPath, relative to its working
	// tree (core.worktree, and the path .gitmodules gives).
	require.Equal(t, protectNewDir, got[root+"/third_party/foo/deps/inner/hk"])

	// Without .git/config in the list nothing is searched.
	got = protectedKinds(t, []string{root}, []string{".git/hooks/"})
	require.NotContains(t, got, root+"/.git/modules/third_party/foo/config")
}

// TestResolveProtectSubmodulesBounded: a modules/ tree too deep or too
// wide to search, or with a symlink in it, refuses the job with a reason
// rather than leaving a git directory in it unprotected.
func TestResolveProtectSubmodulesBounded(t *testing.T) {
	t.Parallel()
	deep := ".git/modules/" + strings.Repeat("d/", maxModulesDepth+1) + "HEAD"
	root := gitTree(t, map[string]string{".git/config": "", deep: ""})
	_, _, _, err := resolveProtect([]string{root}, []string{".git/config"})
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, fmt.Sprintf("more than %d levels below", maxModulesDepth))
	// One level less is searched.
	root = gitTree(t, map[string]string{".git/config": "", ".git/modules/" + strings.Repeat("d/", maxModulesDepth-1) + "x/": ""})
	_, _, _, err = resolveProtect([]string{root}, []string{".git/config"})
	require.NoError(t, err)

	root = gitTree(t, map[string]string{".git/config": "", ".git/modules/": ""})
	for i := range maxModulesEntries + 1 {
		require.NoError(t, os.WriteFile(filepath.Join(root, ".git/modules", fmt.Sprint(i)), nil, 0o644))
	}
	_, _, _, err = resolveProtect([]string{root}, []string{".git/config"})
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, fmt.Sprintf("more than %d entries", maxModulesEntries))

	other := gitTree(t, map[string]string{"foo/HEAD": "", "foo/config": "[core]\n\tfsmonitor = x\n"})
	for _, link := range []string{".git/modules/third_party", ".git/modules"} {
		root = gitTree(t, map[string]string{".git/config": "", filepath.Dir(link) + "/": ""})
		require.NoError(t, os.Symlink(other, filepath.Join(root, link)))
		_, _, _, err = resolveProtect([]string{root}, []string{".git/config"})
		require.ErrorIs(t, err, ErrBadPath, link)
		require.ErrorContains(t, err, "is a symlink", link)
	}
}

// TestResolveProtectHooksPath: the directory core.hooksPath names is
// protected: relative to the working tree's top (or to the git
// directory of a bare repository, or to core.worktree), or absolute; as
// are the files include.path and includeIf.*.path name (relative to the
// including file), followed as a chain, what they set, and the script a
// core.fsmonitor command names. What lies outside the writable roots
// costs nothing; a boolean fsmonitor names no file.
func TestResolveProtectHooksPath(t *testing.T) {
	t.Parallel()
	outside := gitTree(t, map[string]string{"shared.inc": "[core]\n\thooksPath = hooks-from-outside\n"})
	root := gitTree(t, map[string]string{
		".git/config": "[core]\n\thooksPath = .husky/_\n" +
			"[include]\n\tpath = ../conf/one.inc\n" +
			"[includeIf \"onbranch:main\"]\n\tpath = " + outside + "/shared.inc\n",
		".husky/_/pre-commit": "#!/bin/sh\n",
		"conf/one.inc":        "[include]\n\tpath = two.inc\n",
		"conf/two.inc": "[core]\n\thooksPath = \"ABS\"\n\tfsmonitor = \"sh tools/fsmon.sh --flag\"\n[core]\n\tfsmonitor = true\n" +
			"[diff \"x\"]\n\ttextconv = tools/textconv\n[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n[alias]\n\tc = !./tools/clean\n\tx = log ./not/a/command\n",
		"tools/fsmon.sh": "#!/bin/sh\n",
		"abs-hooks/":     "",
	})
	two := filepath.Join(root, "conf/two.inc")
	data, err := os.ReadFile(two)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(two, []byte(strings.Replace(string(data), "ABS", filepath.Join(root, "abs-hooks"), 1)), 0o644))

	got := protectedKinds(t, []string{root}, []string{".git/config"})
	for p, k := range map[string]protectKind{
		".husky":             protectKeep,
		".husky/_":           protectDir,
		"conf/one.inc":       protectFile,
		"conf/two.inc":       protectFile,
		"abs-hooks":          protectDir,
		"tools/fsmon.sh":     protectFile,
		"hooks-from-outside": protectAbsent, // a missing directory at the top is watched
		"tools/textconv":     protectAbsent, // a command key's path word
		"tools/clean":        protectAbsent,
	} {
		require.Equal(t, k, got[filepath.Join(root, p)], p)
	}
	for _, w := range []string{"sh", "--flag", "clean", "git-lfs", "%f", "x", "not/a/command", "sh tools"} {
		require.NotContains(t, got, filepath.Join(root, w), "a word that is no path")
	}
	require.NotContains(t, got, filepath.Join(root, "true"))

	// A missing include is protected too (git skips it; a job would
	// make it).
	root = gitTree(t, map[string]string{".git/config": "[include]\n\tpath = ../missing.inc\n"})
	require.Equal(t, protectAbsent, protectedKinds(t, []string{root}, []string{".git/config"})[root+"/missing.inc"])

	// A bare repository's hooks run in its git directory; core.worktree
	// is relative to the git directory.
	root = gitTree(t, map[string]string{
		"b/.git/config":   "[core]\n\tbare = true\n\thooksPath = my-hooks\n",
		"wt/":             "",
		"sub/.git/config": "[core]\n\tworktree = ../../wt\n\thooksPath = h\n",
	})
	got = protectedKinds(t, []string{root}, []string{"*/.git/config"})
	require.Equal(t, protectNewDir, got[root+"/b/.git/my-hooks"])
	require.Equal(t, protectNewDir, got[root+"/wt/h"])
	require.Equal(t, protectNewDir, got[root+"/sub/h"])

	// A hooksPath that is the writable root refuses the job.
	root = gitTree(t, map[string]string{".git/config": "[core]\n\thooksPath = .\n"})
	_, _, _, err = resolveProtect([]string{root}, []string{".git/config"})
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, "core.hookspath")

	// A config git would refuse refuses the job, naming file and line.
	root = gitTree(t, map[string]string{".git/config": "[core]\n\thooksPath = \"x\n"})
	_, _, _, err = resolveProtect([]string{root}, []string{".git/config"})
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, root+"/.git/config line 2")

	// An include chain deeper than git follows refuses the job.
	root = gitTree(t, map[string]string{".git/config": "[include]\n\tpath = ../loop.inc\n", "loop.inc": "[include]\n\tpath = loop.inc\n"})
	_, _, _, err = resolveProtect([]string{root}, []string{".git/config"})
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, "deeper than git's")
}

// TestProtectGitNotAFifo: a git config that is a FIFO is refused, not
// waited on.
func TestProtectGitNotAFifo(t *testing.T) {
	t.Parallel()
	root := gitTree(t, map[string]string{".git/": ""})
	require.NoError(t, unix.Mkfifo(filepath.Join(root, ".git/config"), 0o644))
	_, _, _, err := resolveProtect([]string{root}, []string{".git/config"})
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorIs(t, err, unix.EINVAL)
}

// BenchmarkNewPolicyProtectGit is what reading a repository's own files
// adds to a job's start: a repository with husky's core.hooksPath and 20
// submodules (names holding "/", each with its .git file), with the
// default list's git entries, against the same list without
// ".git/config" (nothing read), and a plain repository with an empty
// config.
func BenchmarkNewPolicyProtectGit(b *testing.B) {
	withConfig := []string{".git/hooks/", ".git/config", ".git/commondir", ".git/modules/*/hooks/", ".git/modules/*/config", ".gitmodules"}
	withoutConfig := slices.DeleteFunc(slices.Clone(withConfig), func(e string) bool { return e == ".git/config" })
	files := map[string]string{".git/HEAD": "x\n", ".git/config": "[core]\n\tbare = false\n\thooksPath = .husky/_\n", ".git/hooks/": "", ".husky/_/": ""}
	var gm strings.Builder
	for i := range 20 {
		name := fmt.Sprintf("third_party/m%d", i)
		fmt.Fprintf(&gm, "[submodule %q]\n\tpath = %s\n\turl = x\n", name, name)
		files[".git/modules/"+name+"/HEAD"] = "x\n"
		files[".git/modules/"+name+"/config"] = "[core]\n\tworktree = ../../../../" + name + "\n"
		files[".git/modules/"+name+"/hooks/"] = ""
		files[name+"/.git"] = "gitdir: ../../.git/modules/" + name + "\n"
	}
	files[".gitmodules"] = gm.String()
	subs := gitTree(b, files)
	plain := gitTree(b, map[string]string{".git/HEAD": "x\n", ".git/config": "", ".git/hooks/": ""})
	for _, tc := range []struct {
		name, ws string
		protect  []string
	}{{"submodules", subs, withConfig}, {"submodules-unread", subs, withoutConfig}, {"plain", plain, withConfig}, {"plain-unread", plain, withoutConfig}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: tc.ws, Protect: tc.protect}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestResolveProtectRootInsideWorktree: a writable root that is a
// subdirectory of a checkout gets what the enclosing repository's files
// name inside it protected: the hooks directory core.hooksPath names,
// and the .git file of a submodule checked out there.
func TestResolveProtectRootInsideWorktree(t *testing.T) {
	t.Parallel()
	base := gitTree(t, map[string]string{
		".git/HEAD":           "x\n",
		".git/config":         "[core]\n\thooksPath = sub/hooks\n",
		".gitmodules":         "[submodule \"m\"]\n\tpath = sub/mod\n",
		".git/modules/m/HEAD": "x\n", ".git/modules/m/config": "[core]\n",
		"sub/hooks/pre-commit": "#!/bin/sh\n",
		"sub/mod/.git":         "gitdir: ../../.git/modules/m\n",
	})
	root := filepath.Join(base, "sub")
	got := protectedKinds(t, []string{root}, []string{".git/config", ".git/hooks/"})
	require.Equal(t, protectDir, got[root+"/hooks"])
	require.Equal(t, protectFile, got[root+"/mod/.git"])
	// Not without .git/config in the list.
	got = protectedKinds(t, []string{root}, []string{".git/hooks/"})
	require.NotContains(t, got, root+"/hooks")
}

package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestResolveProtect: each protect entry is followed as git and a shell
// reach it (a symlinked .git, a gitdir: file and its commondir, a glob)
// and mounted where it really is, with the directories between the root
// and it kept; nothing is mounted for what lies outside the writable
// roots, for a missing entry directly in a root, or below a read-only
// mount; a root inside a protected path is refused.
func TestResolveProtect(t *testing.T) {
	t.Parallel()
	root, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	outside, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	mk := func(dir string, parts ...string) string {
		p := filepath.Join(append([]string{dir}, parts...)...)
		require.NoError(t, os.MkdirAll(p, 0o755))
		return p
	}
	file := func(p, text string) { require.NoError(t, os.WriteFile(p, []byte(text), 0o644)) }

	// A plain repository, a symlinked .git into the root, a worktree
	// whose gitdir is in the root, and a .git symlink leading outside.
	mk(root, "a", ".git", "hooks")
	file(filepath.Join(root, "a", ".git", "config"), "")
	real := mk(root, "meta", "b.git", "hooks")
	mk(root, "b")
	require.NoError(t, os.Symlink("../meta/b.git", filepath.Join(root, "b", ".git")))
	wtgit := mk(root, "a", ".git", "worktrees", "c")
	file(filepath.Join(wtgit, "commondir"), "../..\n")
	mk(root, "c")
	file(filepath.Join(root, "c", ".git"), "gitdir: "+wtgit+"\n")
	mk(outside, "d.git", "hooks")
	mk(root, "d")
	require.NoError(t, os.Symlink(filepath.Join(outside, "d.git"), filepath.Join(root, "d", ".git")))
	mk(root, "e", ".git") // no hooks yet

	got, links, _, err := resolveProtect([]string{root}, []string{"*/.git/hooks/", "*/.git/config", ".bashrc", "a/.git/"})
	require.NoError(t, err)
	want := []protectMount{
		{root + "/.bashrc", protectAbsent}, // watched, not mounted
		{root + "/a", protectKeep},
		{root + "/a/.git", protectDir}, // covers a/.git/hooks, config and c's worktree
		{root + "/c", protectKeep},
		{root + "/c/.git", protectFile},
		{root + "/e", protectKeep},
		{root + "/e/.git", protectKeep},
		{root + "/e/.git/config", protectAbsent},
		{root + "/e/.git/hooks", protectNewDir},
		{root + "/meta", protectKeep},
		{real[:len(real)-len("/hooks")], protectKeep},
		{real[:len(real)-len("/hooks")] + "/config", protectAbsent},
		{real, protectDir},
	}
	require.Equal(t, want, got)
	// The links on the way, inside the root, are recorded to be checked
	// after the job: one leading inside, one leading outside.
	var linkPaths []string
	for _, l := range links {
		require.True(t, l.Unchanged())
		linkPaths = append(linkPaths, l.Path)
	}
	require.ElementsMatch(t, []string{root + "/b/.git", root + "/d/.git"}, linkPaths)
	require.NoError(t, os.Remove(root+"/d/.git"))
	require.NoError(t, os.Symlink(filepath.Join(outside, "elsewhere.git"), root+"/d/.git"))
	for _, l := range links {
		require.Equal(t, l.Path != root+"/d/.git", l.Unchanged(), l.Path)
	}

	_, _, _, err = resolveProtect([]string{filepath.Join(root, "a", ".git", "hooks")}, []string{"/" + root[1:] + "/a/.git/hooks"})
	require.ErrorIs(t, err, ErrBadPath)
}

// TestProtectBesideHide: a protected path under a hidden directory needs
// no mount (and its tmpfs could take none), but one in a root bound back
// inside a hidden directory (a job's default workspace in the hidden
// state directory) is protected.
func TestProtectBesideHide(t *testing.T) {
	t.Parallel()
	state, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	ws := filepath.Join(state, "workspaces", "j1")
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "secret", ".git", "hooks"), 0o755))
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Hide: []string{state, filepath.Join(ws, "secret")},
		Protect: []string{".git/hooks/", "secret/.git/hooks/"}})
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(ws, ".git", "hooks")}, p.Protected())
}

// TestBuildProtectMounts: the protected paths are mounted after the
// roots, a kept directory read-write onto itself before the read-only
// paths inside it, a missing directory as a read-only tmpfs; pinned ones
// from their descriptors, whose count must match.
func TestBuildProtectMounts(t *testing.T) {
	t.Parallel()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".git"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".git", "config"), nil, 0o644))
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{".git/hooks/", ".git/config"}})
	require.NoError(t, err)
	d := Discovery{Executable: "/usr/bin/bwrap", Grade: GradeFull, NetworkIsolation: true}
	git, cfg, hooks := filepath.Join(ws, ".git"), filepath.Join(ws, ".git", "config"), filepath.Join(ws, ".git", "hooks")

	argv, err := Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d})
	require.NoError(t, err)
	s := " " + strings.Join(argv, " ") + " "
	want := " --bind " + ws + " " + ws + " --bind " + git + " " + git + " --ro-bind " + cfg + " " + cfg +
		" --tmpfs " + hooks + " --remount-ro " + hooks + " "
	require.Contains(t, s, want)

	argv, err = Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d, RootFDs: []int{7}, ProtectFDs: []int{8, 9}})
	require.NoError(t, err)
	s = " " + strings.Join(argv, " ") + " "
	require.Contains(t, s, " --bind-fd 7 "+ws+" --bind-fd 8 "+git+" --ro-bind-fd 9 "+cfg+" --tmpfs "+hooks+" ")

	_, err = Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d, RootFDs: []int{7}, ProtectFDs: []int{8}})
	require.ErrorContains(t, err, "protected-path descriptors")

	pins, err := PinRoots(p)
	require.NoError(t, err)
	defer pins.Close()
	require.Len(t, pins.Protected(), 2)
}

// TestConfineKeepsAroundHidden: in a writable root, each directory on
// the way to a hidden path is bound onto itself so that a job cannot
// rename it and carry the cover away, and every such mount comes before
// the hidden path's own: a kept .config bound after the tmpfs over
// .config/gcloud would show the secret again. A read-only job needs none.
func TestConfineKeepsAroundHidden(t *testing.T) {
	t.Parallel()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	for _, d := range []string{".config/gcloud", ".config/git", "conf/secrets", "a/b"} {
		require.NoError(t, os.MkdirAll(filepath.Join(ws, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".config/git/config"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, "a/b/key"), nil, 0o600))
	at := func(rel string) string { return filepath.Join(ws, rel) }
	params := PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true,
		Hide: []string{at(".config/gcloud"), at("conf/secrets")}, HideFiles: []string{at("a/b/key")}, Protect: []string{".config/git/config"}}
	p, err := NewPolicy(params)
	require.NoError(t, err)
	require.Equal(t, []string{at(".config/git/config")}, p.Protected(), "kept directories are not protected paths")
	d := Discovery{Executable: "/usr/bin/bwrap", Grade: GradeFull, NetworkIsolation: true}
	argv, err := Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d})
	require.NoError(t, err)
	s := " " + strings.Join(argv, " ") + " "
	pos := func(frag string) int {
		i := strings.Index(s, " "+frag+" ")
		require.GreaterOrEqual(t, i, 0, "%q not in %s", frag, s)
		return i
	}
	for _, order := range [][2]string{
		{"--bind " + at(".config") + " " + at(".config"), "--tmpfs " + at(".config/gcloud") + " --remount-ro " + at(".config/gcloud")},
		{"--bind " + at(".config") + " " + at(".config"), "--ro-bind " + at(".config/git/config")},
		{"--bind " + at("conf") + " " + at("conf"), "--tmpfs " + at("conf/secrets")},
		{"--bind " + at("a") + " " + at("a"), "--bind " + at("a/b") + " " + at("a/b")},
		{"--bind " + at("a/b") + " " + at("a/b"), "--ro-bind /dev/null " + at("a/b/key")},
	} {
		require.Less(t, pos(order[0]), pos(order[1]), "%s must come before %s", order[0], order[1])
	}
	pins, err := PinRoots(p)
	require.NoError(t, err)
	require.Len(t, pins.Protected(), 6, ".config, .config/git, .config/git/config, a, a/b, conf")
	pins.Close()

	params.Mode, params.Protect = ModeReadOnly, nil
	p, err = NewPolicy(params)
	require.NoError(t, err)
	argv, err = Build(ConfineParams{Argv: []string{"true"}, Policy: p, Discovery: d})
	require.NoError(t, err)
	require.NotContains(t, strings.Join(argv, " "), "--bind "+at("conf"))
}

// BenchmarkNewPolicyProtect is what the default protect list adds to each
// job's policy: a repository workspace (four entries exist) and an empty
// one (nothing to mount; the lstat calls that find it out).
func BenchmarkNewPolicyProtect(b *testing.B) {
	list := []string{".git/hooks/", ".git/config", ".gitmodules", ".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zshenv", ".zprofile", ".envrc"}
	repo, err := filepath.EvalSymlinks(b.TempDir())
	require.NoError(b, err)
	require.NoError(b, os.MkdirAll(filepath.Join(repo, ".git", "hooks"), 0o755))
	for _, f := range []string{".git/config", ".gitmodules", ".bashrc"} {
		require.NoError(b, os.WriteFile(filepath.Join(repo, f), nil, 0o644))
	}
	empty, err := filepath.EvalSymlinks(b.TempDir())
	require.NoError(b, err)
	// A repository of 30 top-level directories, with the entries for
	// those one level down that runner.DefaultProtect has.
	wide, err := filepath.EvalSymlinks(b.TempDir())
	require.NoError(b, err)
	require.NoError(b, os.MkdirAll(filepath.Join(wide, ".git", "hooks"), 0o755))
	for i := range 30 {
		require.NoError(b, os.Mkdir(filepath.Join(wide, fmt.Sprint("dir", i)), 0o755))
	}
	nested := append(slices.Clone(list), "*/.git/hooks/", "*/.git/config", "*/.git/commondir", "*/.git/config.worktree", "*/.gitmodules")
	for _, tc := range []struct {
		name, ws string
		protect  []string
	}{{"repo", repo, list}, {"empty", empty, list}, {"none", repo, nil}, {"30 dirs", wide, list}, {"30 dirs, one level down too", wide, nested}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: tc.ws, Protect: tc.protect}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestProtectRootWithGlobBytes: a writable root whose own path holds
// glob metacharacters ("br[1]") is taken literally; only the entry is a
// pattern.
func TestProtectRootWithGlobBytes(t *testing.T) {
	t.Parallel()
	base, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	root := filepath.Join(base, "br[1]*?")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sub", ".git", "hooks"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, ".git", "hooks"), 0o755))
	got, _, _, err := resolveProtect([]string{root}, []string{".git/hooks/", "*/.git/hooks/"})
	require.NoError(t, err)
	var paths []string
	for _, m := range got {
		if m.kind != protectKeep {
			paths = append(paths, m.path)
		}
	}
	require.ElementsMatch(t, []string{filepath.Join(root, ".git", "hooks"), filepath.Join(root, "sub", ".git", "hooks")}, paths)
}

// TestProtectGlobBounded: a glob of the protect list that matches more
// paths than a sandbox can mount (a job may make them for a later job's
// policy to match) refuses the policy with the count and what to do,
// never an argv bwrap would refuse; at the bound it is built.
func TestProtectGlobBounded(t *testing.T) {
	t.Parallel()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	for i := range maxProtectMatches {
		require.NoError(t, os.MkdirAll(filepath.Join(ws, ".git", "modules", fmt.Sprintf("m%d", i)), 0o755))
	}
	_, err = NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{".git/modules/*/config"}})
	require.NoError(t, err, "at the bound")
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".git", "modules", "one-more"), 0o755))
	_, err = NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{".git/modules/*/config"}})
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, fmt.Sprintf(`protect ".git/modules/*/config" matches %d paths in %s, more than the %d`, maxProtectMatches+1, ws, maxProtectMatches))

	// An absolute entry counts only its matches inside the job's roots:
	// one workspace's directories do not refuse another's jobs.
	other, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	_, err = NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: other, Protect: []string{filepath.Join(ws, ".git", "modules", "*", "config")}})
	require.NoError(t, err)
}

// TestProtectAnchoredAbove: a relative entry also applies to a root that
// starts inside its path (a root .git gets its hooks protected, a root
// .config its git/), and a root that is or lies inside what an entry
// names is refused, as a writable .git/hooks beside its workspace is.
func TestProtectAnchoredAbove(t *testing.T) {
	t.Parallel()
	base, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	for _, d := range []string{"repo/.git/hooks/x", "repo/.git/modules/sub/hooks", "home/.config/git"} {
		require.NoError(t, os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	at := func(rel string) string { return filepath.Join(base, rel) }
	for root, want := range map[string]string{
		"repo/.git":             at("repo/.git/hooks"),
		"repo/.git/modules/sub": at("repo/.git/modules/sub/hooks"),
		"home/.config":          at("home/.config/git"),
	} {
		p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: at(root), Protect: []string{".git/hooks/", ".git/modules/*/hooks/", ".config/git/"}})
		require.NoError(t, err, root)
		require.Contains(t, p.Protected(), want, root)
	}
	for _, root := range []string{"repo/.git/hooks", "repo/.git/hooks/x", "repo/.git/modules/sub/hooks", "home/.config/git"} {
		_, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: at(root), Protect: []string{".git/hooks/", ".git/modules/*/hooks/", ".config/git/"}})
		require.ErrorIs(t, err, ErrBadPath, root)
		require.ErrorContains(t, err, "is or lies inside the protected path", root)
		var ke *KeyError
		require.ErrorAs(t, err, &ke, root)
		require.Equal(t, "workspace", ke.Key, root)
		_, err = NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: at("home"), Writable: []string{at(root)}, Protect: []string{".git/hooks/", ".git/modules/*/hooks/", ".config/git/"}})
		require.ErrorContains(t, err, "is or lies inside the protected path", root)
		require.ErrorAs(t, err, &ke, root)
		require.Equal(t, "writable", ke.Key, root)
	}
	_, err = NewPolicy(PolicyParams{Mode: ModeReadOnly, Workspace: at("repo/.git/hooks"), Protect: []string{".git/hooks/"}})
	require.NoError(t, err, "a read_only job writes nothing")
}

// TestHiddenFileInRootBoundBackStaysHidden: a hidden file inside a root
// that is bound back inside a hidden directory is covered itself: the
// root shows its paths again, the file among them.
func TestHiddenFileInRootBoundBackStaysHidden(t *testing.T) {
	t.Parallel()
	base, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	ws := filepath.Join(base, "ws2")
	key := filepath.Join(ws, "conf", "db.key")
	require.NoError(t, os.MkdirAll(filepath.Dir(key), 0o755))
	require.NoError(t, os.WriteFile(key, nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(base, "other.key"), nil, 0o600))
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Network: true,
		Hide: []string{base}, HideFiles: []string{key, filepath.Join(base, "other.key")}})
	require.NoError(t, err)
	require.Equal(t, []string{key}, p.HideFiles(), "the file under the bound-back root; the other is under the hidden directory only")
}

// TestProtectGlobSkipsDirectoriesWithoutGit: an entry that globs into
// git's files ("*/.git/config", "*/.gitmodules") names nothing in a
// matched directory without .git: no watch for its missing .gitmodules,
// no resolution of a repository that is not there.
func TestProtectGlobSkipsDirectoriesWithoutGit(t *testing.T) {
	t.Parallel()
	root := gitTree(t, map[string]string{"plain/x": "", "repo/.git/config": "[core]\n", "repo/.git/hooks/": ""})
	got := protectedKinds(t, []string{root}, []string{"*/.git/config", "*/.git/hooks/", "*/.gitmodules", "*/x"})
	require.Equal(t, protectFile, got[filepath.Join(root, "repo", ".git", "config")])
	require.Contains(t, got, filepath.Join(root, "repo", ".gitmodules"), "watched: the repository has none yet")
	require.NotContains(t, got, filepath.Join(root, "plain", ".gitmodules"))
	require.Equal(t, protectFile, got[filepath.Join(root, "plain", "x")], "other globs are as they were")
}

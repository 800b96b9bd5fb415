package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// protectKind is how one protected path is mounted ([Policy.protect]).
type protectKind uint8

const (
	// protectKeep is a directory between a writable root and a protected
	// path, bound read-write onto itself: a mount point cannot be renamed
	// or removed (EBUSY, rename(2)), so the job cannot move the protected
	// path away with it and put its own in its place.
	protectKeep protectKind = iota
	// protectDir is an existing protected directory, bound read-only.
	protectDir
	// protectFile is an existing protected file (anything but a
	// directory), bound read-only.
	protectFile
	// protectNewDir is a protected directory that does not exist: an
	// empty read-only tmpfs is mounted there (bwrap makes the mount
	// point, an empty directory on the host, which removePlaceholders
	// removes after the command).
	protectNewDir
	// protectAbsent is a missing protected file (.bashrc, .gitmodules,
	// .git/commondir in a project without them), or a missing directory
	// directly in a writable root: nothing is mounted; its directory is
	// watched while the command runs ([ProtectWatch]) and checked once it
	// has ended ([Policy.AfterCommand]), and whatever the command created
	// there is moved aside ([moveCreatedUnder]) and the attempt denied.
	protectAbsent
	// protectPending is a missing protected path whose parent is missing
	// too (.config/git/ in a home directory without .config): nothing is
	// mounted; the deepest directory of it that exists is watched, and
	// each directory the command makes on the way is watched in turn
	// ([ProtectWatch]), so that the path is moved aside as soon as it is
	// made, and the check after the command looks for it as well. Not
	// below a missing ".git": a repository the command makes is its own.
	protectPending
)

// pinned reports whether the kind binds an existing path, pinned by
// descriptor ([PinRoots]).
func (k protectKind) pinned() bool { return k <= protectFile }

// mounted reports whether the kind is a mount (all but protectAbsent and
// protectPending).
func (k protectKind) mounted() bool { return k <= protectNewDir }

// readOnly reports whether nothing below a mount of this kind can be
// written.
func (k protectKind) readOnly() bool { return k != protectKeep }

// ProtectedLink is a symlink inside a writable root on the way to a
// protected path (a ".git" that is a link to the real repository, say).
// No mount can pin a symlink (a mount point is never one), so the job can
// rename it and put a directory of its own in its place; the runner
// watches its directory while the job runs ([ProtectWatch]) and checks
// it after the job ([ProtectedLink.Unchanged]), and puts it back.
type ProtectedLink struct {
	// Path is the link's absolute path (its directory canonical).
	Path string
	// Target is the link's text, as readlink(2) returned it.
	Target   string
	dev, ino uint64
}

// Unchanged reports whether l.Path is still the same symlink (device and
// inode) with the same text. It reads the file system.
func (l ProtectedLink) Unchanged() bool {
	fi, err := os.Lstat(l.Path)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || uint64(st.Dev) != l.dev || st.Ino != l.ino {
		return false
	}
	target, err := os.Readlink(l.Path)
	return err == nil && target == l.Target
}

// protectMount is one mount of a policy's protected paths.
type protectMount struct {
	path string // canonical, absolute
	kind protectKind
}

// maxGitFile bounds how much of a ".git" file is read for its "gitdir:"
// line: git writes one short line.
const maxGitFile = 4096

// resolveProtect returns the mounts that keep entries read-only inside
// the writable roots (canonical), sorted so that a directory comes before
// what it contains, with the symlinks on the way to them and the
// repositories whose config they keep ([settleGitlinks] reads their
// indexes after the job). An entry ending in "/" names a directory (what is
// mounted where it does not exist). A relative entry names a path below each root (a
// filepath.Match glob is expanded there), an absolute one itself. Each is
// resolved as the host's tools would reach it: symlinks are followed, and
// a ".git" that is a file saying "gitdir: DIR" (a linked worktree, a
// submodule) leads to DIR, and to DIR's "commondir" as well, where git
// keeps the hooks and config a worktree shares; the ".git" file itself is
// protected too. An entry naming a repository's config (".git/config",
// [isGitConfigEntry]) protects as well what that repository's own files
// make git run or read ([statCache.repoProtected]): the config and hooks
// of every submodule's git directory below its "modules/", at any depth,
// and the hooks directory, included files and fsmonitor script its
// configuration names; with ".git/config" itself listed, so does the
// nearest repository above each root ([statCache.enclosingWorktree]).
// A path that resolves outside every writable root is
// read-only already and needs nothing. One that does not exist is covered
// when its parent directory does: bwrap makes the mount point on the
// host, which [Policy.protectPathsOf] names for the caller to
// remove after the job. Directly in a writable root it is watched instead
// ([Policy.protectPathsOf], [moveCreatedUnder]); see docs/policy.md.
//
// # Errors
//
// A protected path that is a writable root or contains one (wraps
// [ErrBadPath]): the root could not be written at all. A repository
// whose files cannot be read or searched within their bounds
// ([statCache.repoProtected]; wraps [ErrBadPath]): a path they make
// protected would be left writable.
func resolveProtect(roots, entries []string) ([]protectMount, []ProtectedLink, *gitRepos, error) {
	kinds := map[string]protectKind{}
	var links []ProtectedLink
	st := statCache{}
	add := func(path string, k protectKind) {
		if old, ok := kinds[path]; !ok || k > old && old == protectKeep {
			kinds[path] = k
		}
	}
	repos := newGitRepos()
	// protectOne protects c (below base, canonical) as resolved
	// ([statCache.resolveGit]), and returns where it resolved.
	protectOne := func(base, c string, dir bool, what string) ([]string, error) {
		targets, pointers, ls := st.resolveGit(base, c, 0)
		for _, t := range targets {
			if err := st.protectTarget(roots, t, dir, false, add); err != nil {
				return nil, fmt.Errorf("%w (%s)", err, what)
			}
		}
		for _, p := range pointers {
			if err := st.protectTarget(roots, p, false, true, add); err != nil {
				return nil, fmt.Errorf("%w (%s)", err, what)
			}
			repos.pointers[p] = true
		}
		for _, l := range ls {
			repos.pointers[l.Path] = true
		}
		for _, l := range ls {
			inRoot := slices.ContainsFunc(roots, func(r string) bool { return l.Path != r && Within(l.Path, r) })
			if inRoot && !slices.ContainsFunc(links, func(o ProtectedLink) bool { return o.Path == l.Path }) {
				links = append(links, l)
			}
		}
		return targets, nil
	}
	// protectRepos protects what the repositories whose config files
	// are configs (resolved), with the working tree worktree, make git
	// run ([statCache.repoProtected]), and those of their submodules'
	// working trees in turn; e is the protect entry that led there.
	protectRepos := func(configs []string, worktree, e string) error {
		type repo struct{ gitdir, worktree string }
		var todo []repo
		for _, t := range configs {
			todo = append(todo, repo{filepath.Dir(t), worktree})
		}
		for len(todo) > 0 {
			r := todo[0]
			todo = todo[1:]
			more, err := st.repoProtected(r.gitdir, r.worktree, repos)
			if err != nil {
				return fmt.Errorf("%w (protect %q)", err, e)
			}
			for _, g := range more {
				ts, err := protectOne("/", g.path, g.dir, fmt.Sprintf("protect %q, through %s", e, g.why))
				if err != nil {
					return err
				}
				if g.repo {
					for _, t := range ts {
						todo = append(todo, repo{filepath.Dir(t), worktreeOf(g.path)})
					}
				}
			}
		}
		return nil
	}
	for _, root := range roots {
		for _, e := range entries {
			var cands []string
			dir := strings.HasSuffix(e, "/")
			// Resolution starts at base, canonical already: a root's own
			// path needs no second walk.
			base := root
			if filepath.IsAbs(e) {
				base = "/"
				cands = st.expandEntry("/", strings.TrimPrefix(filepath.Clean(e), "/"))
			} else {
				rel := filepath.Clean(e)
				if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
					continue
				}
				cands = st.expandEntry(root, rel)
				more, err := anchoredAbove(root, rel)
				if err != nil {
					return nil, nil, nil, fmt.Errorf("%w (protect %q)", err, e)
				}
				cands = append(cands, more...)
			}
			if base == "/" {
				// An absolute entry is this job's concern only where it
				// lies inside its roots.
				cands = slices.DeleteFunc(cands, func(c string) bool {
					return !slices.ContainsFunc(roots, func(r string) bool { return Within(c, r) })
				})
			}
			if len(cands) > maxProtectMatches {
				return nil, nil, nil, fmt.Errorf("sandbox: protect %q matches %d paths in %s, more than the %d a sandbox can mount (a job may have made them: remove what is not yours there, or narrow the policy's protect list): %w", e, len(cands), root, maxProtectMatches, ErrBadPath)
			}
			for _, c := range cands {
				targets, err := protectOne(base, c, dir, fmt.Sprintf("protect %q", e))
				if err != nil {
					return nil, nil, nil, err
				}
				if !isGitConfigEntry(e) {
					continue
				}
				if err := protectRepos(targets, worktreeOf(c), e); err != nil {
					return nil, nil, nil, err
				}
			}
		}
		// A root inside a repository's working tree (a subdirectory of
		// a checkout): that repository's files may name paths inside
		// the root (its hooksPath, a submodule's .git).
		if !slices.ContainsFunc(entries, func(e string) bool { return filepath.Clean(e) == ".git/config" }) {
			continue
		}
		if wt := st.enclosingWorktree(root); wt != "" {
			targets, _, _ := st.resolveGit("/", filepath.Join(wt, ".git", "config"), 0)
			if err := protectRepos(targets, wt, ".git/config"); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	paths := make([]string, 0, len(kinds))
	for p := range kinds {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var out []protectMount
	for _, p := range paths {
		// Below a read-only mount nothing can be written (nor a mount
		// point made): a mount there would only cost.
		if slices.ContainsFunc(out, func(m protectMount) bool { return m.kind.readOnly() && Within(p, m.path) }) {
			continue
		}
		out = append(out, protectMount{path: p, kind: kinds[p]})
	}
	if len(out) > maxProtectMounts {
		return nil, nil, nil, fmt.Errorf("sandbox: the protect list resolves to %d paths in %s, more than the %d a sandbox can mount (a job may have made them: remove the repositories that are not yours there, or narrow the policy's protect list): %w", len(out), strings.Join(roots, ", "), maxProtectMounts, ErrBadPath)
	}
	return out, links, repos, nil
}

// maxProtectMounts bounds the mounts one policy's protect list resolves
// to: each takes bwrap arguments, of which it takes at most 9,000.
const maxProtectMounts = 1024

// rootInProtectedError is the error for a writable root that is or lies
// inside a protected path: it could not be written at all.
type rootInProtectedError struct {
	root, protected string
}

func (e *rootInProtectedError) Error() string {
	return fmt.Sprintf("sandbox: writable root %q is or lies inside the protected path %q", e.root, e.protected)
}

func (e *rootInProtectedError) Unwrap() error { return ErrBadPath }

func insideProtected(root, protected string) error {
	return &rootInProtectedError{root: root, protected: protected}
}

// expandEntry returns the paths a protect entry names: the entry itself
// when it has no metacharacters; else the matches (sorted) of its
// components up to the last one with a metacharacter, each followed by
// the rest as written, which need not exist (a .git file's gitdir or a
// missing hooks directory is resolved later).
func (st statCache) expandEntry(base, rel string) []string {
	if !strings.ContainsAny(rel, `*?[\`) {
		return []string{filepath.Join(base, rel)}
	}
	parts := strings.Split(rel, "/")
	last := 0
	for i, c := range parts {
		if strings.ContainsAny(c, `*?[\`) {
			last = i
		}
	}
	// Only rel is a pattern: base, a writable root, may hold any byte
	// ("br[1]"), which must not be read as one.
	// The entries share their patterns ("*/.git/hooks/", "*/.git/config"):
	// each is matched once per resolution, kept in st under a key no
	// path has.
	pattern := strings.Join(parts[:last+1], "/")
	var m []string
	key := "\x00glob\x00" + base + "\x00" + pattern
	if r, ok := st[key]; ok {
		m = r.matches
	} else {
		m, _ = fs.Glob(os.DirFS(base), pattern) // only ErrBadPattern: matches nothing
		st[key] = statResult{matches: m}
	}
	rest := filepath.Join(parts[last+1:]...)
	var out []string
	for _, c := range m {
		// A match with no .git where the entry goes on into git's files
		// (".git/...", ".gitmodules") names nothing to protect (a missing
		// .git is the job's own), and in a workspace of many directories
		// would cost a resolution, or a watch, each.
		if len(parts) > last+1 && (parts[last+1] == ".git" || parts[last+1] == ".gitmodules") {
			if _, err := st.lstat(filepath.Join(base, c, ".git")); err != nil {
				continue
			}
		}
		out = append(out, filepath.Join(base, c, rest))
	}
	return out
}

// anchoredAbove returns what the relative protect entry rel names below
// root when it starts above it: root's last k components match rel's
// first k (a glob component matching), so that rel continues inside root
// (a root ".../.git" with ".git/hooks" gives ".../.git/hooks"; one
// ".../.config" with ".config/git/" gives ".../.config/git"). A root that
// rel names itself, or that lies inside what it names (a root
// ".../.git/hooks/x"), is an error wrapping [ErrBadPath]: the job would
// write the protected path, which no mount inside the root can keep.
func anchoredAbove(root, rel string) ([]string, error) {
	parts := strings.Split(rel, "/")
	comps := strings.Split(strings.TrimPrefix(root, "/"), "/")
	match := func(names, pats []string) bool {
		for i, pat := range pats {
			if ok, err := filepath.Match(pat, names[i]); err != nil || !ok {
				return false
			}
		}
		return true
	}
	for i := 0; i+len(parts) <= len(comps); i++ {
		if match(comps[i:i+len(parts)], parts) {
			named := "/" + filepath.Join(comps[:i+len(parts)]...)
			return nil, insideProtected(root, named)
		}
	}
	var out []string
	for k := 1; k < len(parts) && k <= len(comps); k++ {
		if match(comps[len(comps)-k:], parts[:k]) {
			out = append(out, statCache{}.expandEntry(root, filepath.Join(parts[k:]...))...)
		}
	}
	return out, nil
}

// maxProtectMatches bounds the paths one glob of the protect list may
// expand to in one root: each becomes mounts (and bwrap takes at most
// 9,000 arguments), pinned descriptors and watches, and a job may make
// directories for a later job's glob to match.
const maxProtectMatches = 256

// protectTarget adds the mounts that protect t (resolved; it may not
// exist) when it lies inside one of roots: the directories between the
// deepest such root and t are kept, and t is bound read-only, or covered
// when missing (with an empty directory when dir, else a file). pointer
// marks a ".git" file, which is protected where it is. A t outside every
// root needs nothing.
func (st statCache) protectTarget(roots []string, t string, dir, pointer bool, add func(string, protectKind)) error {
	root := ""
	for _, r := range roots {
		if Within(r, t) {
			return insideProtected(r, t)
		}
		if Within(t, r) && len(r) > len(root) {
			root = r
		}
	}
	if root == "" {
		return nil
	}
	fi, err := st.lstat(t)
	kind := protectFile
	switch {
	case err == nil && fi.IsDir():
		kind = protectDir
	case err == nil:
	case pointer:
		return nil
	default:
		parent := filepath.Dir(t)
		if pi, err := st.lstat(parent); err != nil || !pi.IsDir() {
			return st.protectPendingTarget(root, t, add)
		}
		if !dir || parent == root {
			// A file placeholder would change what programs see (git
			// fails on an unreadable .git/commondir, `git add -A` on an
			// unreadable .bashrc), and one per missing entry would
			// clutter a project's top directory: the path is watched,
			// and what the job creates there is moved aside
			// (protectAbsent). The directories between the root and it
			// are kept like any protected path's, so that the job
			// cannot move the watched directory away and put one of
			// its own, holding the path, in its place.
			kind = protectAbsent
		} else {
			kind = protectNewDir
		}
	}
	for a := filepath.Dir(t); a != root && Within(a, root); a = filepath.Dir(a) {
		add(a, protectKeep)
	}
	add(t, kind)
	return nil
}

// protectPendingTarget adds t, a protected path whose parent is missing,
// as protectPending, with the directories between root and the deepest
// of t's that exists kept, so that the job cannot swap the watched
// directory for one of its own. Nothing is added when that directory's
// first missing entry on the way to t is ".git" (what a job's `git init`
// makes is its own repository), or when something on the way is not a
// directory (nothing can be made below it).
func (st statCache) protectPendingTarget(root, t string, add func(string, protectKind)) error {
	a := filepath.Dir(t)
	for {
		fi, err := st.lstat(a)
		if err == nil {
			if !fi.IsDir() {
				return nil
			}
			break
		}
		if a == root || !Within(a, root) {
			return nil
		}
		a = filepath.Dir(a)
	}
	rel, err := filepath.Rel(a, t)
	if err != nil || strings.Split(rel, "/")[0] == ".git" {
		return nil
	}
	for k := a; k != root && Within(k, root); k = filepath.Dir(k) {
		add(k, protectKeep)
	}
	add(t, protectPending)
	return nil
}

// statCache remembers lstat(2) results for one [resolveProtect]: the
// entries share components (.git for .git/hooks and .git/config), and
// each target's own lstat was made while resolving it.
type statCache map[string]statResult

type statResult struct {
	fi      os.FileInfo
	err     error
	matches []string // a glob's ([statCache.expandEntry])
}

func (st statCache) lstat(path string) (os.FileInfo, error) {
	if r, ok := st[path]; ok {
		return r.fi, r.err
	}
	fi, err := os.Lstat(path)
	st[path] = statResult{fi: fi, err: err}
	return fi, err
}

// resolveGit resolves path as the host would reach it: every symlink
// followed (as far as the path exists; at most 40, SYMLOOP_MAX), and a
// regular file named ".git" with more path after it replaced by the
// directory its "gitdir:" line names, relative to the file's directory
// (gitrepository-layout(5)). It returns the resolved paths (a second one
// through the gitdir's "commondir" file, when there is one) and the
// ".git" files passed through, and the symlinks followed. Paths past a
// missing component stay as written. base is a canonical directory that
// path starts with (or "/"): the walk starts there.
func (st statCache) resolveGit(base, path string, depth int) (targets, pointers []string, links []ProtectedLink) {
	if depth > 8 {
		return []string{path}, nil, nil
	}
	path = filepath.Clean(path)
	resolved := "/"
	if base != "/" && strings.HasPrefix(path, base+"/") {
		resolved, path = base, strings.TrimPrefix(path, base)
	}
	rest := strings.Split(strings.TrimPrefix(path, "/"), "/")
	for hops := 0; len(rest) > 0; {
		part := rest[0]
		rest = rest[1:]
		if part == "" || part == "." {
			continue
		}
		if part == ".." {
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, part)
		if procOrDev(next) {
			// A per-process link (/proc/self/cwd, /dev/fd/N) leads
			// where the reader stands, not where git will: nothing is
			// resolved through it.
			return []string{filepath.Join(append([]string{next}, rest...)...)}, pointers, links
		}
		fi, err := st.lstat(next)
		switch {
		case err != nil:
			return []string{filepath.Join(append([]string{next}, rest...)...)}, pointers, links
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(next)
			if hops++; err != nil || hops > 40 {
				return []string{filepath.Join(append([]string{next}, rest...)...)}, pointers, links
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				links = append(links, ProtectedLink{Path: next, Target: target, dev: uint64(st.Dev), ino: st.Ino})
			}
			if filepath.IsAbs(target) {
				resolved = "/"
			}
			rest = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), rest...)
		case part == ".git" && fi.Mode().IsRegular() && len(rest) > 0:
			gitdir, ok := readGitdir(next)
			if !ok {
				resolved = next
				continue
			}
			pointers = append(pointers, next)
			// Joined as git joins them, not cleaned: "link/../g" is
			// "g" beside where link leads, which the walk below
			// finds by taking ".." after the link.
			gitdir = joinGitPath(resolved, gitdir)
			tail := filepath.Join(rest...)
			t, p, l := st.resolveGit("/", gitdir+"/"+tail, depth+1)
			targets, pointers, links = append(targets, t...), append(pointers, p...), append(links, l...)
			if common, ok := readCommondir(gitdir); ok {
				t, p, l := st.resolveGit("/", common+"/"+tail, depth+1)
				targets, pointers, links = append(targets, t...), append(pointers, p...), append(links, l...)
			}
			return targets, pointers, links
		default:
			resolved = next
		}
	}
	return []string{resolved}, pointers, links
}

// readGitdir returns the directory a ".git" file at path names, as git
// reads it (read_gitfile_gently in git's setup.c): the file must start
// with "gitdir: "; the rest, less the line ends ("\n", "\r") at its end
// and anything from a NUL on, is the directory, relative to the file's
// own. Nothing else is trimmed: "gitdir: x " names "x ". false for a
// file that is not such a file (or is a FIFO, a device, larger than
// maxGitFile, or a symlink: the caller resolves those).
func readGitdir(path string) (string, bool) {
	return readGitPointer(path, "gitdir: ")
}

// readCommondir returns the common directory the git directory gitdir
// names in its "commondir" file (get_common_dir_noenv in git's setup.c:
// the content less its final line ends, relative to gitdir), joined as
// git joins it ([joinGitPath]); false when there is none.
func readCommondir(gitdir string) (string, bool) {
	common, ok := readGitPointer(gitdir+"/commondir", "")
	if !ok {
		return "", false
	}
	return joinGitPath(gitdir, common), true
}

// joinGitPath is git's join of a directory and a path read from a file
// (a gitdir or commondir line): rel itself when absolute, else dir, "/"
// and rel, not cleaned, so that ".." after a symlink is taken where the
// link leads, as the kernel and git's real_path take it.
func joinGitPath(dir, rel string) string {
	if filepath.IsAbs(rel) {
		return rel
	}
	return dir + "/" + rel
}

// readGitPointer reads the small regular file path (not following a
// symlink at its end, never blocking on a FIFO) as git reads a pointer
// file: it must start with prefix; its line ends at the end are dropped,
// and anything from a NUL on (git reads it as a C string).
func readGitPointer(path, prefix string) (string, bool) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > maxGitFile {
		return "", false
	}
	b, err := io.ReadAll(io.LimitReader(f, maxGitFile+1))
	if err != nil || len(b) > maxGitFile {
		return "", false
	}
	b, ok := bytes.CutPrefix(b, []byte(prefix))
	if !ok {
		return "", false
	}
	b = bytes.TrimRight(b, "\r\n")
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b), len(b) > 0
}

// removePlaceholders removes what bwrap left on the host as the mount
// points of protected paths that did not exist ([Policy.protectPathsOf]):
// each one that is still an empty regular file or an empty directory.
// Anything else, something a process put there since, is kept. Each is
// removed in its directory opened without following a symlink
// ([OpenNoSymlinks]), so a directory on the way that a job turned into a
// symlink makes it keep the placeholder, never remove elsewhere. Errors
// are ignored: a placeholder left is an empty file or directory. Call it
// once every process of the command has ended.
func removePlaceholders(paths []string) {
	for _, p := range paths {
		dir, err := OpenNoSymlinks(filepath.Dir(p))
		if err != nil {
			continue
		}
		dfd, base := int(dir.Fd()), filepath.Base(p)
		var st unix.Stat_t
		if unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				if st.Size == 0 {
					_ = unix.Unlinkat(dfd, base, 0)
				}
			case unix.S_IFDIR:
				_ = unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR) // fails unless empty
			}
		}
		dir.Close()
	}
}

// moveCreatedUnder moves aside what the command created at paths that
// were protected and did not exist ([Policy.watchedPaths]): each is
// renamed to PATH.paddock-created-JOBID (a random suffix added when that
// is taken) in its directory, with RENAME_NOREPLACE, so nothing outside
// it is touched. It returns one sentence per path it found, for the
// attempt's reason, or "" when the command created none. The paths lie
// inside roots (the writable roots, mount points the job cannot move),
// and each is reached from
// the deepest root that holds it one entry at a time, never through a
// symlink: a directory on the way that the job took its own permission
// from is given it back ([lookAt]), and a symlink the job put on the way
// (to a directory of its own holding the path, which host tools would
// follow) is moved aside and reported; a root that is no longer what it
// was was changed from outside the job, and is skipped. Call it once
// every process of the command has ended.
func moveCreatedUnder(roots, paths []string, jobID string) string {
	var out []string
	for _, p := range paths {
		root := ""
		for _, r := range roots {
			if Within(p, r) && len(r) > len(root) {
				root = r
			}
		}
		if root == "" || root == p {
			continue
		}
		if msg := walkCreated(root, p, jobID); msg != "" {
			out = append(out, msg)
		}
	}
	return strings.Join(out, "; ")
}

// walkCreated settles p, below root, for [moveCreatedUnder].
func walkCreated(root, p, jobID string) string {
	return walkAside(root, p, jobID, "the job created the protected path "+p)
}

// walkAside moves aside what is at p, below root, reached from root one
// entry at a time as [moveCreatedUnder] says, and returns lead with what
// it did, or "" when nothing is at p.
func walkAside(root, p, jobID, lead string) string {
	cur, err := OpenNoSymlinks(root)
	if err != nil {
		return ""
	}
	defer func() { cur.Close() }()
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return ""
	}
	parts := strings.Split(rel, "/")
	at := root
	cannot := func(where string, err error) string {
		return fmt.Sprintf("the job may have created the protected path %s, which paddock cannot reach (%s: %v): check it before using that directory", p, where, err)
	}
	for _, c := range parts[:len(parts)-1] {
		dfd, next := int(cur.Fd()), filepath.Join(at, c)
		var st unix.Stat_t
		switch err := lookAt(dfd, c, &st); {
		case errors.Is(err, unix.ENOENT):
			return ""
		case err != nil:
			return cannot(next, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
		case unix.S_IFLNK:
			return symlinkOnTheWay(dfd, at, next, p, jobID)
		default:
			return "" // nothing can be below a file
		}
		fd, err := unix.Openat(dfd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return cannot(next, err)
		}
		cur.Close()
		cur, at = os.NewFile(uintptr(fd), next), next
	}
	return moveAsideIn(int(cur.Fd()), p, jobID, lead)
}

// moveCreatedIn is [moveCreatedUnder] for the one path p, its directory open
// as dfd (p names it in the sentence returned).
func moveCreatedIn(dfd int, p, jobID string) string {
	return moveAsideIn(dfd, p, jobID, "the job created the protected path "+p)
}

// moveAsideIn moves aside what is at p, in its directory open as dfd
// ([moveAsideSaying]), and returns lead with what it did, or "" when
// nothing is there.
func moveAsideIn(dfd int, p, jobID, lead string) string {
	var st unix.Stat_t
	switch err := lookAt(dfd, filepath.Base(p), &st); {
	case errors.Is(err, unix.ENOENT):
		return ""
	case err != nil:
		return fmt.Sprintf("the job may have created the protected path %s, which paddock cannot look at (%v): check it before using that directory", p, err)
	}
	return moveAsideSaying(lead, dfd, filepath.Dir(p), filepath.Base(p), jobID)
}

// asideName returns the name what a job left at base is moved to:
// base + "." + tag + "-" + jobID, or, when that would be longer than a
// file name may be (NAME_MAX, 255 bytes, with room for a suffix),
// "." + tag + "-" + jobID.
func asideName(base, tag, jobID string) string {
	name := base + "." + tag + "-" + jobID
	if len(name)+asideSuffixLen > unix.NAME_MAX {
		name = "." + tag + "-" + jobID
	}
	return name
}

// asideSuffixLen is the length of the random suffix moveAside adds
// when the plain name is taken: "." and 16 hexadecimal digits.
const asideSuffixLen = 17

// asideTries bounds moveAside's random suffixes: each is taken by
// chance with a probability of about 2^-64 at most.
const asideTries = 8

// moveAside renames base, in the directory open as dfd, to its aside
// name ([asideName]: base.TAG-JOBID, shortened for a long base) with
// RENAME_NOREPLACE, or, when that is taken, to the name with a random
// suffix (".0123456789abcdef"), and returns the name used. The job
// knows its id and may have made the plain name and any numbered one in
// advance, so the suffix is one it cannot guess, and no name is looked
// up before the rename. Nothing outside the directory is touched.
//
// Errors: renameat2(2)'s, or EEXIST after asideTries suffixes taken.
func moveAside(dfd int, base, tag, jobID string) (string, error) {
	return moveAsideTo(dfd, base, dfd, tag, jobID)
}

// moveAsideTo is [moveAside] into the directory open as tfd (on the same
// file system) rather than dfd: the aside name is taken there.
func moveAsideTo(dfd int, base string, tfd int, tag, jobID string) (string, error) {
	name := asideName(base, tag, jobID)
	err := unix.Renameat2(dfd, base, tfd, name, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EACCES) && giveBackRights(dfd, 0o300) {
		// The job took away its own write permission on the directory
		// (a worker that is not root is held to it), right after making
		// the path: given back, as lookAt gives back search.
		err = unix.Renameat2(dfd, base, tfd, name, unix.RENAME_NOREPLACE)
	}
	for i := 0; errors.Is(err, unix.EEXIST) && i < asideTries; i++ {
		aside := fmt.Sprintf("%s.%016x", name, rand.Uint64())
		if err = unix.Renameat2(dfd, base, tfd, aside, unix.RENAME_NOREPLACE); err == nil {
			return aside, nil
		}
	}
	if err != nil {
		return "", err
	}
	return name, nil
}

// readlinkAt returns the text of the symlink name in the directory open
// as dfd, read into buf, or "" when it cannot be read or fills buf (a
// text longer than the caller expects).
func readlinkAt(dfd int, name string, buf []byte) string {
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil || n >= len(buf) {
		return ""
	}
	return string(buf[:n])
}

// lookAt stats name, an entry of the directory open as dfd, into st
// (not following a symlink): nil when it is there, an error wrapping
// ENOENT when it is not, another error when it cannot tell. A directory
// whose owner took away its own search permission (a job running as the
// worker's user may, on its own workspace) is given it back (u+rwx):
// what is in it must be looked at.
func lookAt(dfd int, name string, st *unix.Stat_t) error {
	err := unix.Fstatat(dfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
	if !errors.Is(err, unix.EACCES) || !giveBackRights(dfd, 0o700) {
		return err
	}
	return unix.Fstatat(dfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

// giveBackRights adds the owner's permission bits (0o700 for read, write
// and search; 0o300 for write and search) to the directory open as dfd
// (chmod(2) through /proc/self/fd: dfd may be an O_PATH descriptor) and
// reports whether it could: only its owner (or root) may, and a job
// running as the worker's user owns what it made in its workspace.
func giveBackRights(dfd int, bits uint32) bool {
	var dir unix.Stat_t
	if unix.Fstat(dfd, &dir) != nil {
		return false
	}
	return unix.Chmod("/proc/self/fd/"+strconv.Itoa(dfd), (dir.Mode&0o7777)|bits) == nil
}

// moveAsideSaying moves name, in the directory dir open as dfd, aside
// ([moveAside]) and returns msg followed by where it went, or by why it
// could not be moved.
func moveAsideSaying(msg string, dfd int, dir, name, jobID string) string {
	aside, err := moveAside(dfd, name, "paddock-created", jobID)
	if err != nil {
		return msg + fmt.Sprintf("; moving it aside failed: %v: remove it before using that directory", err)
	}
	return msg + "; it is now " + filepath.Join(dir, aside)
}

// symlinkOnTheWay is the sentence for a symlink the job put at made, on
// the way to the protected path t, moved aside from the directory dir
// open as dfd: host tools would follow it to wherever it leads.
func symlinkOnTheWay(dfd int, dir, made, t, jobID string) string {
	return moveAsideSaying(fmt.Sprintf("the job made %s, on the way to the protected path %s, a symlink", made, t), dfd, dir, filepath.Base(made), jobID)
}

// existsAt reports whether name is an entry of the directory open as dfd
// (not following a symlink).
func existsAt(dfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// AfterCommand settles what a command run under p did to its protected
// paths, once every process of it has ended: a symlink that led to a
// protected path and was replaced is put back ([ProtectedLink]), what it
// created at a protected path that did not exist is moved aside
// ([moveCreatedUnder]), a submodule the command made that would run a
// program on the host's git status is taken out of git's way
// ([settleGitlinks]), and the placeholders bwrap made are removed
// ([removePlaceholders]). It returns what it found, one sentence per
// path for the attempt's reason, or "" when the command touched none; a
// caller denies the attempt when it is not "". Everything is moved in
// the paths' directories opened without following a symlink: the caller
// may be root, the tree is the command's.
//
// w is the command's watch ([ProtectWatchers.Watch]), or nil: it is stopped
// first, what it found leads the result, and the links it put back are
// checked as it left them. The check after the command stays: the job
// may have created a path again between the watch's move and its end.
func (p Policy) AfterCommand(jobID string, w *ProtectWatch) string {
	var found []string
	links := p.protectedLinks()
	if w != nil {
		found = append(found, w.Stop())
		links = w.currentLinks()
	}
	for _, s := range []string{restoreLinks(links, jobID), moveCreatedUnder(p.Roots(), p.watchedPaths(), jobID), settleGitlinks(p.Roots(), p.repos, jobID), settleNewTrust(p, jobID)} {
		if s != "" {
			found = append(found, s)
		}
	}
	removePlaceholders(p.protectPathsOf(protectNewDir))
	found = slices.DeleteFunc(found, func(s string) bool { return s == "" })
	return strings.Join(found, "; ")
}

// restoreLinks checks, once a job's processes have all ended, the
// symlinks inside its writable roots that led to protected paths
// ([Policy.protectedLinks]): a link cannot be pinned by a mount,
// so a job may have renamed it and put a directory of its own in its
// place (a .git with its own hooks, which git on the host would run).
// Each link found changed is put back as it was, and what the job left at
// its path is moved aside to PATH.paddock-replaced-JOBID (a number is
// added when that exists). It returns what it found and did, as one
// sentence per link for the attempt's reason, or "" when every link is
// unchanged. Each link put back is updated in links to the one made (its
// new inode), so that a later check of the same slice ([ProtectWatch])
// finds it unchanged.
//
// The worker may be root and the tree is the job's: every step works in
// the link's directory opened without following a symlink
// ([OpenNoSymlinks]), never by path, so a job that turned a
// directory on the way into a symlink to elsewhere (/etc) makes the
// restore refuse, not rename or create there.
func restoreLinks(links []ProtectedLink, jobID string) string {
	var out []string
	for i, l := range links {
		if l.Unchanged() {
			continue
		}
		dir, err := OpenNoSymlinks(filepath.Dir(l.Path))
		if err != nil {
			out = append(out, fmt.Sprintf("%s; its directory is no longer the one it was (%v), so nothing was changed: check it before running git there", replacedMsg(l), err))
			continue
		}
		if s := restoreLinkIn(int(dir.Fd()), &links[i], jobID); s != "" {
			out = append(out, s)
		}
		dir.Close()
	}
	return strings.Join(out, "; ")
}

// replacedMsg is the start of the sentence about a replaced link l.
func replacedMsg(l ProtectedLink) string {
	return fmt.Sprintf("the job replaced the symlink %s (it leads to a protected path)", l.Path)
}

// linkUnchangedIn reports whether l's entry in the directory open as dfd
// is still the same symlink (device and inode) with the same text.
func linkUnchangedIn(dfd int, l ProtectedLink) bool {
	base := filepath.Base(l.Path)
	var st unix.Stat_t
	if unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Dev != l.dev || st.Ino != l.ino {
		return false
	}
	return readlinkAt(dfd, base, make([]byte, len(l.Target)+1)) == l.Target
}

// restoreLinkIn puts l back in its directory, open as dfd, unless it is
// unchanged there ([linkUnchangedIn]: ""), moving aside what is there,
// and returns the sentence saying what it found and did. l is updated
// to the link made, when what is there just after is a symlink with its
// text.
func restoreLinkIn(dfd int, l *ProtectedLink, jobID string) string {
	if linkUnchangedIn(dfd, *l) {
		return ""
	}
	msg := replacedMsg(*l)
	base := filepath.Base(l.Path)
	if existsAt(dfd, base) {
		aside, err := moveAside(dfd, base, "paddock-replaced", jobID)
		if err != nil {
			return fmt.Sprintf("%s; moving what is there aside failed: %v: check it before running git there", msg, err)
		}
		msg += "; what the job left there is now " + filepath.Join(filepath.Dir(l.Path), aside)
	}
	err := unix.Symlinkat(l.Target, dfd, base)
	if errors.Is(err, unix.EACCES) && giveBackRights(dfd, 0o300) {
		err = unix.Symlinkat(l.Target, dfd, base)
	}
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return msg + "; putting the link back failed: something was created there again: check it before running git there"
		}
		return fmt.Sprintf("%s; putting the link back failed: %v: check it before running git there", msg, err)
	}
	var st unix.Stat_t
	if unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if readlinkAt(dfd, base, make([]byte, len(l.Target)+1)) == l.Target {
			l.dev, l.ino = st.Dev, st.Ino
		}
	}
	return msg + "; paddock put the link back (-> " + l.Target + ")"
}

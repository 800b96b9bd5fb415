package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// A repository's index is the job's to write (git add needs it), and so
// is any directory inside a writable root. A job could therefore make
// the host's `git status`, run at the top of a repository whose config
// and hooks the fence keeps, enter a repository of the job's own making:
// it makes a directory a repository whose config names a program
// (core.fsmonitor), and adds a gitlink (a submodule entry, mode 0160000)
// for that directory to the index; or it makes the ".git" of a submodule
// that is not checked out. git status then runs `git status` in that
// submodule, which runs the program (gitsubmodules(7), "populated"). So
// once a job has ended, each repository whose config the policy
// protects has its index read for gitlinks ([settleGitlinks]), and each
// populated one whose git directory the job could have written is
// looked at: one whose configuration or hooks run anything is taken
// out of git's way.

// gitRepo is a repository whose config a policy protects: its git
// directory (canonical) and its working tree ("" when it has none known).
type gitRepo struct {
	gitdir, worktree string
}

// gitRepos are the repositories one policy protects ([resolveProtect]):
// list holds each (git directory, working tree) pair once, in the order
// found; trusted holds their git directories and those of their
// submodules below "modules/" (canonical) that existed, whose config
// and hooks the policy keeps as they were. The zero value is not ready: use
// [newGitRepos].
type gitRepos struct {
	list    []gitRepo
	trusted map[string]bool
}

func newGitRepos() *gitRepos { return &gitRepos{trusted: map[string]bool{}} }

// add records the pair, and reports whether it was new.
func (g *gitRepos) add(gitdir, worktree string) bool {
	r := gitRepo{gitdir: gitdir, worktree: worktree}
	if slices.Contains(g.list, r) {
		return false
	}
	g.list = append(g.list, r)
	g.trust(gitdir)
	return true
}

// trust records gitdir as trusted when it is a directory: a git
// directory that does not exist (a submodule not checked out) had
// nothing kept, and what the job makes there is its own.
func (g *gitRepos) trust(gitdir string) {
	if fi, err := os.Lstat(gitdir); err == nil && fi.IsDir() {
		g.trusted[gitdir] = true
	}
}

// maxGitlinkRepos bounds how many repositories [settleGitlinks] reads the
// index of for one job (the policy's, and the submodules' below them),
// and how many git directories it looks at: a submodule past either
// bound counts as one that runs a program.
const maxGitlinkRepos = 1024

// maxGitHooks bounds how many entries of a hooks directory
// [gitdirRuns] looks at.
const maxGitHooks = 4096

// settleGitlinks checks, once every process of a job has ended, the
// gitlinks of the repositories repos.list (their own and, in turn, those of
// their submodules, as git status recurses) whose ".git" lies inside
// roots: a submodule whose git directory is not one of repos.trusted is looked at
// ([gitdirRuns]), and when its configuration or hooks run a program, its
// ".git" is moved aside to ".git.paddock-created-JOBID" (as a created
// protected path is, [walkAside]), so that git on the host sees the
// submodule as not checked out. A directory the index keeps sparse
// that exists inside a root is moved aside too: git would expand it and
// enter the submodules of its tree, which paddock does not read. An
// index that cannot be read (the job may have written it so) inside a
// root is moved aside the same way: git then sees every file as new, and
// nothing as a submodule. It
// returns one sentence per thing it found and did, or "" when it found
// none. Every step reads the tree as git would (following symlinks):
// nothing of the job runs any more, and the roots' locks keep other jobs
// out of these trees.
func settleGitlinks(roots []string, repos *gitRepos, jobID string) string {
	if repos == nil {
		return ""
	}
	trusted := repos.trusted
	inRoots := func(p string) string {
		root := ""
		for _, r := range roots {
			if Within(p, r) && p != r && len(r) > len(root) {
				root = r
			}
		}
		return root
	}
	var out []string
	seen := map[string]bool{}
	todo := slices.Clone(repos.list)
	looked := 0 // git directories gitdirRuns looked at
	for len(todo) > 0 {
		r := todo[0]
		todo = todo[1:]
		if r.worktree == "" || seen[r.gitdir+"\x00"+r.worktree] {
			continue
		}
		seen[r.gitdir+"\x00"+r.worktree] = true
		index := filepath.Join(r.gitdir, "index")
		links, err := gitlinksCache.read(r.gitdir, index, objectHashSize(r.gitdir))
		if err != nil {
			if root := inRoots(index); root != "" {
				msg := fmt.Sprintf("paddock cannot read the git index %s, to see which submodules git would enter (%v)", index, err)
				out = append(out, settleSaying(msg, root, index, jobID))
			}
			continue
		}
		for _, rel := range links {
			if dir, ok := strings.CutSuffix(rel, "/"); ok {
				// A sparse directory: git expands it, and enters the
				// submodules of its tree, once it exists.
				sparse := filepath.Join(r.worktree, dir)
				root := inRoots(sparse)
				if _, err := os.Lstat(sparse); err != nil || root == "" {
					continue
				}
				msg := fmt.Sprintf("the job made %s, a directory the index of %s keeps sparse (its submodules are in trees paddock does not read)", sparse, r.gitdir)
				out = append(out, settleSaying(msg, root, sparse, jobID))
				continue
			}
			sub := filepath.Join(r.worktree, rel)
			dotgit := filepath.Join(sub, ".git")
			root := inRoots(dotgit)
			if root == "" {
				continue // not the job's to make
			}
			g, ok := submoduleGitdir(dotgit)
			if !ok {
				continue // not checked out: git does not enter it
			}
			why := ""
			switch {
			case trusted[g]:
			case looked >= maxGitlinkRepos:
				why = fmt.Sprintf("it is one of more than %d submodules the job made, more than paddock looks at", maxGitlinkRepos)
			default:
				looked++
				why = gitdirRuns(g, sub, trusted)
			}
			if why == "" && len(seen)+len(todo) >= maxGitlinkRepos {
				why = fmt.Sprintf("it is one of more than %d repositories below %s, more than paddock reads the index of", maxGitlinkRepos, r.worktree)
			}
			if why == "" {
				todo = append(todo, gitRepo{gitdir: g, worktree: sub})
				continue
			}
			msg := fmt.Sprintf("the submodule %s in the index of %s leads to a git directory the job could write, %s, that makes git on the host run a program (%s)", sub, r.gitdir, g, why)
			out = append(out, settleSaying(msg, root, dotgit, jobID))
		}
	}
	return strings.Join(out, "; ")
}

// settleSaying moves p, below root, aside ([walkAside]) and returns msg
// with what became of it.
func settleSaying(msg, root, p, jobID string) string {
	if did := walkAside(root, p, jobID, msg+", so "+p+" was moved aside"); did != "" {
		return did
	}
	return msg + "; it is gone now"
}

// submoduleGitdir returns the canonical git directory a submodule's
// ".git" at dotgit leads to, as git finds it (gitrepository-layout(5)):
// the directory itself, or the one a ".git" file's "gitdir:" line names,
// relative to the file's directory. ok is false when dotgit is neither,
// or leads nowhere: git does not enter such a submodule.
func submoduleGitdir(dotgit string) (string, bool) {
	fi, err := os.Stat(dotgit)
	if err != nil {
		return "", false
	}
	dir := dotgit
	if fi.Mode().IsRegular() {
		d, ok := readGitdir(dotgit)
		if !ok {
			return "", false
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(filepath.Dir(dotgit), d)
		}
		dir = d
	} else if !fi.IsDir() {
		return "", false
	}
	c, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", false
	}
	if fi, err := os.Stat(c); err != nil || !fi.IsDir() {
		return "", false
	}
	return c, true
}

// objectHashSize returns the size in bytes of the object names of the
// repository whose git directory is gitdir: 32 when its configuration
// (or that of its "commondir") sets extensions.objectFormat to sha256,
// else 20 (SHA-1; gitrepository-layout(5), "extensions.objectFormat").
func objectHashSize(gitdir string) int {
	dirs := []string{gitdir}
	if common, ok := readLine(filepath.Join(gitdir, "commondir")); ok {
		if !filepath.IsAbs(common) {
			common = filepath.Join(gitdir, common)
		}
		dirs = append(dirs, common)
	}
	for _, d := range dirs {
		name := filepath.Join(d, "config")
		data, err := readSmallFile(name, maxGitConfigBytes)
		if err != nil {
			continue
		}
		vars, err := parseGitConfig(name, data)
		if err != nil {
			continue
		}
		for _, v := range vars {
			if v.key() == "extensions.objectformat" && strings.EqualFold(v.value, "sha256") {
				return 32
			}
		}
	}
	return 20
}

// gitdirRuns returns why git, entering the submodule whose working tree
// is worktree and whose git directory is gitdir, would run a program or
// read configuration beyond that directory's own, or "" when it would
// not: its "config" or "config.worktree" sets a key whose value git runs
// ([isGitCommandKey]), core.fsmonitor to a hook, core.hooksPath,
// core.worktree to another directory than worktree, an include, or
// protocol.allow or protocol.<name>.allow to "always"; it has a
// "commondir" leading elsewhere than to one of trusted; or its "hooks"
// directory holds anything but git's ".sample" files and directories. A
// configuration git could not read, or a directory that cannot be
// listed, counts as running something: paddock cannot tell.
func gitdirRuns(gitdir, worktree string, trusted map[string]bool) string {
	if common, ok := readLine(filepath.Join(gitdir, "commondir")); ok {
		if !filepath.IsAbs(common) {
			common = filepath.Join(gitdir, common)
		}
		if c, err := filepath.EvalSymlinks(common); err != nil || !trusted[c] {
			return fmt.Sprintf("%s names the common directory %s", filepath.Join(gitdir, "commondir"), common)
		}
	} else if _, err := os.Lstat(filepath.Join(gitdir, "commondir")); err == nil {
		return fmt.Sprintf("%s is not a file paddock can read", filepath.Join(gitdir, "commondir"))
	}
	st := statCache{}
	var vars []gitVar
	var included []gitPath
	for _, name := range []string{"config", "config.worktree"} {
		if err := st.readGitConfig(filepath.Join(gitdir, name), 0, &vars, &included); err != nil {
			return err.Error()
		}
	}
	wt, _ := filepath.EvalSymlinks(worktree)
	for _, v := range vars {
		at := fmt.Sprintf("%s line %d: %s = %q", v.file, v.line, v.key(), v.value)
		switch k := v.key(); {
		case v.section == "include" || v.section == "includeif":
			return at
		case k == "core.hookspath", isGitCommandKey(v):
			return at
		case k == "core.fsmonitor":
			if _, ok := parseGitBool(v.value, v.noValue); !ok && v.value != "" {
				return at
			}
		case k == "core.worktree":
			p := expandGitPath(v.value)
			if p != "" && !filepath.IsAbs(p) {
				p = filepath.Join(gitdir, p)
			}
			if c, err := filepath.EvalSymlinks(p); p == "" || err != nil || c != wt {
				return at
			}
		case v.section == "protocol" && v.name == "allow":
			if strings.EqualFold(v.value, "always") {
				return at
			}
		}
	}
	hooks := filepath.Join(gitdir, "hooks")
	f, err := os.Open(hooks)
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		return fmt.Sprintf("%s cannot be listed: %v", hooks, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		return fmt.Sprintf("%s is not a directory", hooks)
	}
	names, err := f.Readdirnames(maxGitHooks + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("%s cannot be listed: %v", hooks, err)
	}
	if len(names) > maxGitHooks {
		return fmt.Sprintf("%s holds more than %d entries", hooks, maxGitHooks)
	}
	slices.Sort(names)
	for _, n := range names {
		if strings.HasSuffix(n, ".sample") {
			continue
		}
		var s unix.Stat_t
		if unix.Fstatat(int(f.Fd()), n, &s, unix.AT_SYMLINK_NOFOLLOW) == nil && s.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		return fmt.Sprintf("the hook %s", filepath.Join(hooks, n))
	}
	return ""
}

// gitlinksCache keeps what [readGitlinks] found in the indexes read
// last, for the next job in the same repository whose index is the same
// file (device, inode, size, change and modification times: git writes
// a new index by rename, and no job can set a change time): a job that
// did not touch the index costs a stat(2), not a parse. A split index is
// read each time.
var gitlinksCache = &indexCache{entries: map[string]indexCacheEntry{}}

// indexCache is a bounded map from an index's path to what it held;
// safe for concurrent use.
type indexCache struct {
	mu      sync.Mutex
	entries map[string]indexCacheEntry
}

type indexCacheEntry struct {
	id       indexID
	hashSize int
	links    []string
}

// indexID is what tells one index file's content from another's.
type indexID struct {
	dev, ino, size uint64
	ctime, mtime   unix.Timespec
	gitdir         string
}

// maxIndexCache bounds how many indexes gitlinksCache remembers.
const maxIndexCache = 64

// read is [readGitlinks] through the cache: the index is stat'ed
// (following links, as readGitlinks reads it) before and after it is
// read, and what was read is kept only when both agree.
func (c *indexCache) read(gitdir, index string, hashSize int) ([]string, error) {
	before, ok := statIndex(gitdir, index)
	ok = ok && !maybeSplit(gitdir, index)
	if ok {
		c.mu.Lock()
		e, hit := c.entries[index]
		c.mu.Unlock()
		if hit && e.id == before && e.hashSize == hashSize {
			return slices.Clone(e.links), nil
		}
	}
	links, err := readGitlinks(gitdir, index, hashSize)
	if err != nil || !ok {
		return links, err
	}
	if after, ok := statIndex(gitdir, index); ok && after == before {
		c.mu.Lock()
		if len(c.entries) >= maxIndexCache {
			clear(c.entries)
		}
		c.entries[index] = indexCacheEntry{id: before, hashSize: hashSize, links: slices.Clone(links)}
		c.mu.Unlock()
	}
	return links, nil
}

// statIndex returns the identity of the index file at path; false for
// one that is not a regular file.
func statIndex(gitdir, path string) (indexID, bool) {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return indexID{}, false
	}

	return indexID{dev: st.Dev, ino: st.Ino, size: uint64(st.Size), ctime: st.Ctim, mtime: st.Mtim, gitdir: gitdir}, true
}

// maybeSplit reports whether the index at path may be split: a shared
// index ("sharedindex.*" in gitdir or beside the index) holds entries
// too, and its name, not its identity, is all the index says of it.
func maybeSplit(gitdir, path string) bool {
	dirs := []string{filepath.Dir(path)}
	if gitdir != "" && gitdir != dirs[0] {
		dirs = append(dirs, gitdir)
	}
	for _, dir := range dirs {
		f, err := os.Open(dir)
		if err != nil {
			return true
		}
		for {
			names, err := f.Readdirnames(256)
			if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "sharedindex.") }) {
				f.Close()
				return true
			}
			if err != nil {
				break
			}
		}
		f.Close()
	}
	return false
}

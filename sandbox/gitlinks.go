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
// protects has its index read for gitlinks and its modules/ walked
// ([settleGitlinks], [settleModules]), and the protect list is resolved
// again as the next job will ([settleNewTrust]): each git directory the
// job could have made that git would enter, or the next job would trust,
// must be what git makes for a submodule ([submoduleRuns], an
// allow-list), or it is taken out of git's way.

// gitRepo is a repository whose config a policy protects: its git
// directory (canonical) and its working tree ("" when it has none known).
type gitRepo struct {
	gitdir, worktree string
}

// gitRepos are the repositories one policy protects ([resolveProtect]):
// list holds each (git directory, working tree) pair once, in the order
// found; trusted holds their git directories and those of their
// submodules below "modules/" (canonical) that existed, whose config
// and hooks the policy keeps as they were, each with the working trees
// it is known to have (the one it was found through, or for a git
// directory below modules/ the one its core.worktree names). The zero value is not ready: use [newGitRepos].
type gitRepos struct {
	list    []gitRepo
	trusted map[string]map[string]bool
	// pointers are the ".git" files and the symlinks the resolution
	// went through on its way to git's files.
	pointers map[string]bool
}

func newGitRepos() *gitRepos {
	return &gitRepos{trusted: map[string]map[string]bool{}, pointers: map[string]bool{}}
}

// procOrDev reports whether p lies in /proc or /dev, where a path
// (/proc/self/cwd, /dev/fd/3) depends on the process that follows it.
func procOrDev(p string) bool { return Within(p, "/proc") || Within(p, "/dev") }

// resolveGitPath is filepath.EvalSymlinks for a path git will follow
// from another process: p (absolute) resolved one component at a time,
// ".." taken after the symlink before it, and an error for a path that
// passes through /proc or /dev ([procOrDev]), which would lead paddock
// and git to different places, or through more than 40 symlinks.
func resolveGitPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%s is not absolute", p)
	}
	resolved, rest, hops := "/", strings.Split(strings.TrimPrefix(p, "/"), "/"), 0
	for len(rest) > 0 {
		part := rest[0]
		rest = rest[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, part)
		if procOrDev(next) {
			return "", fmt.Errorf("%s passes through %s, which leads elsewhere for every process: %w", p, next, unix.EINVAL)
		}
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("%s: %w", p, unix.ELOOP)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), rest...)
	}
	return resolved, nil
}

// add records the pair, and reports whether it was new. A git directory
// that does not exist is not listed (a repository the job makes at its
// place is the job's own, as docs/policy.md says), but reported new.
func (g *gitRepos) add(gitdir, worktree string) bool {
	r := gitRepo{gitdir: gitdir, worktree: worktree}
	if slices.Contains(g.list, r) {
		return false
	}
	if fi, err := os.Lstat(gitdir); err == nil && fi.IsDir() {
		g.list = append(g.list, r)
		g.trust(gitdir, worktree)
	}
	return true
}

// trust records gitdir as trusted, with worktree, or when that is ""
// the one its core.worktree names, when it is a directory: a git
// directory that does not exist (a submodule not checked out) had
// nothing kept, and what the job makes there is its own.
func (g *gitRepos) trust(gitdir, worktree string) {
	if fi, err := os.Lstat(gitdir); err != nil || !fi.IsDir() {
		return
	}
	known := g.trusted[gitdir]
	if known == nil {
		known = map[string]bool{}
		g.trusted[gitdir] = known
	}
	w := worktree
	if w == "" {
		// A submodule's git directory below modules/, found by the
		// walk: the working tree its own config names.
		w = configuredWorktree(gitdir)
	}
	if c, err := resolveGitPath(w); w != "" && err == nil {
		known[c] = true
	}
}

// maxGitlinkRepos bounds how many repositories [settleGitlinks] reads the
// index of for one job (the policy's, and the submodules' below them),
// and how many git directories it looks at: a submodule past either
// bound is taken out of git's way.
const maxGitlinkRepos = 1024

// maxGitIndexBytesPerJob bounds how many bytes of indexes
// [settleGitlinks] reads for one job (those it reads again, not those
// [gitlinksCache] answers): an index past it counts as unreadable.
const maxGitIndexBytesPerJob = 1 << 30

// maxGitHooks bounds how many entries of a hooks directory
// [submoduleRuns] looks at.
const maxGitHooks = 4096

// settleGitlinks checks, once every process of a job has ended, the
// gitlinks of the repositories repos.list (their own and, in turn, those
// of their submodules, as git status recurses) that lie inside roots.
// For each submodule whose ".git" exists there, the git directory it
// leads to is found as git finds it ([submoduleGitdir]), and its ".git"
// is moved aside to ".git.paddock-created-JOBID" (as a created protected
// path is, [walkAside]), so that git on the host sees the submodule as
// not checked out, when:
//   - it leads to no git directory (another job could make one there);
//   - it leads to one of repos.trusted, not from a working tree that git
//     directory is known to have (git would take the index of one
//     working tree for another's);
//   - it leads to one the job could have made that lies elsewhere than
//     the submodule's own ".git" or the superproject's "modules/"
//     (another job could change it later), or whose files are not what
//     git makes for a submodule ([submoduleRuns]).
//
// A directory the index keeps sparse that exists inside a root is moved
// aside too: git would expand it and enter the submodules of its tree,
// which paddock does not read. An index that cannot be read inside a
// root (the job may have written it so), or past the bytes read for one
// job, is moved aside the same way: git then sees every file as new,
// and nothing as a submodule. It returns one sentence per thing it
// found and did, or "" when it found none. Every step reads the tree as
// git would (following symlinks): nothing of the job runs any more, and
// the roots' locks keep other jobs out of these trees.
func settleGitlinks(roots []string, repos *gitRepos, jobID string) string {
	if repos == nil {
		return ""
	}
	inRoots := func(p string) string { return rootHolding(roots, p) }
	var out []string
	seen := map[gitRepo]bool{}
	todo := slices.Clone(repos.list)
	looked := 0 // git directories submoduleRuns looked at
	budget := int64(maxGitIndexBytesPerJob)
	for len(todo) > 0 {
		r := todo[0]
		todo = todo[1:]
		if r.worktree == "" || seen[r] {
			continue
		}
		seen[r] = true
		if inRoots(filepath.Join(r.gitdir, "modules")) != "" {
			out = append(out, settleModules(r, repos.trusted, &looked, jobID)...)
		}
		index := filepath.Join(r.gitdir, "index")
		links, err := gitlinksCache.read(r.gitdir, index, objectHashSize(r.gitdir), &budget)
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
			if _, err := os.Lstat(dotgit); err != nil {
				continue // not checked out: git does not enter it
			}
			// Not the job's to make when outside the roots, but the index
			// may be (a linked worktree's elsewhere, whose git directory
			// is inside them).
			indexRoot := inRoots(index)
			if root == "" && indexRoot == "" {
				continue
			}
			g, err := submoduleGitdir(dotgit)
			wt, _ := resolveGitPath(sub)
			known, trusted := repos.trusted[g]
			if root == "" {
				// A submodule registered there must be one protected
				// when the job started, or the index goes.
				if err == nil && trusted && known[wt] {
					continue
				}
				msg := fmt.Sprintf("the index %s names the submodule %s, outside the job's writable roots, whose git directory was not protected when the job started (another job may have made it)", index, sub)
				out = append(out, settleSaying(msg, indexRoot, index, jobID))
				break
			}
			why := ""
			switch {
			case err != nil:
				why = err.Error()
			case trusted && !known[wt]:
				why = fmt.Sprintf("it leads to the git directory %s, which is another working tree's", g)
			case trusted:
			case looked >= maxGitlinkRepos:
				why = fmt.Sprintf("it is one of more than %d submodules the job made, more than paddock looks at", maxGitlinkRepos)
			case g != filepath.Join(wt, ".git") && !slices.ContainsFunc(modulesDirs(r.gitdir), func(m string) bool { return Within(g, m) }):
				why = fmt.Sprintf("it leads to the git directory %s, neither its own .git nor one below the superproject's modules/", g)
			default:
				looked++
				why = submoduleRuns(g, wt, "")
			}
			if why == "" && len(seen)+len(todo) >= maxGitlinkRepos {
				why = fmt.Sprintf("it is one of more than %d repositories below %s, more than paddock reads the index of", maxGitlinkRepos, r.worktree)
			}
			if why == "" {
				todo = append(todo, gitRepo{gitdir: g, worktree: wt})
				continue
			}
			msg := fmt.Sprintf("the submodule %s in the index of %s could make git on the host run a program of the job's: %s", sub, r.gitdir, why)
			out = append(out, settleSaying(msg, root, dotgit, jobID))
		}
	}
	return strings.Join(slices.DeleteFunc(out, func(s string) bool { return s == "" }), "; ")
}

// maxModulesSettle bounds how often [settleModules] moves aside what
// stops the walk of one repository's modules/ and walks it again.
const maxModulesSettle = 8

// settleModules checks, once a job has ended, the git directories below
// the "modules/" of r's git directory, which lies inside a writable root
// ([findModuleGitdirs]):
// git uses modules/NAME for the submodule NAME when it checks one out or
// fetches into it (git submodule update, git pull), whether or not its
// working tree is there. Each one not in trusted (made during the job)
// whose files are not what git makes for a submodule ([submoduleRuns],
// its core.worktree within r's working tree) is moved out of modules/
// ([moveOutOfModules]), as is what stops the walk (a symlink, a tree past
// its bounds: the job's, since the same walk let the job start), and the
// walk made again. looked
// counts the git directories looked at, against [maxGitlinkRepos]. It
// returns one sentence per thing it found and did.
func settleModules(r gitRepo, trusted map[string]map[string]bool, looked *int, jobID string) []string {
	var out []string
	for range maxModulesSettle {
		dirs, err := findModuleGitdirs(r.gitdir)
		if me := (*modulesError)(nil); errors.As(err, &me) {
			msg := fmt.Sprintf("the job left %s, which stops paddock looking for the submodules of %s to protect (%v)", me.path, r.gitdir, me.err)
			did, moved := moveOutOfModules(r.gitdir, me.path, jobID, msg+", so it was moved out of modules/")
			out = append(out, did)
			if moved {
				continue
			}
			return out
		}
		if err != nil {
			return append(out, err.Error()+": check it before running git there")
		}
		for _, m := range dirs {
			if _, ok := trusted[m]; ok {
				continue
			}
			why := fmt.Sprintf("it is one of more than %d git directories the job made, more than paddock looks at", maxGitlinkRepos)
			if *looked < maxGitlinkRepos {
				*looked++
				why = submoduleRuns(m, "", r.worktree)
			}
			if why != "" {
				msg := fmt.Sprintf("the job made %s, a submodule's git directory git would use, that could make git on the host run a program of the job's: %s", m, why)
				if did, _ := moveOutOfModules(r.gitdir, m, jobID, msg+", so it was moved out of modules/"); did != "" {
					out = append(out, did)
				}
			}
		}
		return out
	}
	return append(out, fmt.Sprintf("%s's modules/ still stops paddock after %d things moved aside: check it before running git there", r.gitdir, maxModulesSettle))
}

// moveOutOfModules moves p, below gitdir's modules/, into gitdir itself
// (to NAME.paddock-created-JOBID, [moveAsideTo]): renamed in its place,
// it would still be a git directory below modules/, which the next job's
// policy would take for one of the user's. Both directories are opened
// without following a symlink. It returns lead with what it did, or ""
// when nothing is at p, and whether it moved it.
func moveOutOfModules(gitdir, p, jobID, lead string) (string, bool) {
	parent, err := OpenNoSymlinks(filepath.Dir(p))
	if err != nil {
		return fmt.Sprintf("%s; paddock cannot reach it (%v): check it before running git there", lead, err), false
	}
	defer parent.Close()
	dest, err := OpenNoSymlinks(gitdir)
	if err != nil {
		return fmt.Sprintf("%s; paddock cannot reach %s (%v): check it before running git there", lead, gitdir, err), false
	}
	defer dest.Close()
	var st unix.Stat_t
	if err := lookAt(int(parent.Fd()), filepath.Base(p), &st); errors.Is(err, unix.ENOENT) {
		return "", false
	}
	name, err := moveAsideTo(int(parent.Fd()), filepath.Base(p), int(dest.Fd()), "paddock-created", jobID)
	if err != nil {
		return fmt.Sprintf("%s; moving it failed: %v: check it before running git there", lead, err), false
	}
	return lead + "; it is now " + filepath.Join(gitdir, name), true
}

// settleNewTrust resolves p's protect list again once the job has ended,
// as the next job's policy will ([resolveProtect]), and looks at each git
// directory inside p's writable roots that resolution trusts and p's did
// not: one the job made where the next job would take it for the
// user's (a repository one level down for a "*/.git/config" entry, a
// submodule a ".gitmodules" it made names, a linked worktree and the
// git directories below its modules/). One that fails [submoduleRuns]
// (a linked worktree's: [worktreeRuns]) is moved out of the way: out of
// the modules/ or worktrees/ that holds it ([moveOutOfModules]), else
// aside in its place. A resolution that fails (the next job would be
// refused) moves out what a [modulesError] names and tries again, and
// otherwise says what the next job will be refused for. It returns one
// sentence per thing it found and did, or "".
func settleNewTrust(p Policy, jobID string) string {
	if p.repos == nil || !slices.ContainsFunc(p.entries, isGitConfigEntry) {
		return "" // nothing the next job resolves trusts a git directory
	}
	if len(p.repos.list) == 0 && !slices.ContainsFunc(p.entries, reachesDeep) && !slices.ContainsFunc(p.Roots(), hasGitNear) {
		return "" // no repository then, none now where the list reaches
	}
	var out []string
	var after *gitRepos
	for try := 0; ; try++ {
		_, _, r, err := resolveProtect(p.Roots(), p.entries)
		if err == nil {
			after = r
			break
		}
		me := (*modulesError)(nil)
		if !errors.As(err, &me) || try >= maxModulesSettle {
			return strings.Join(append(out, fmt.Sprintf("the job left the workspace so that the next job in it will be refused until what this names is removed: %v", err)), "; ")
		}
		msg := fmt.Sprintf("the job left %s, which would stop the next job (%v)", me.path, me.err)
		did, moved := moveOutOfModules(containerGitdir(me.path), me.path, jobID, msg+", so it was moved out of the way")
		out = append(out, did)
		if !moved {
			return strings.Join(out, "; ")
		}
	}
	inRoots := func(q string) string { return rootHolding(p.Roots(), q) }
	// A ".git" file or link the job made, on the way to what the next
	// job would protect, must lead to a git directory git will find
	// where paddock does, and one this job could have made (and that the
	// checks below see), or one trusted when it started: a git directory
	// elsewhere another job may write, before or after.
	var pointers []string
	for q := range after.pointers {
		if !p.repos.pointers[q] && inRoots(q) != "" {
			pointers = append(pointers, q)
		}
	}
	slices.Sort(pointers)
	for _, q := range pointers {
		why := ""
		g, err := submoduleGitdir(q)
		knownThen, trustedThen := p.repos.trusted[g]
		wt, _ := resolveGitPath(filepath.Dir(q))
		switch {
		case err != nil:
			why = err.Error()
		case trustedThen && !knownThen[wt]:
			why = fmt.Sprintf("it gives the git directory %s, protected when the job started, another working tree", g)
		case inRoots(g) == "" && !trustedThen:
			why = fmt.Sprintf("it leads to the git directory %s, outside the job's writable roots, which another job may write", g)
		}
		if why == "" {
			continue
		}
		msg := fmt.Sprintf("the job made %s, which the next job would follow to git's files: %s", q, why)
		if did := walkAside(inRoots(q), q, jobID, msg+", so it was moved aside"); did != "" {
			out = append(out, did)
		}
	}
	var fresh []string
	for g := range after.trusted {
		if _, ok := p.repos.trusted[g]; !ok {
			fresh = append(fresh, g)
		}
	}
	slices.Sort(fresh)
	for _, g := range fresh {
		root := inRoots(g)
		if root == "" {
			continue // not the job's to make
		}
		if filepath.Base(g) == ".git" && slices.Contains(p.Roots(), filepath.Dir(g)) {
			// A writable root's own repository, made by the job: it is
			// the job's own, as docs/policy.md says (git in it reads the
			// job's config), and what it registers is checked as any.
			continue
		}
		worktree := ""
		known := after.trusted[g]
		for w := range known {
			worktree = w
		}
		container := containerGitdir(g)
		var why string
		switch {
		case len(known) > 1:
			// git would use one index for several working trees.
			why = fmt.Sprintf("it is the git directory of %d working trees", len(known))
		case filepath.Base(filepath.Dir(g)) == "worktrees":
			why = worktreeRuns(g, container)
		default:
			why = submoduleRuns(g, worktree, root)
		}
		if why == "" {
			continue
		}
		msg := fmt.Sprintf("the job made %s, a git directory the next job would take for the user's, that could make git on the host run a program of the job's: %s", g, why)
		if container != "" {
			if did, _ := moveOutOfModules(container, g, jobID, msg+", so it was moved out of the way"); did != "" {
				out = append(out, did)
			}
			continue
		}
		if did := walkAside(root, g, jobID, msg+", so it was moved aside"); did != "" {
			out = append(out, did)
		}
	}
	return strings.Join(slices.DeleteFunc(out, func(s string) bool { return s == "" }), "; ")
}

// reachesDeep reports whether the protect entry e names a repository's
// config further than one directory below a root ("*/*/.git/config", an
// absolute path): [hasGitNear] does not look there.
func reachesDeep(e string) bool {
	if !isGitConfigEntry(e) {
		return false
	}
	return filepath.IsAbs(e) || strings.Count(filepath.Clean(e), "/") > 2
}

// hasGitNear reports whether root holds a ".git", or one of its
// directories does (as deep as a "*/.git/config" entry reaches; a
// deeper one, [reachesDeep], makes the caller look at every job's
// end). It errs toward true.
func hasGitNear(root string) bool {
	if _, err := os.Lstat(filepath.Join(root, ".git")); err == nil {
		return true
	}
	f, err := os.Open(root)
	if err != nil {
		return true
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(256)
		for _, e := range ents {
			if e.IsDir() || e.Type()&os.ModeSymlink != 0 {
				if _, err := os.Lstat(filepath.Join(root, e.Name(), ".git")); err == nil {
					return true
				}
			}
		}
		if err != nil {
			return !errors.Is(err, io.EOF)
		}
	}
}

// containerGitdir returns the git directory whose "modules/" or
// "worktrees/" holds p (the path before the last such component), or ""
// when none does.
func containerGitdir(p string) string {
	i := max(strings.LastIndex(p, "/modules/"), strings.LastIndex(p, "/worktrees/"))
	if i <= 0 {
		return ""
	}
	return p[:i]
}

// worktreeRuns returns why the git directory of a linked worktree the
// job made, gitdir (below common's "worktrees/"), could make git run a
// program of the job's, or "": its "commondir" must lead to common, and
// it may have no "config.worktree" (the worktree's own config) and no
// "config" or "hooks" (git takes both from common).
func worktreeRuns(gitdir, common string) string {
	c, ok := readCommondir(gitdir)
	if !ok {
		return fmt.Sprintf("%s names no common directory", gitdir)
	}
	if r, err := resolveGitPath(c); err != nil || r != common {
		return fmt.Sprintf("%s/commondir leads to %s, not %s", gitdir, c, common)
	}
	for _, name := range []string{"config.worktree", "config", "hooks"} {
		if _, err := os.Lstat(filepath.Join(gitdir, name)); err == nil {
			return fmt.Sprintf("%s exists", filepath.Join(gitdir, name))
		}
	}
	return ""
}

// modulesDirs returns where the submodules of the repository whose git
// directory is gitdir keep their git directories: its "modules", and
// its common directory's (a linked worktree's submodules), resolved.
func modulesDirs(gitdir string) []string {
	out := []string{filepath.Join(gitdir, "modules")}
	if common, ok := readCommondir(gitdir); ok {
		if c, err := resolveGitPath(common); err == nil {
			out = append(out, filepath.Join(c, "modules"))
		}
	}
	return out
}

// settleSaying moves p, below root, aside ([walkAside]) and returns msg
// with what became of it, or "" when nothing is at p.
func settleSaying(msg, root, p, jobID string) string {
	// Nothing there (any more): git finds nothing either.
	return walkAside(root, p, jobID, msg+", so "+p+" was moved aside")
}

// submoduleGitdir returns the canonical git directory a submodule's
// ".git" at dotgit leads to, as git finds it (read_gitfile_gently in
// git's setup.c): symlinks followed, a directory itself, or the one a
// ".git" file's "gitdir: " line names ([readGitdir]), joined to the
// file's directory as git joins it ([joinGitPath]) and resolved. Errors
// (a sentence for the attempt's reason): dotgit is neither, or leads to
// no directory.
func submoduleGitdir(dotgit string) (string, error) {
	real, err := resolveGitPath(dotgit)
	if err != nil {
		return "", fmt.Errorf("its .git cannot be resolved (%v)", err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("its .git cannot be looked at (%v)", err)
	}
	dir := real
	switch {
	case fi.Mode().IsRegular():
		d, ok := readGitdir(real)
		if !ok {
			return "", errors.New("its .git is a file that names no git directory")
		}
		dir = joinGitPath(filepath.Dir(dotgit), d)
	case !fi.IsDir():
		return "", errors.New("its .git is neither a directory nor a file")
	}
	c, err := resolveGitPath(dir)
	if err != nil {
		return "", fmt.Errorf("its .git leads to %s, which does not exist (%v)", dir, err)
	}
	if fi, err := os.Stat(c); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("its .git leads to %s, which is not a directory", dir)
	}
	return c, nil
}

// configuredWorktree returns the working tree the configuration of the
// git directory gitdir names (core.worktree, the last one set, relative
// to gitdir: git-config(1)), as written and joined, not resolved; "" when
// it names none or cannot be read.
func configuredWorktree(gitdir string) string {
	vars := gitConfigVars(filepath.Join(gitdir, "config"))
	wt := ""
	for _, v := range vars {
		if v.key() == "core.worktree" && !v.noValue {
			wt = v.value
		}
	}
	if p := expandGitPath(wt); p != "" {
		return joinGitPath(gitdir, p)
	}
	return ""
}

// gitConfigVars returns the variables of the git configuration file
// name, without following its includes; none when it cannot be read or
// parsed.
func gitConfigVars(name string) []gitVar {
	vars, _ := readGitConfigFile(name)
	return vars
}

// objectHashSize returns the size in bytes of the object names of the
// repository whose git directory is gitdir, as git decides it
// (setup.c, check_repository_format_gently): from the configuration of
// its common directory (its "commondir", else itself), 32 when
// core.repositoryformatversion is 1 or more and extensions.objectFormat
// is sha256, else 20 (SHA-1).
func objectHashSize(gitdir string) int {
	dir := gitdir
	if common, ok := readCommondir(gitdir); ok {
		dir = common
	}
	version, format := "0", "sha1"
	for _, v := range gitConfigVars(dir + "/config") {
		switch v.key() {
		case "core.repositoryformatversion":
			version = v.value
		case "extensions.objectformat":
			format = strings.ToLower(v.value)
		}
	}
	if version != "0" && version != "" && format == "sha256" {
		return 32
	}
	return 20
}

// submoduleConfigKeys are the keys git writes in a submodule's git
// directory when it clones or makes one (git clone, git submodule
// update, git init), and those a user sets there commonly, none of which
// makes git run anything or read from elsewhere: the keys
// [submoduleRuns] lets a git directory the job made set.
var submoduleConfigKeys = map[string]bool{
	"core.repositoryformatversion": true, "core.filemode": true, "core.bare": true,
	"core.logallrefupdates": true, "core.symlinks": true, "core.ignorecase": true,
	"core.precomposeunicode": true, "core.worktree": true, "core.autocrlf": true, "core.eol": true,
	"extensions.objectformat": true, "extensions.partialclone": true,
	"remote.url": true, "remote.fetch": true, "remote.tagopt": true, "remote.promisor": true,
	"remote.partialclonefilter": true, "remote.prune": true,
	"branch.remote": true, "branch.merge": true, "branch.rebase": true,
	"pull.rebase": true, "pull.ff": true, "fetch.prune": true,
	"commit.gpgsign": true, "tag.gpgsign": true, "init.defaultbranch": true,
	"submodule.url": true, "submodule.active": true, "user.name": true, "user.email": true,
}

// allowedSubmoduleKey reports whether v is one of submoduleConfigKeys,
// with a subsection where git writes one: remote.<name>.*,
// branch.<name>.*, submodule.<name>.url; submodule.active and
// submodule.<name>.active; none for the others.
func allowedSubmoduleKey(v gitVar) bool {
	key := v.section + "." + v.name
	if !submoduleConfigKeys[key] {
		return false
	}
	switch {
	case v.section == "remote", v.section == "branch", key == "submodule.url":
		return v.subsection != ""
	case key == "submodule.active":
		return true
	}
	return v.subsection == ""
}

// submoduleRuns returns why git, entering the submodule whose working
// tree is worktree (canonical; "" when none is known, for a git directory
// below modules/ that a working tree within the superproject's, within,
// may use) and whose git directory gitdir (canonical) the job made, could
// run a program of the job's, or "" when it could not: its "config" sets
// a key git does not write for a submodule
// ([submoduleConfigKeys]: an allow-list, since git runs programs named
// by keys no list of dangerous ones keeps up with), core.bare true,
// core.worktree to another directory than worktree, a remote URL of the
// "ext::" or "fd::" transports (in remote.<name>.url or
// branch.<name>.remote), a repository format git would not take
// it as (core.repositoryformatversion other than 0 or 1,
// extensions.objectFormat other than sha1 or sha256); it has a
// "commondir" or "config.worktree" (read beside or instead of its
// config), or files in "remotes/" or "branches/", which name remotes
// too (git init leaves "branches/" empty); or its "hooks" holds anything but git's ".sample" files. A
// configuration that cannot be read counts as running something:
// paddock cannot tell.
func submoduleRuns(gitdir, worktree, within string) string {
	for _, name := range []string{"commondir", "config.worktree", "remotes", "branches"} {
		p := filepath.Join(gitdir, name)
		if _, err := os.Lstat(p); err == nil && !emptyDir(p) {
			return fmt.Sprintf("%s exists (git reads configuration from there too)", p)
		}
	}
	name := filepath.Join(gitdir, "config")
	vars, err := readGitConfigFile(name)
	switch {
	case missing(err):
		return fmt.Sprintf("%s has no config", gitdir)
	case errors.Is(err, errGitConfig):
		return err.Error()
	case err != nil:
		return fmt.Sprintf("%s cannot be read (%v)", name, err)
	}
	for _, v := range vars {
		at := fmt.Sprintf("%s line %d: %s = %q", name, v.line, v.key(), v.value)
		key := v.section + "." + v.name
		if !allowedSubmoduleKey(v) {
			return at + " (not among the keys a git directory the job made may set, which docs/policy.md lists)"
		}
		if v.noValue && key != "core.bare" {
			return at + " (no value)"
		}
		switch key {
		case "core.bare":
			if b, ok := parseGitBool(v.value, v.noValue); !ok || b {
				return at
			}
		case "core.worktree":
			c, err := resolveGitPath(joinGitPath(gitdir, expandGitPath(v.value)))
			if worktree != "" && (err != nil || c != worktree) {
				return at + " (not the submodule's own working tree)"
			}
			if worktree == "" && err == nil && !Within(c, within) {
				return at + " (outside the repository's working tree)"
			}
		case "core.repositoryformatversion":
			if v.value != "0" && v.value != "1" {
				return at
			}
		case "extensions.objectformat":
			if f := strings.ToLower(v.value); f != "sha1" && f != "sha256" {
				return at
			}
		case "remote.url", "branch.remote":
			// branch.<name>.remote may be a URL as well.
			if u := strings.ToLower(v.value); strings.HasPrefix(u, "ext::") || strings.HasPrefix(u, "fd::") {
				return at + " (a transport that runs a command)"
			}
		}
	}
	hooks := filepath.Join(gitdir, "hooks")
	fd, err := unix.Open(hooks, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return ""
	}
	if err != nil {
		return fmt.Sprintf("%s is not a directory paddock can list (%v)", hooks, err)
	}
	f := os.NewFile(uintptr(fd), hooks)
	defer f.Close()
	names, err := f.Readdirnames(maxGitHooks + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("%s cannot be listed: %v", hooks, err)
	}
	if len(names) > maxGitHooks {
		return fmt.Sprintf("%s holds more than %d entries", hooks, maxGitHooks)
	}
	slices.Sort(names)
	for _, n := range names {
		var st unix.Stat_t
		if strings.HasSuffix(n, ".sample") && unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			continue
		}
		return fmt.Sprintf("the hook %s", filepath.Join(hooks, n))
	}
	return ""
}

// emptyDir reports whether p is a directory (not a symlink) with
// nothing in it, as git init leaves "branches/".
func emptyDir(p string) bool {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && errors.Is(err, io.EOF)
}

// gitlinksCache keeps what [readGitlinks] found in the indexes read
// last, for the next job whose index is the same file (device, inode,
// size, change and modification times: git writes a new index by
// rename, and no job can set a change time), whatever its path (a hard
// link): a job that did not touch the index costs a stat(2), not a
// parse. A split index is read each time.
var gitlinksCache = &indexCache{entries: map[indexID][]string{}}

// indexCache is a bounded map from an index file's identity to the
// gitlinks it held; safe for concurrent use.
type indexCache struct {
	mu      sync.Mutex
	entries map[indexID][]string
}

// indexID is what tells one index file's content from another's, with
// what it was read as.
type indexID struct {
	dev, ino, size uint64
	ctime, mtime   unix.Timespec
	gitdir         string
	hashSize       int
}

// maxIndexCache bounds how many indexes gitlinksCache remembers.
const maxIndexCache = 64

// read is [readGitlinks] through the cache: the index is stat'ed
// (following links, as readGitlinks reads it) before and after it is
// read, and what was read is kept only when both agree. What it reads is
// taken from budget, and an index larger than what is left is refused.
func (c *indexCache) read(gitdir, index string, hashSize int, budget *int64) ([]string, error) {
	before, ok := statIndex(gitdir, index, hashSize)
	split, sharedBytes := sharedIndexes(gitdir, index)
	if ok {
		c.mu.Lock()
		links, hit := c.entries[before]
		c.mu.Unlock()
		if hit && !split {
			return slices.Clone(links), nil
		}
		// A split index's shared file is read with it: counted whole,
		// with any other shared file beside it.
		cost := int64(before.size) + sharedBytes
		if cost > *budget {
			return nil, fmt.Errorf("it is one of the indexes of more than %d bytes in all the job left, more than paddock reads", maxGitIndexBytesPerJob)
		}
		*budget -= cost
	}
	links, err := readGitlinks(gitdir, index, hashSize)
	if err != nil || !ok || split {
		return links, err
	}
	if after, ok := statIndex(gitdir, index, hashSize); ok && after == before {
		c.mu.Lock()
		if len(c.entries) >= maxIndexCache {
			clear(c.entries)
		}
		c.entries[before] = slices.Clone(links)
		c.mu.Unlock()
	}
	return links, nil
}

// statIndex returns the identity of the index file at path; false for
// one that is not a regular file.
func statIndex(gitdir, path string, hashSize int) (indexID, bool) {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return indexID{}, false
	}
	return indexID{dev: st.Dev, ino: st.Ino, size: uint64(st.Size), ctime: st.Ctim, mtime: st.Mtim, gitdir: gitdir, hashSize: hashSize}, true
}

// sharedIndexes reports whether the index at path may be split, a
// shared index ("sharedindex.*", in gitdir or beside the index) being
// there, and how many bytes those files hold in all (stat(2), following
// links as the index reader does): its name, not its identity, is all
// the index says of a shared one, so a split index is never cached, and
// what it may read is counted.
func sharedIndexes(gitdir, path string) (bool, int64) {
	dirs := []string{filepath.Dir(path)}
	if gitdir != "" && gitdir != dirs[0] {
		dirs = append(dirs, gitdir)
	}
	split, total := false, int64(0)
	for _, dir := range dirs {
		f, err := os.Open(dir)
		if err != nil {
			return true, total
		}
		for {
			names, err := f.Readdirnames(256)
			for _, n := range names {
				if strings.HasPrefix(n, "sharedindex.") {
					split = true
					if fi, err := os.Stat(filepath.Join(dir, n)); err == nil && fi.Mode().IsRegular() {
						total += fi.Size()
					}
				}
			}
			if err != nil {
				break
			}
		}
		f.Close()
	}
	return split, total
}

package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Bounds on what [resolveProtect] reads of a repository's own files: a
// job may have made any of them in an earlier run, to slow down or
// confuse the next job's start. Passing one refuses the job (wrapping
// [ErrBadPath]); nothing is ever skipped silently.
const (
	// maxModulesDepth bounds how deep below a git directory's "modules/"
	// the git directories of submodules are looked for: a submodule
	// named "a/b/c" is three levels down, one nested in it (its own
	// "modules/x") two more.
	maxModulesDepth = 16
	// maxModulesEntries bounds the directory entries read while looking
	// for them, over one repository.
	maxModulesEntries = 4096
	// maxGitConfigBytes bounds one git configuration file read.
	maxGitConfigBytes = 1 << 20
	// maxGitIncludeDepth is how deep git follows include.path
	// (config.c's MAX_INCLUDE_DEPTH): git refuses a deeper chain.
	maxGitIncludeDepth = 10
)

// gitPath is a path a repository's own files make protected
// ([repoProtected]).
type gitPath struct {
	path string // absolute, as git would reach it (not resolved)
	dir  bool   // a directory (hooks), else a file
	why  string // what makes it protected, for errors
	// repo marks a submodule working tree's ".git/config": the
	// repository it resolves to is handled in turn ([repoProtected]).
	repo bool
}

// isGitConfigEntry reports whether the protect entry e names a
// repository's config file (".git/config", "sub/.git/config", or an
// absolute ".../.git/config"): what [resolveProtect] extends to the rest
// of what that repository's configuration makes git run.
func isGitConfigEntry(e string) bool {
	c := filepath.Clean(e)
	return c == ".git/config" || strings.HasSuffix(c, "/.git/config")
}

// worktreeOf returns the directory holding path's last ".git" component
// (a repository's working tree, where git runs its hooks), or "" when
// path has none.
func worktreeOf(path string) string {
	for d := path; d != "/" && d != "."; d = filepath.Dir(d) {
		if filepath.Base(d) == ".git" {
			return filepath.Dir(d)
		}
	}
	return ""
}

// enclosingWorktree returns the directory above root (canonical) that
// holds a ".git" (a directory, a file or a link), the nearest one, as git
// finds a repository from a directory inside it (git(1), "GIT_DIR"; file
// system boundaries and GIT_CEILING_DIRECTORIES are not honoured: taking
// a repository git would not is the safe side), or "" when there is none.
func (st statCache) enclosingWorktree(root string) string {
	for d := filepath.Dir(root); ; d = filepath.Dir(d) {
		if _, err := st.lstat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		if d == "/" {
			return ""
		}
	}
}

// repoProtected returns what the repository whose git directory is
// gitdir (resolved) makes protected beyond its own "config" and
// "hooks/", worktree being the directory git runs in ("" for none
// known):
//
//   - the git directory of every submodule, at any depth below
//     gitdir's "modules/" ([findModuleGitdirs]): its "config",
//     "config.worktree", "commondir" and "hooks/", as for the top-level
//     git directory (gitrepository-layout(5), "modules");
//   - for gitdir and each of them, what their configuration names
//     ([configProtected]);
//   - for each submodule the ".gitmodules" at worktree's top names
//     ([submodulePaths]), and each one checked out that only the index
//     names ([statCache.checkedOutGitlinks]): its ".git" (a file naming its git directory,
//     or that directory), which git on the host follows when it
//     recurses into the submodule, its ".gitmodules", and its
//     repository's config and hooks as the top one's; the returned
//     ".git/config" is marked [gitPath.repo], for the caller to handle
//     the repository it resolves to in turn (nested submodules).
//
// done holds the (git directory, working tree) pairs already handled in
// this resolution, which return nothing; this one is added, and its git
// directory and its submodules' are recorded as trusted. A git
// directory that does not exist returns nothing. Paths
// outside every writable root are returned too:
// [statCache.protectTarget] passes over them.
//
// # Errors
//
// A bound passed ([maxModulesDepth], [maxModulesEntries],
// [maxGitConfigBytes], [maxGitIncludeDepth], [maxProtectMatches] git
// directories), a directory or configuration file that cannot be read, a
// configuration git would refuse: each wraps [ErrBadPath].
func (st statCache) repoProtected(gitdir, worktree string, done *gitRepos) ([]gitPath, error) {
	if !done.add(gitdir, worktree) {
		return nil, nil
	}
	if fi, err := st.lstat(gitdir); err != nil || !fi.IsDir() {
		return nil, nil // no repository: what a job makes there is its own
	}
	var worktrees []string
	if worktree != "" {
		worktrees = []string{worktree}
	}
	out, err := st.configProtected(gitdir, worktrees)
	if err != nil {
		return nil, err
	}
	mods, err := findModuleGitdirs(gitdir)
	if err != nil {
		return nil, err
	}
	// A linked worktree (git worktree add) has a git directory of its
	// own below worktrees/, with its own index and its own submodules'
	// git directories below its modules/: listed, for the index read
	// after the job, and those protected like the top one's.
	for _, w := range linkedWorktrees(gitdir) {
		done.add(w.gitdir, w.worktree)
		wmods, err := findModuleGitdirs(w.gitdir)
		if err != nil {
			return nil, err
		}
		mods = append(mods, wmods...)
	}
	for _, m := range mods {
		done.trust(m, "")
		out = append(out, gitdirFiles(m, "the submodule git directory "+m)...)
		more, err := st.configProtected(m, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	if worktree == "" {
		return out, nil
	}
	subs, err := submodulePaths(worktree)
	if err != nil {
		return nil, err
	}
	subs = append(subs, st.checkedOutGitlinks(gitdir, worktree, subs)...)
	for _, sp := range subs {
		// Its ".git" file, and the git directory that names, as the
		// top one's; ".git/config" leads to that repository in turn.
		files := gitdirFiles(filepath.Join(sp.path, ".git"), sp.why)
		files[0].repo = true
		out = append(out, files...)
		out = append(out, gitPath{path: filepath.Join(sp.path, ".gitmodules"), why: sp.why})
	}
	return out, nil
}

// checkedOutGitlinks returns the submodules of the index of gitdir
// ([readGitlinks]) whose ".git" exists in worktree and that named (the
// working trees ".gitmodules" names) does not hold: a repository
// registered in the index alone ("git add" of an embedded repository)
// is one git status enters as well. An index that cannot be read names
// none here: the check after the job ([settleGitlinks]) moves it aside.
func (st statCache) checkedOutGitlinks(gitdir, worktree string, named []gitPath) []gitPath {
	if _, err := st.lstat(filepath.Join(gitdir, "index")); err != nil {
		return nil // no index (a new repository): nothing registered
	}
	budget := int64(maxGitIndexBytes)
	links, err := gitlinksCache.read(gitdir, filepath.Join(gitdir, "index"), objectHashSize(gitdir), &budget)
	if err != nil {
		return nil
	}
	var out []gitPath
	for _, rel := range links {
		if strings.HasSuffix(rel, "/") {
			continue // a sparse directory: nothing of it is checked out
		}
		p := filepath.Join(worktree, rel)
		if slices.ContainsFunc(named, func(g gitPath) bool { return g.path == p }) {
			continue
		}
		if _, err := os.Lstat(filepath.Join(p, ".git")); err != nil {
			continue
		}
		if len(named)+len(out) >= maxProtectMatches {
			break
		}
		out = append(out, gitPath{path: p, why: fmt.Sprintf("the submodule %q in the index %s", rel, filepath.Join(gitdir, "index"))})
	}
	return out
}

// maxLinkedWorktrees bounds how many linked worktrees of one repository
// [linkedWorktrees] lists.
const maxLinkedWorktrees = 256

// linkedWorktrees returns the linked worktrees of the repository whose
// git directory is gitdir (gitrepository-layout(5), "worktrees"): for
// each directory below worktrees/ (not a symlink) whose "gitdir" file
// names the worktree's ".git" file, that directory, canonical, and the
// worktree's top, resolved; at most maxLinkedWorktrees of them.
func linkedWorktrees(gitdir string) []gitRepo {
	dir := filepath.Join(gitdir, "worktrees")
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	names, _ := f.Readdirnames(maxLinkedWorktrees)
	slices.Sort(names)
	var out []gitRepo
	for _, n := range names {
		var st unix.Stat_t
		if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		wgit := filepath.Join(dir, n)
		dotgit, ok := readGitPointer(filepath.Join(wgit, "gitdir"), "")
		if !ok {
			continue
		}
		wt, err := resolveGitPath(filepath.Dir(joinGitPath(wgit, dotgit)))
		if err != nil {
			continue
		}
		out = append(out, gitRepo{gitdir: wgit, worktree: wt})
	}
	return out
}

// gitdirFiles returns what git reads of a git directory dir that runs
// programs or leads elsewhere, as the default protect list names them
// for ".git" (gitrepository-layout(5)): "config" first, then
// "config.worktree", "commondir" and "hooks/".
func gitdirFiles(dir, why string) []gitPath {
	return []gitPath{
		{path: filepath.Join(dir, "config"), why: why},
		{path: filepath.Join(dir, "config.worktree"), why: why},
		{path: filepath.Join(dir, "commondir"), why: why},
		{path: filepath.Join(dir, "hooks"), dir: true, why: why},
	}
}

// submodulePaths returns the working trees of the submodules the
// ".gitmodules" of worktree names ("submodule.<name>.path",
// gitmodules(5)), absolute, each with where it is named. A path that is
// absolute or leaves worktree is left out: git refuses it.
//
// Errors (wrapping [ErrBadPath]): a ".gitmodules" that cannot be read
// (a symlink, which git refuses too, or more than [maxGitConfigBytes]),
// that git would refuse to read, or that names more than
// [maxProtectMatches] paths.
func submodulePaths(worktree string) ([]gitPath, error) {
	name := filepath.Join(worktree, ".gitmodules")
	vars, err := readGitConfigFile(name)
	switch {
	case missing(err):
		return nil, nil
	case errors.Is(err, errGitConfig):
		return nil, fmt.Errorf("%w: %w", err, ErrBadPath)
	case err != nil:
		return nil, fmt.Errorf("sandbox: cannot read %s, to find the submodules to protect: %w: %w", name, err, ErrBadPath)
	}
	var out []gitPath
	for _, v := range vars {
		if v.section != "submodule" || v.name != "path" || v.noValue {
			continue
		}
		rel := filepath.Clean(v.value)
		if v.value == "" || filepath.IsAbs(rel) || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if len(out) >= maxProtectMatches {
			return nil, fmt.Errorf("sandbox: %s names more than %d submodules, more than a sandbox can protect: %w", name, maxProtectMatches, ErrBadPath)
		}
		out = append(out, gitPath{path: filepath.Join(worktree, rel), why: fmt.Sprintf("%s line %d: %s = %q", name, v.line, v.key(), v.value)})
	}
	return out, nil
}

// configProtected returns what the configuration of the git directory
// gitdir names that git would run, or read as configuration, when it is
// a path (git-config(1)); worktrees are the directories git runs in for
// it (the one holding its ".git"):
//
//   - each file its "config" and "config.worktree" include
//     ("include.path", "includeIf.<condition>.path", "Includes" and
//     "Conditional includes": a relative path is relative to the
//     including file's directory, "~/" is $HOME; every condition is
//     taken as true), and what those include in turn: the job could
//     write one inside a writable root, or create a missing one;
//   - the directory each "core.hooksPath" names ("core.hooksPath": a
//     relative path is relative to where hooks run, githooks(5): the
//     working tree's top in a non-bare repository, the git directory in
//     a bare one);
//   - each "core.fsmonitor" that is not a boolean: the hook git runs in
//     the working tree ("core.fsmonitor"), taken as a path whole when it
//     is one word, and each of its words that is a path
//     ([commandPaths]);
//   - in the value of every other key that git runs as a command
//     ([isGitCommandKey]), each word that is a path: a script in the
//     working tree ("./tools/textconv.sh") the job could rewrite.
//
// Every value set is taken, not only the last: each file is what it was
// when the job starts, and taking them all errs on the safe side. The
// working trees taken are worktrees, each "core.worktree" ("core.worktree":
// relative to the git directory), and the git directory itself when
// "core.bare" is true or no working tree is known.
func (st statCache) configProtected(gitdir string, worktrees []string) ([]gitPath, error) {
	var vars []gitVar
	var out []gitPath
	for _, name := range []string{"config", "config.worktree"} {
		if err := st.readGitConfig(filepath.Join(gitdir, name), 0, &vars, &out); err != nil {
			return nil, err
		}
	}
	bases := slices.Clone(worktrees)
	bare := false
	for _, v := range vars {
		switch v.key() {
		case "core.worktree":
			if p := expandGitPath(v.value); p != "" && !v.noValue {
				if !filepath.IsAbs(p) {
					p = filepath.Join(gitdir, p)
				}
				bases = append(bases, p)
			}
		case "core.bare":
			b, ok := parseGitBool(v.value, v.noValue)
			bare = bare || !ok || b
		}
	}
	if bare || len(bases) == 0 {
		bases = append(bases, gitdir)
	}
	at := func(p string, dir bool, why string) {
		if filepath.IsAbs(p) {
			out = append(out, gitPath{path: filepath.Clean(p), dir: dir, why: why})
			return
		}
		for _, b := range bases {
			out = append(out, gitPath{path: filepath.Join(b, p), dir: dir, why: why})
		}
	}
	for _, v := range vars {
		why := fmt.Sprintf("%s line %d: %s = %q", v.file, v.line, v.key(), v.value)
		switch v.key() {
		case "core.hookspath":
			if p := expandGitPath(v.value); p != "" && !v.noValue {
				at(p, true, why)
			}
		case "core.fsmonitor":
			if _, ok := parseGitBool(v.value, v.noValue); ok || v.value == "" {
				continue
			}
			if p := expandGitPath(v.value); p != "" && !strings.ContainsAny(p, " \t") {
				at(p, false, why) // the hook's path
			}
			for _, p := range commandPaths(v.value) {
				at(p, false, why)
			}
		default:
			if isGitCommandKey(v) {
				for _, p := range commandPaths(strings.TrimPrefix(v.value, "!")) {
					at(p, false, why)
				}
			}
		}
	}
	return out, nil
}

// commandPaths returns the words of a shell command that name a path
// (hold a "/", or start with "~"), quotes removed and "~" expanded: what
// it runs or reads by path, relative to where it runs. A word without
// "/" is looked up on $PATH when it is the command, and is left out
// when it is an argument too (naming every word would protect files
// called "clean" or "--wait").
func commandPaths(cmd string) []string {
	var out []string
	for _, w := range strings.Fields(cmd) {
		w = strings.Trim(w, `"'`)
		if !strings.Contains(w, "/") && !strings.HasPrefix(w, "~") {
			continue
		}
		if p := expandGitPath(w); p != "" && !strings.HasPrefix(p, "-") {
			out = append(out, p)
		}
	}
	return out
}

// isGitCommandKey reports whether git runs v's value as a shell command
// (git-config(1)): core.sshCommand, core.pager, core.editor,
// core.askPass, sequence.editor, gpg.program and gpg.<format>.program,
// diff.external, diff.<driver>.command and .textconv,
// filter.<driver>.clean, .smudge and .process, merge.<driver>.driver,
// credential.helper and credential.<url>.helper, pager.<command>,
// alias.<name> (when it starts with "!"), difftool.<tool>.cmd and .path,
// mergetool.<tool>.cmd and .path, browser.<tool>.cmd, man.<tool>.cmd,
// guitool.<name>.cmd, core.gitProxy, remote.<name>.uploadpack and
// .receivepack (run on this host for a local remote), and
// submodule.<name>.update (when it starts with "!").
func isGitCommandKey(v gitVar) bool {
	sub := v.subsection != ""
	switch v.section + "." + v.name {
	case "core.sshcommand", "core.pager", "core.editor", "core.askpass", "core.gitproxy", "sequence.editor", "diff.external":
		return !sub
	case "gpg.program", "credential.helper":
		return true
	case "diff.command", "diff.textconv", "filter.clean", "filter.smudge", "filter.process", "merge.driver",
		"difftool.cmd", "difftool.path", "mergetool.cmd", "mergetool.path", "browser.cmd", "man.cmd", "guitool.cmd",
		"remote.uploadpack", "remote.receivepack":
		return sub
	case "submodule.update":
		return sub && strings.HasPrefix(v.value, "!")
	}
	switch v.section {
	case "pager":
		return !sub
	case "alias":
		return strings.HasPrefix(v.value, "!")
	}
	return false
}

// readGitConfig appends the variables of the git configuration file
// path (resolved as git reaches it) to vars, each with its file, then
// those of the files it includes, depth levels down already, recording
// each of those files in included. A missing file has none (git skips a
// missing include).
func (st statCache) readGitConfig(path string, depth int, vars *[]gitVar, included *[]gitPath) error {
	if t, _, _ := st.resolveGit("/", path, 0); len(t) > 0 {
		path = t[0]
	}
	vs, err := readGitConfigFile(path)
	switch {
	case missing(err):
		return nil
	case errors.Is(err, errGitConfig):
		return fmt.Errorf("%w: %w", err, ErrBadPath)
	case err != nil:
		return fmt.Errorf("sandbox: cannot read the git config %s, to find what it makes git run: %w: %w", path, err, ErrBadPath)
	}
	for _, v := range vs {
		v.file = path
		*vars = append(*vars, v)
		if (v.section != "include" && v.section != "includeif") || v.name != "path" || v.noValue {
			continue
		}
		inc := expandGitPath(v.value)
		if inc == "" {
			continue
		}
		if !filepath.IsAbs(inc) {
			inc = filepath.Join(filepath.Dir(path), inc)
		}
		if depth+1 > maxGitIncludeDepth {
			return fmt.Errorf("sandbox: %s line %d: include.path nested deeper than git's %d levels: %w", path, v.line, maxGitIncludeDepth, ErrBadPath)
		}
		*included = append(*included, gitPath{path: inc, why: fmt.Sprintf("%s line %d: %s = %q", path, v.line, v.key(), v.value)})
		if err := st.readGitConfig(inc, depth+1, vars, included); err != nil {
			return err
		}
	}
	return nil
}

// readGitConfigFile reads and parses the git configuration file name
// ([readSmallFile], [parseGitConfig], without following its includes).
// Errors: readSmallFile's ([missing] for a file that is not there), or
// one wrapping errGitConfig for a text git would refuse.
func readGitConfigFile(name string) ([]gitVar, error) {
	data, err := readSmallFile(name, maxGitConfigBytes)
	if err != nil {
		return nil, err
	}
	return parseGitConfig(name, data)
}

// missing reports whether err says a file is not there (ENOENT, or
// ENOTDIR for a path through a file).
func missing(err error) bool { return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) }

// readSmallFile returns the content of the regular file path, opened
// without following a symlink or blocking (a FIFO), at most limit bytes.
// Anything but a regular file is refused before it is opened: opening a
// device may act on it (a tape rewinds), and a configuration names any
// path. Errors: lstat(2)'s and open(2)'s, a file that is not a regular
// one (EINVAL), or one longer than limit (EFBIG).
func readSmallFile(path string, limit int64) ([]byte, error) {
	if fi, err := os.Lstat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, unix.EINVAL
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, unix.EINVAL
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("more than %d bytes: %w", limit, unix.EFBIG)
	}
	// Sized from fstat(2) (a file that grew since still stops at
	// limit): a large file is not copied through growing buffers.
	buf := bytes.NewBuffer(make([]byte, 0, fi.Size()+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("more than %d bytes: %w", limit, unix.EFBIG)
	}
	return b, nil
}

// expandGitPath returns a pathname value as git reads it
// (git-config(1), "pathname" under "--type"): "~/" and "~" are the
// worker's $HOME, "~user/" that user's home directory; "" for a value git
// could not expand (an unknown user, a "%(prefix)/" path below git's
// own installation, which lies in a system directory) or an empty one.
func expandGitPath(v string) string {
	switch {
	case v == "" || strings.HasPrefix(v, "%(prefix)/"):
		return ""
	case v == "~" || strings.HasPrefix(v, "~/"):
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		return filepath.Join(home, strings.TrimPrefix(v, "~"))
	case strings.HasPrefix(v, "~"):
		name, rest, _ := strings.Cut(v[1:], "/")
		u, err := user.Lookup(name)
		if err != nil {
			return ""
		}
		return filepath.Join(u.HomeDir, rest)
	}
	return v
}

// parseGitBool reads a boolean value as git does (git-config(1),
// "Values", "boolean"): true, yes, on, false, no, off (any case), an
// integer (true unless 0), "" (false), or a name with no "=" (true). ok
// is false for anything else.
func parseGitBool(v string, noValue bool) (b, ok bool) {
	if noValue {
		return true, true
	}
	switch strings.ToLower(v) {
	case "true", "yes", "on":
		return true, true
	case "false", "no", "off", "":
		return false, true
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n != 0, true
	}
	return false, false
}

// findModuleGitdirs returns the git directories below gitdir's
// "modules/" (a submodule's, gitrepository-layout(5)), sorted: a
// directory holding both "HEAD" and "config" is one, and its own
// "modules/" is searched in turn (nested submodules); any other
// directory is part of a submodule's name ("third_party/foo" lives in
// modules/third_party/foo) and is searched. Nothing is reached through a
// symlink: each directory is opened from its parent's descriptor with
// O_NOFOLLOW, and an entry that is a symlink is neither a git directory
// nor searched (git reaches a submodule's git directory by its path,
// which is protected where it resolves when a ".git" file names it).
//
// # Errors
//
// More than [maxModulesDepth] levels, [maxModulesEntries] entries read or
// [maxProtectMatches] git directories found, or a directory that cannot
// be opened or read: each wraps [ErrBadPath] (the job is refused, never
// run with a submodule left unprotected).
func findModuleGitdirs(gitdir string) ([]string, error) {
	modules := filepath.Join(gitdir, "modules")
	top, err := OpenNoSymlinks(modules)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, ErrRootChanged) {
			// None, or not a directory git would use: git opens
			// modules/NAME by path, through a symlink too, which the
			// walk refuses to follow; such a link is reported below.
			if fi, lerr := os.Lstat(modules); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
				return nil, &modulesError{path: modules, err: fmt.Errorf("sandbox: %s is a symlink: paddock does not follow one to find the submodules' git directories to protect: %w", modules, ErrBadPath)}
			}
			return nil, nil
		}
		return nil, fmt.Errorf("sandbox: cannot open %s to find the submodules' git directories to protect: %w: %w", modules, err, ErrBadPath)
	}
	defer top.Close()
	w := moduleWalk{}
	if err := w.walk(int(top.Fd()), modules, 0); err != nil {
		return nil, err
	}
	slices.Sort(w.found)
	return w.found, nil
}

// modulesError is a [findModuleGitdirs] error caused by what is at path
// (a symlink, a tree too deep or too large): what the check after a job
// moves aside when the job made it ([settleModules]).
type modulesError struct {
	path string
	err  error
}

func (e *modulesError) Error() string { return e.err.Error() }

func (e *modulesError) Unwrap() error { return e.err }

// moduleWalk is the state of one [findModuleGitdirs].
type moduleWalk struct {
	entries int
	found   []string
}

// walk searches the directory path, open (O_PATH) as dfd, depth levels
// below the top "modules/" (0 for it).
func (w *moduleWalk) walk(dfd int, path string, depth int) error {
	if depth > maxModulesDepth {
		return &modulesError{path: path, err: fmt.Errorf("sandbox: %s is more than %d levels below a git directory's modules/: paddock cannot look for every submodule's git directory to protect (remove what is not a submodule there): %w", path, maxModulesDepth, ErrBadPath)}
	}
	rfd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: cannot read %s to find the submodules' git directories to protect: %w: %w", path, err, ErrBadPath)
	}
	dir := os.NewFile(uintptr(rfd), path)
	defer dir.Close()
	names, err := dir.Readdirnames(maxModulesEntries - w.entries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("sandbox: cannot read %s to find the submodules' git directories to protect: %w: %w", path, err, ErrBadPath)
	}
	if w.entries += len(names); w.entries > maxModulesEntries {
		return &modulesError{path: path, err: fmt.Errorf("sandbox: more than %d entries below %s's git directories' modules/: paddock cannot look for every submodule's git directory to protect (remove what is not a submodule there): %w", maxModulesEntries, path, ErrBadPath)}
	}
	slices.Sort(names)
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(rfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("sandbox: cannot look at %s: %w: %w", filepath.Join(path, name), err, ErrBadPath)
		}
		child := filepath.Join(path, name)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
		case unix.S_IFLNK:
			// git would follow it to a git directory paddock does not
			// look at.
			return &modulesError{path: child, err: fmt.Errorf("sandbox: %s is a symlink: paddock does not follow one to find the submodules' git directories to protect: %w", child, ErrBadPath)}
		default:
			continue
		}
		cfd, err := unix.Openat(rfd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("sandbox: cannot open %s to find the submodules' git directories to protect: %w: %w", child, err, ErrBadPath)
		}
		err = w.visit(cfd, child, depth)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// visit handles the directory child of a walk, open (O_PATH) as cfd.
func (w *moduleWalk) visit(cfd int, child string, depth int) error {
	if !existsAt(cfd, "HEAD") || !existsAt(cfd, "config") {
		return w.walk(cfd, child, depth+1)
	}
	if len(w.found) >= maxProtectMatches {
		return &modulesError{path: child, err: fmt.Errorf("sandbox: more than %d submodule git directories below %s: more than a sandbox can protect: %w", maxProtectMatches, child, ErrBadPath)}
	}
	w.found = append(w.found, child)
	var st unix.Stat_t
	if unix.Fstatat(cfd, "modules", &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return &modulesError{path: child + "/modules", err: fmt.Errorf("sandbox: %s/modules is a symlink: paddock does not follow one to find the submodules' git directories to protect: %w", child, ErrBadPath)}
	default:
		return nil
	}
	mfd, err := unix.Openat(cfd, "modules", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: cannot open %s/modules to find the submodules' git directories to protect: %w: %w", child, err, ErrBadPath)
	}
	defer unix.Close(mfd)
	return w.walk(mfd, filepath.Join(child, "modules"), depth+1)
}

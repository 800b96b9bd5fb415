package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"paddock/hooks"
	"paddock/sandbox"
)

// Fence is what paddock keeps out of every job's reach, on top of the
// sandbox's own rules:
//
//   - hidden directories (the state directory, and whatever
//     [Fence.WithHidden] adds: the default state and config directories)
//     are covered with an empty read-only tmpfs inside every sandbox, so a
//     job cannot read, lock or write the queue database, other jobs' logs
//     and workspaces, the caches or the inbox. A job's own default
//     workspace, <state>/workspaces/<id>, is bound back. A workspace or
//     writable root inside a hidden directory is refused, in every
//     confined mode, unless it is (or is inside) the job's own default
//     workspace: a job cannot name another job's;
//   - protected paths (the state directory, the config file even when it
//     does not exist yet, the hook modules, the paddock binary, bwrap) may
//     not be inside a workspace_write job's workspace or writable root, nor
//     be one: a job that could write there could change what paddock runs
//     next. Masking them read-only inside the sandbox would not do: a job
//     may rename any directory of its writable tree, an ancestor of a mask
//     included, and put its own files at the old path on the host.
//
// The rules are checked on open descriptors, by device and inode, never
// on path text ([Fence.Pin]): each root is opened without following a
// symlink, its ancestors are walked through "..", and the descriptors
// checked are the ones bwrap binds. A path swapped after the check changes
// nothing that is bound.
//
// Built by [FenceFor]; the zero value protects and hides nothing. A Fence
// is immutable and safe for concurrent use.
type Fence struct {
	stateDir  string   // canonical; "" = none
	config    []string // the config files among protected: they can move (--config)
	protected []string // absolute as given and canonical as far as they exist
	hidden    []string // absolute as given and canonical
	// hidePatterns are absolute glob patterns (filepath.Match) of what is
	// hidden, expanded again whenever the fence reads the file system (at
	// most once a second): a secret created after the worker started is
	// hidden from the next jobs too. A match that is a directory is hidden
	// like hidden, a file is made unreadable (sandbox.PolicyParams.
	// HideFiles).
	hidePatterns []string
	// protect are the sub-paths kept read-only inside every writable
	// root (sandbox.PolicyParams.Protect), "~/" expanded.
	protect []string
	cache   *fenceCache
}

// fenceCacheTTL is how long the identities of the protected paths and the
// hidden directories that exist are reused before they are read again.
// They are paddock's own paths, which no job can rename (a root that
// contains one is refused), so a second of reuse loses nothing but the
// ~100 system calls a job would otherwise cost.
const fenceCacheTTL = time.Second

// fenceCache holds what the fence read from the file system, for
// fenceCacheTTL; shared by the copies of one Fence.
type fenceCache struct {
	mu  sync.Mutex
	at  time.Time
	now *fenceState
}

// fenceState is what the fence read from the file system: the identities
// of the protected paths and their ancestors, the hidden directories that
// exist, and their identities.
type fenceState struct {
	protected   map[fileID]string
	hidden      []string
	hiddenFiles []string
	hiddenIDs   map[fileID]string
	// unreachable are hidden paths (resolved as far as they could be)
	// that the worker could not look at: a directory on the way it may
	// not read (a job's chmod 000). A job that may write where one lies
	// is refused: it could give the permissions back and read what it
	// hides.
	unreachable []string
	// overflowing are hide patterns matching more than maxHideMatches
	// paths even with their directories hidden in their place: every
	// confined job is refused while one does.
	overflowing []string
	// literal are the literal hide entries (no glob metacharacter), their
	// last component as named: protected too inside a job's writable
	// root ([Fence.literalHidesIn]).
	literal []string
}

// maxHideMatches bounds the paths one hide pattern is expanded to: each is
// a tmpfs (and, inside a root, a --remount-ro that reads the whole mount
// table) in every job's argv, which bwrap caps at 9,000 arguments, and a
// job may make directories for a pattern to match. Past it, the matches'
// directories are hidden in their place.
const maxHideMatches = 256

// state returns the fence's fenceState, read again when older than
// fenceCacheTTL.
func (f Fence) state() *fenceState {
	if f.cache == nil {
		return f.readState()
	}
	c := f.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if age := time.Since(c.at); c.now == nil || age > fenceCacheTTL || age < 0 {
		c.now, c.at = f.readState(), time.Now()
	}
	return c.now
}

func (f Fence) readState() *fenceState {
	st := &fenceState{protected: f.protectedAncestors(), hiddenIDs: map[fileID]string{}}
	// record hides what was found at canonical path c (fi: its lstat or
	// stat, never a link), named as named: a directory behind a tmpfs,
	// and a file made unreadable when fileToo.
	record := func(c string, fi fs.FileInfo, named string, fileToo bool) {
		switch {
		case fi.IsDir():
			if !slices.Contains(st.hidden, c) {
				st.hidden = append(st.hidden, c)
			}
			if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
				st.hiddenIDs[fileID{uint64(sys.Dev), sys.Ino}] = named
			}
		case fileToo && !slices.Contains(st.hiddenFiles, c):
			st.hiddenFiles = append(st.hiddenFiles, c)
		}
	}
	// add hides path, an operator's entry: symlinks followed, but not
	// into what no job could run without.
	add := func(path string, fileToo bool) {
		c, err := filepath.EvalSymlinks(path)
		if err != nil {
			if !isMissing(err) {
				st.unreachable = append(st.unreachable, canonicalPrefix(path))
			}
			return
		}
		if c != filepath.Clean(path) && sandbox.IsSystemPath(c) {
			// Reached through a link (a job may have made it) to what no
			// job could run without: not hidden, nothing of the
			// operator's is there.
			return
		}
		if fi, err := os.Stat(c); err == nil {
			record(c, fi, path, fileToo)
		}
	}
	for _, h := range f.hidden {
		add(h, false)
	}
	for _, pat := range f.hidePatterns {
		if !strings.ContainsAny(pat, `*?[\`) {
			// A literal entry: hidden wherever its links lead (a
			// ~/.ssh that stow or chezmoi made a link to dotfiles/ssh),
			// as the docs tell operators to name such a secret.
			add(pat, true)
			st.literal = append(st.literal, filepath.Join(canonicalPrefix(filepath.Dir(pat)), filepath.Base(pat)))
			continue
		}
		if c, err := filepath.EvalSymlinks(pat); err == nil && c == filepath.Clean(pat) {
			// A path whose name holds a glob's metacharacters
			// ("cfg[prod]") is hidden as named too (reached through no
			// link, as a pattern's matches are).
			add(pat, true)
		}
		matches, unreadable := globStrict(pat)
		st.unreachable = append(st.unreachable, unreadable...)
		// What could not be listed may hold matches a job can open by
		// name (search without read rights): hidden whole, and counted
		// with the matches, which a job may multiply.
		matches, ok := collapseMatches(append(matches, unreadable...), maxHideMatches)
		if !ok {
			st.overflowing = append(st.overflowing, pat)
			continue
		}
		for _, m := range matches {
			// Looked at again, without following a link: a job may have
			// swapped a matched directory for one since it was listed.
			fi, err := os.Lstat(m)
			switch {
			case err != nil && !isMissing(err):
				st.unreachable = append(st.unreachable, canonicalPrefix(filepath.Dir(m)))
			case err == nil && fi.Mode()&fs.ModeSymlink == 0:
				record(filepath.Join(canonicalPrefix(filepath.Dir(m)), filepath.Base(m)), fi, m, true)
			}
		}
	}
	return st
}

// isMissing says whether err means nothing is there (a path or a
// directory on its way does not exist), rather than that it could not be
// looked at.
func isMissing(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// collapseMatches returns matches with, while they are more than max,
// the directory holding the most of them (the nearest ancestor holding
// two or more, looked for one level up, then two ...) hidden in their
// place: a job that floods its own directory has it hidden whole, while
// a match elsewhere, alone in its directory, stays a match of its own.
// ok is false when only "/" would hold them.
func collapseMatches(matches []string, max int) (_ []string, ok bool) {
	matches = slices.Compact(slices.Sorted(slices.Values(matches)))
	for len(matches) > max {
		folded := false
		for level := 1; !folded; level++ {
			count := map[string]int{}
			reachedRoot := true
			for _, m := range matches {
				a := m
				for range level {
					a = filepath.Dir(a)
				}
				if a != "/" {
					count[a]++
					reachedRoot = false
				}
			}
			if reachedRoot {
				return nil, false
			}
			most, n := "", 1
			for d, c := range count {
				if c > n || c == n && n > 1 && d < most {
					most, n = d, c
				}
			}
			if most == "" {
				continue // no ancestor at this level holds two
			}
			matches = append(slices.DeleteFunc(matches, func(m string) bool { return sandbox.Within(m, most) }), most)
			folded = true
		}
	}
	return matches, true
}

// globStrict is filepath.Glob for an absolute pattern, but for what a
// job may arrange below the pattern's first metacharacter: there no
// symlink is followed (a job could point one anywhere, to make the fence
// hide another job's workspace or /proc), and the directories whose
// listing or lookup failed for a reason other than not existing (a job's
// chmod 0111 or 000, which stops a worker that is not root) are
// returned as unreadable, where filepath.Glob skips them in silence. The
// literal directories before the first metacharacter are the
// operator's, followed as written. A bad pattern matches nothing.
func globStrict(pattern string) (matches, unreadable []string) {
	if _, err := filepath.Match(pattern, ""); err != nil || !filepath.IsAbs(pattern) {
		return nil, nil
	}
	dirs := []string{"/"}
	wild := false
	for _, comp := range strings.Split(strings.TrimPrefix(filepath.Clean(pattern), "/"), "/") {
		var next []string
		for _, d := range dirs {
			if !strings.ContainsAny(comp, `*?[\`) {
				p := filepath.Join(d, comp)
				if !wild {
					next = append(next, p)
					continue
				}
				fi, err := os.Lstat(p)
				switch {
				case isMissing(err):
				case err != nil:
					unreadable = append(unreadable, d)
				case fi.Mode()&fs.ModeSymlink == 0:
					next = append(next, p)
				}
				continue
			}
			entries, err := os.ReadDir(d)
			if err != nil {
				if !isMissing(err) {
					unreadable = append(unreadable, d)
				}
				continue
			}
			for _, e := range entries {
				if e.Type()&fs.ModeSymlink != 0 {
					continue
				}
				if ok, _ := filepath.Match(comp, e.Name()); ok {
					next = append(next, filepath.Join(d, e.Name()))
				}
			}
		}
		if strings.ContainsAny(comp, `*?[\`) {
			wild = true
		}
		dirs = next
	}
	return dirs, unreadable
}

// FenceFor returns the fence of a worker with this state directory and
// config (Config.Path and the hooks' paths), plus the extra protected
// paths. Each is protected both as written (made absolute: a symlink on
// the way, such as a state directory given as a link, could be repointed)
// and resolved. The state directory and the config's own state_dir are
// hidden.
func FenceFor(stateDir string, cfg Config, extra ...string) Fence {
	f := Fence{}
	if stateDir != "" {
		f.stateDir = canonicalPrefix(stateDir)
	}
	f.protected = addPaths(f.protected, stateDir, cfg.Path, cfg.StateDir)
	f.config = addPaths(nil, cfg.Path)
	for _, h := range cfg.Hooks {
		f.protected = addPaths(f.protected, h.Path)
	}
	f.protected = addPaths(f.protected, extra...)
	f.hidden = addPaths(f.hidden, stateDir, cfg.StateDir)
	f.cache = &fenceCache{}
	return f
}

// DeviceNodes returns where a job's substitute device nodes live
// ([sandbox.PrepareDeviceNodes], [sandbox.ConfineParams].DeviceNodes):
// the state directory's ([StateDir.DeviceNodes]) when this process runs
// as root, whose jobs run as host uid 0 and would own the host's nodes;
// "" when it does not, or f has no state directory.
func (f Fence) DeviceNodes() string {
	if f.stateDir == "" || os.Geteuid() != 0 {
		return ""
	}
	return StateDir{Root: f.stateDir}.DeviceNodes()
}

// WithHidden returns a copy of f that also hides (and protects) dirs,
// those of them that exist when a job starts.
func (f Fence) WithHidden(dirs ...string) Fence {
	f.protected = addPaths(slices.Clone(f.protected), dirs...)
	f.hidden = addPaths(slices.Clone(f.hidden), dirs...)
	f.cache = &fenceCache{}
	return f
}

// WithHidePatterns returns a copy of f that also hides whatever matches
// patterns (absolute filepath.Match globs; others are ignored) when a job
// starts: directories behind an empty tmpfs, files made unreadable. The
// patterns are expanded again at most once a second, so what appears
// later is hidden too.
func (f Fence) WithHidePatterns(patterns ...string) Fence {
	f.hidePatterns = slices.Clone(f.hidePatterns)
	for _, p := range patterns {
		if filepath.IsAbs(p) && !slices.Contains(f.hidePatterns, p) {
			f.hidePatterns = append(f.hidePatterns, filepath.Clean(p))
		}
	}
	f.cache = &fenceCache{}
	return f
}

// WithProtect returns a copy of f that keeps entries read-only inside
// every workspace_write job's writable roots (sandbox.PolicyParams.
// Protect: relative sub-paths and globs, or absolute paths; a leading
// "~/" is the user's home). They are resolved anew for each job, on the
// file system as it is when the job starts.
func (f Fence) WithProtect(entries ...string) Fence {
	home := homeDir()
	f.protect = slices.Clone(f.protect)
	for _, e := range entries {
		if e = ExpandHome(e, home); e != "" && !slices.Contains(f.protect, e) {
			f.protect = append(f.protect, e)
		}
	}
	return f
}

// addPaths appends each non-empty path, absolute and canonical, to list
// unless it is there already.
func addPaths(list []string, paths ...string) []string {
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			abs = filepath.Clean(p)
		}
		for _, q := range []string{abs, canonicalPrefix(p)} {
			if !slices.Contains(list, q) {
				list = append(list, q)
			}
		}
	}
	return list
}

// canonicalPrefix makes path absolute and resolves every symlink on it,
// dangling ones included (the rest may be created later: a dangling link's
// target is where the file will be), component by component, at most 40
// links deep (SYMLOOP_MAX on Linux).
func canonicalPrefix(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	resolved := "/"
	rest := strings.Split(strings.TrimPrefix(abs, "/"), "/")
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
		fi, err := os.Lstat(next)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			resolved = next // a directory, a file, or nothing yet
			continue
		}
		target, err := os.Readlink(next)
		if hops++; err != nil || hops > 40 {
			return abs
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), rest...)
	}
	return resolved
}

// fileID is a file's identity: device and inode.
type fileID struct{ dev, ino uint64 }

func statID(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

// lstatID returns the identity of path without following a final
// symlink.
func lstatID(path string) (fileID, bool) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return fileID{}, false
	}
	return statID(&st), true
}

// Check returns the error a worker with this fence refuses pol with for
// job jobID, or nil when the fence allows it: [Fence.Pin] without keeping
// the descriptors. jobID "" is a job with no default workspace of its own
// (`paddock confine`). Safe for concurrent use.
func (f Fence) Check(pol sandbox.Policy, jobID string) error {
	pins, err := f.Pin(pol, jobID)
	if err != nil {
		return err
	}
	pins.Close()
	return nil
}

// Pin opens pol's roots without following any symlink
// ([sandbox.PinRoots]) and checks each descriptor against the fence by
// device and inode: a root inside a hidden directory is refused unless it
// lies within job jobID's own default workspace; a workspace_write root
// that is a protected path or an ancestor of one is refused. jobID may be
// "" (no default workspace is anyone's). The caller binds the returned
// descriptors ([sandbox.ConfineParams].RootFDs) and closes them.
//
// # Errors
//
// A root that changed since the policy was built (wraps
// [sandbox.ErrRootChanged]), one that cannot be opened, or one the fence
// refuses (the message says which rule and what to do).
func (f Fence) Pin(pol sandbox.Policy, jobID string) (*sandbox.Pinned, error) {
	pins, err := sandbox.PinRoots(pol)
	if err != nil {
		return nil, fmt.Errorf("runner: %w", err)
	}
	if err := f.checkPinned(pol, pins, jobID); err != nil {
		pins.Close()
		return nil, err
	}
	return pins, nil
}

func (f Fence) checkPinned(pol sandbox.Policy, pins *sandbox.Pinned, jobID string) error {
	roots := pol.Roots()
	if len(roots) == 0 {
		return nil
	}
	st := f.state()
	hidden := st.hiddenIDs
	var own fileID
	ownPath := ""
	if f.stateDir != "" && jobID != "" && !strings.ContainsAny(jobID, "/\x00") && jobID != "." && jobID != ".." {
		ownPath = StateDir{Root: f.stateDir}.DefaultWorkspace(jobID)
		own, _ = lstatID(ownPath)
	}
	protected := st.protected
	if pol.Mode() != sandbox.ModeWorkspaceWrite {
		protected = nil
	}
	for i, file := range pins.Files() {
		if err := f.checkPinnedRoot(roots[i], file, hidden, protected, own, ownPath); err != nil {
			// The job file's key: the workspace is the first root.
			key := "writable"
			if i == 0 {
				key = "workspace"
			}
			return &sandbox.KeyError{Key: key, Err: err}
		}
	}
	return nil
}

// checkPinnedRoot is [Fence.checkPinned] for one root, open as file: it
// may lie in no hidden directory (by hidden's identities) but the job's
// own default workspace (own, at ownPath), and hold no protected path.
func (f Fence) checkPinnedRoot(root string, file *os.File, hidden, protected map[fileID]string, own fileID, ownPath string) error {
	var rootID fileID
	var inHidden string
	isHidden := false
	err := walkUp(file, func(id fileID, first bool) bool {
		if first {
			rootID = id
		}
		if ownPath != "" && id == own {
			return false // within the job's own workspace: allowed
		}
		if h, ok := hidden[id]; ok {
			inHidden, isHidden = h, first
			return false
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("runner: checking %s: %w", root, err)
	}
	if inHidden != "" {
		if f.stateDir != "" && (inHidden == f.stateDir || canonicalPrefix(inHidden) == f.stateDir) {
			own := "a job that names no workspace gets its own, " + StateDir{Root: f.stateDir}.Workspaces() + "/<its id>"
			if ownPath != "" {
				own = "this job's own is " + ownPath
			}
			where := "is inside paddock's state directory " + f.stateDir
			if isHidden {
				where = "is paddock's state directory"
			}
			return fmt.Errorf("runner: %s %s, which jobs cannot see: a job may use only its own default workspace there (%s)", root, where, own)
		}
		if isHidden {
			return fmt.Errorf("runner: %s is hidden from every job (one of paddock's own directories, or on the policy's hide list)", root)
		}
		return fmt.Errorf("runner: %s is inside %s, which is hidden from every job (one of paddock's own directories, or on the policy's hide list)", root, inHidden)
	}
	if p, ok := protected[rootID]; ok {
		what := "contains " + p + ", which"
		if p == root {
			what = "is a path"
		}
		return fmt.Errorf("runner: %s %s paddock keeps out of every job's reach (a job that may write there could change what paddock runs next: its queue, config, hooks, binary or bwrap): %s", root, what, f.advice(p))
	}
	return nil
}

// advice says how to run a job whose writable tree contains protected
// path p: always another workspace; another state directory or config
// when p is one of those (the binary, bwrap and the hook modules stay).
func (f Fence) advice(p string) string {
	a := "choose a workspace and writable paths that do not contain it"
	if filepath.Base(p) == "bwrap" {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			// A $PATH entry before the one holding bwrap.
			a = "nothing is there now, but its directory comes before bwrap's on $PATH, so a bwrap a job put there would run in its place, on the host: " + a
		}
	}
	switch {
	case slices.Contains(f.config, p):
		return a + ", or move the config (--config)"
	case f.stateDir != "" && (p == f.stateDir || canonicalPrefix(p) == f.stateDir):
		return a + ", or use another state directory (--state-dir)"
	}
	return a
}

// statPathID is the identity of the directory path leads to (symlinks
// followed: a hidden directory given as a link hides its target).
func statPathID(path string) (fileID, bool) {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return fileID{}, false
	}
	return statID(&st), true
}

// protectedAncestors maps the identity of every protected path and of
// each of its ancestors but "/" to the protected path: a root with one of
// these identities is, or contains, a protected path.
func (f Fence) protectedAncestors() map[fileID]string {
	m := map[fileID]string{}
	for _, p := range f.protected {
		for q := p; q != "/" && q != "." && q != ""; q = filepath.Dir(q) {
			if id, ok := lstatID(q); ok {
				if _, seen := m[id]; !seen {
					m[id] = p
				}
			}
		}
	}
	return m
}

// maxDepth bounds walkUp: no real directory tree is deeper (PATH_MAX is
// 4096 bytes, each level at least two).
const maxDepth = 2048

// walkUp calls visit with the identity of dir, then of each ancestor
// reached through "..", up to the root, while visit returns true. The
// walk uses descriptors only: it cannot be sent elsewhere by a symlink or
// a rename of a path.
func walkUp(dir *os.File, visit func(id fileID, first bool) bool) error {
	fd := int(dir.Fd())
	owned := false
	defer func() {
		if owned {
			unix.Close(fd)
		}
	}()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	id := statID(&st)
	for depth := 0; depth < maxDepth; depth++ {
		if !visit(id, depth == 0) {
			return nil
		}
		parent, err := unix.Openat(fd, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		if owned {
			unix.Close(fd)
		}
		fd, owned = parent, true
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		pid := statID(&st)
		if pid == id {
			return nil // "/": its ".." is itself
		}
		id = pid
	}
	return fmt.Errorf("deeper than %d directories", maxDepth)
}

// CheckJob returns the error a worker refuses job j with before its
// hooks (its sandbox policy cannot be built, or [Fence.Pin] refuses a
// root), or nil. It opens and closes the roots; safe for concurrent use.
func (f Fence) CheckJob(j hooks.Job) error {
	pol, err := f.policy(j)
	if err != nil {
		return err
	}
	return f.Check(pol, j.ID)
}

// SandboxInfo computes the request's sandbox section for a job as it
// stands, with no [Fence]: the confined argv it would run with now. Use
// [Fence.SandboxInfo] for a worker's chain.
func SandboxInfo(j hooks.Job) (hooks.SandboxInfo, error) { return Fence{}.SandboxInfo(j) }

// SandboxInfo computes the request's sandbox section for a job as it
// stands: the confined argv it would run with now, the fence's hidden
// directories included (roots shown by path). It is the chain's
// [hooks.ChainOptions.Sandbox] callback. It does not pin the roots: the
// runner checks them with [Fence.Pin] before the hooks and again after
// any adjustment.
func (f Fence) SandboxInfo(j hooks.Job) (hooks.SandboxInfo, error) {
	d := sandbox.Discovered()
	info := hooks.SandboxInfo{Grade: string(d.Grade), Executable: d.Executable}
	pol, err := f.policy(j)
	if err != nil {
		return info, err
	}
	info.Network = pol.Network()
	info.Hidden = append(pol.Hide(), pol.HideFiles()...)
	info.Protected = pol.Protected()
	// A root worker's substitute device nodes are bound where bwrap
	// starts (sandbox.StartWithDeviceNodes), not in its argv.
	info.Argv, err = sandbox.Build(sandbox.ConfineParams{Argv: j.Argv, Policy: pol, Discovery: d})
	return info, err
}

// policy builds the sandbox policy of a job as hooks see it, with the
// fence's hidden directories ([Fence.Policy]).
func (f Fence) policy(j hooks.Job) (sandbox.Policy, error) { return f.policyOf(j, true) }

// rootsPolicy is [Fence.policy] without the protected paths: the job's
// mode and writable roots, checked, for taking the roots' locks before
// the protected paths are resolved under them ([Executor.lockAndResolve]),
// which would otherwise be resolved twice for every job.
func (f Fence) rootsPolicy(j hooks.Job) (sandbox.Policy, error) { return f.policyOf(j, false) }

// policyOf is [Fence.policy], with the protected paths only when protect.
func (f Fence) policyOf(j hooks.Job, protect bool) (sandbox.Policy, error) {
	mode, err := sandbox.ParseMode(j.Mode)
	if err != nil {
		return sandbox.Policy{}, err
	}
	pp := sandbox.PolicyParams{Mode: mode, Workspace: j.Workspace, Cwd: j.Cwd, Network: j.Network, UnixSockets: j.UnixSockets, Writable: j.Writable}
	// The hooks' extra hidden paths: those that exist, as directories or
	// files; one that does not exist has nothing to hide.
	for _, h := range j.Hide {
		c, err := sandbox.Canonical(h)
		if isMissing(err) {
			continue
		}
		if err != nil {
			return sandbox.Policy{}, fmt.Errorf("runner: the hooks' hidden path %q: %w", h, err)
		}
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			pp.Hide = append(pp.Hide, c)
		} else if err == nil {
			pp.HideFiles = append(pp.HideFiles, c)
		}
	}
	if !protect {
		return f.newPolicy(pp, false)
	}
	pp.Protect = j.Protect
	return f.Policy(pp)
}

// Policy is [sandbox.NewPolicy] with the fence's hidden directories that
// exist now added to p.Hide, and its protected paths to p.Protect (for a
// confined mode). A hidden directory that
// is itself one of the roots is left out, so that [Fence.Pin] refuses the
// root with the fence's own reason. It reads the file system.
func (f Fence) Policy(p sandbox.PolicyParams) (sandbox.Policy, error) { return f.newPolicy(p, true) }

// newPolicy is [Fence.Policy], adding the fence's protected paths only
// when protect.
func (f Fence) newPolicy(p sandbox.PolicyParams, protect bool) (sandbox.Policy, error) {
	if p.Mode.Confined() {
		var roots []string
		for _, r := range append([]string{p.Workspace}, p.Writable...) {
			if c, err := sandbox.Canonical(r); err == nil {
				roots = append(roots, c)
			}
		}
		st := f.state()
		if len(st.overflowing) > 0 {
			return sandbox.Policy{}, fmt.Errorf("runner: the hide pattern %q matches too many paths to hide, even by their directories (a job may have made them: remove what is not yours there): %w", st.overflowing[0], sandbox.ErrBadPath)
		}
		if p.Mode == sandbox.ModeWorkspaceWrite {
			for _, u := range st.unreachable {
				for _, r := range roots {
					if sandbox.Within(u, r) {
						return sandbox.Policy{}, fmt.Errorf("runner: paddock cannot look at %s, on the way to a hidden path inside the writable root %s (a job may have taken its permissions away, which a job writing there could give back to read what is hidden): give its owner read and search rights again (chmod u+rx): %w", u, r, sandbox.ErrBadPath)
					}
				}
			}
		}
		// One reading of the hidden paths for the whole policy.
		p.Hide = slices.Clone(p.Hide)
		for _, h := range st.hidden {
			if !slices.Contains(roots, h) {
				p.Hide = append(p.Hide, h)
			}
		}
		p.HideFiles = append(slices.Clone(p.HideFiles), st.hiddenFiles...)
		if protect {
			p.Protect = append(slices.Clone(p.Protect), f.protect...)
			if p.Mode == sandbox.ModeWorkspaceWrite {
				p.Protect = append(p.Protect, literalHidesIn(st.literal, roots)...)
			}
		}
	}
	return sandbox.NewPolicy(p)
}

// literalHidesIn returns those of literal (fenceState.literal: the
// literal hide entries, last component as named) that lie inside one of
// roots (canonical): protected as well as hidden
// (sandbox.PolicyParams.Protect). A literal entry is hidden wherever its
// link leads, so a job that could write where it lies would otherwise
// turn it into a link to another job's workspace (hiding that for every
// job), or point an operator's link elsewhere (the next jobs reading the
// secret it led to). Protected, a link there is put back when a job
// replaces it, and a path made there is moved aside, the job stopped.
func literalHidesIn(literal, roots []string) []string {
	var out []string
	for _, named := range literal {
		for _, r := range roots {
			if named != r && sandbox.Within(named, r) {
				out = append(out, named)
				break
			}
		}
	}
	return out
}

// PinnedInside returns the first of pol's pinned roots (pins.Files, in
// pol.Roots order) that is or lies inside one of dirs, by device and
// inode walking up from its descriptor, with the entry of dirs it is in;
// "" when none is. Roots for which exempt(i) holds are skipped. dirs that
// do not exist are ignored. An error is a root whose ancestors cannot be
// walked.
func PinnedInside(pol sandbox.Policy, pins *sandbox.Pinned, dirs []string, exempt func(i int) bool) (root, dir string, err error) {
	ids := map[fileID]string{}
	for _, d := range dirs {
		if id, ok := statPathID(d); ok {
			ids[id] = d
		}
	}
	return pinnedFirst(pol, pins, ids, exempt, true)
}

// PinnedWithin checks each pinned root of pol whose index is not exempt
// (exempt(i) true: the job's own default workspace, say) against dirs by
// device and inode: the directory bound must be one of dirs or lie below
// one, found by walking its ancestors through "..". It returns the path
// of the first root that is not, or "" when all are. A check made on path
// text before the roots were pinned can be raced (a symlink flipped
// between that resolution and the pin); this one is made on what bwrap
// binds. dirs are given as open descriptors (within) or as paths, stat'ed
// now (withinPaths; those that do not exist count for nothing).
func PinnedWithin(pol sandbox.Policy, pins *sandbox.Pinned, within []*os.File, withinPaths []string, exempt func(i int) bool) (string, error) {
	ids := map[fileID]string{}
	for _, d := range withinPaths {
		if id, ok := statPathID(d); ok {
			ids[id] = d
		}
	}
	for _, f := range within {
		var st unix.Stat_t
		if unix.Fstat(int(f.Fd()), &st) == nil {
			ids[statID(&st)] = f.Name()
		}
	}
	root, _, err := pinnedFirst(pol, pins, ids, exempt, false)
	return root, err
}

// pinnedFirst returns the first pinned root of pol, exempt ones skipped,
// that is (inside true) or is not (inside false) one of the directories
// ids names or below one, walking up from its descriptor; with inside,
// also the name of the directory it is in.
func pinnedFirst(pol sandbox.Policy, pins *sandbox.Pinned, ids map[fileID]string, exempt func(i int) bool, inside bool) (root, dir string, err error) {
	roots := pol.Roots()
	for i, file := range pins.Files() {
		if exempt != nil && exempt(i) {
			continue
		}
		in, found := "", false
		if err := walkUp(file, func(id fileID, _ bool) bool {
			in, found = ids[id]
			return !found
		}); err != nil {
			return roots[i], "", fmt.Errorf("runner: checking %s: %w", roots[i], err)
		}
		if found == inside {
			return roots[i], in, nil
		}
	}
	return "", "", nil
}

package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrProtectedAppeared is wrapped by [ProtectWatchers.Watch] when a protected
// path that did not exist when the policy was built exists once it is
// watched, or a protected symlink changed meanwhile: something else than
// the job made it, so nothing is moved, and the job must not run under a
// policy resolved for a tree that is gone.
var ErrProtectedAppeared = errors.New("changed since the job's fence was resolved")

// protectWatchMask is what each watched directory reports: an entry
// made, renamed in or out, or removed (a link that is replaced is first
// renamed or removed), and the directory itself moved or removed
// (inotify(7)). IN_DONT_FOLLOW is not set: the watch is added through
// the magic link /proc/self/fd/N, which must be followed to reach the
// directory the descriptor holds (it was opened without following any
// symlink); IN_ONLYDIR still refuses anything but a directory.
const protectWatchMask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_DELETE |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watchedDir is one directory of a [ProtectWatch]: the missing
// protected paths and the protected symlinks it holds, by name.
type watchedDir struct {
	path   string
	absent []string // canonical paths of missing protected entries
	// pending are missing protected paths further down, whose next
	// directory on the way is missing here too (protectPending).
	pending []string
	links   []int // indexes into ProtectWatch.links
	// f is the directory watched, opened without following a symlink
	// (O_PATH), kept for the watch's life: what the job creates there
	// is moved aside through it, wherever the directory is moved.
	f *os.File
	// root marks a writable root: a mount point in the job's sandbox,
	// which only something outside it can move.
	root bool
}

// ProtectWatch moves aside, while a job runs, what the job creates at
// the protected paths of its policy that did not exist, and puts back
// the protected symlinks it replaces ([Policy.AfterCommand] does the same
// once the job has ended), as soon as inotify(7) reports the change:
// no mount can keep a name in a writable directory from being created,
// so the created path exists from the instant it is made until it is
// moved aside (well under a millisecond when the worker is not starved;
// see docs/performance.md). Tripped is closed at the first such change,
// and the caller stops the job then. Its methods are safe for concurrent
// use; a nil *ProtectWatch (a policy with nothing to watch) watches
// nothing.
type ProtectWatch struct {
	pool   *ProtectWatchers
	in     *inotify
	own    bool    // pool was made for this watch alone: Stop closes it
	wds    []int32 // every watch descriptor added, each once
	jobID  string
	dirs   map[int32][]*watchedDir // by watch descriptor
	all    []*watchedDir           // every directory opened, closed by Stop
	absent []string                // every missing protected path, pending ones included
	roots  []string                // the policy's writable roots

	// active keeps Stop from closing the directories while an event is
	// handled through them (RLock, by the instance's reader; events of
	// one instance are handled one at a time), and events from being
	// handled before Watch has set the watch up or once Stop has begun
	// (Lock).
	active  sync.RWMutex
	stopped bool // guarded by active

	// moving makes created's move and its mark in moved one step, so a
	// second look at a path being moved aside waits for the first.
	moving sync.Mutex

	mu    sync.Mutex
	links []ProtectedLink // as last put back; guarded by mu
	found []string        // one sentence per change, for the attempt's reason
	moved map[string]bool // the missing paths moved aside; guarded by mu

	tripOnce sync.Once
	tripped  chan struct{}
	stopOnce sync.Once
}

// Watch starts watching the directories that hold p's missing
// protected paths and protected symlinks ([ProtectedLink]): one watch
// per directory on ws's inotify instance, added through the directory
// opened without following any symlink ([OpenNoSymlinks]), so a
// directory that was swapped for a symlink is refused, never watched
// where the symlink leads. Once the watches are in place, it checks that
// every missing path is still missing and every link unchanged. Call it
// before the job's first process starts, and [ProtectWatch.Stop]
// (through [Policy.AfterCommand]) once its last one has ended. A nil ws
// makes an instance for this watch alone, which Stop closes.
//
// It returns nil and no error when p has nothing to watch (no watch, no
// inotify instance).
//
// # Errors
//
//   - a directory that is no longer one, or reached through a symlink
//     (wraps [ErrRootChanged]);
//   - a missing protected path that exists now, or a protected link that
//     changed (wraps [ErrProtectedAppeared]);
//   - inotify_init1(2) or inotify_add_watch(2) failing: the per-user
//     limits fs.inotify.max_user_instances and max_user_watches
//     (inotify(7)) are the usual cause.
//
// The caller must not run the job unwatched after an error.
func (ws *ProtectWatchers) Watch(p Policy, jobID string) (*ProtectWatch, error) {
	absent := p.watchedPaths()
	if len(absent) == 0 && len(p.links) == 0 {
		return nil, nil
	}
	byPath := map[string]*watchedDir{}
	var order []*watchedDir
	dir := func(path string) *watchedDir {
		d := byPath[path]
		if d == nil {
			d = &watchedDir{path: path}
			byPath[path] = d
			order = append(order, d)
		}
		return d
	}
	for _, a := range p.protectPathsOf(protectAbsent) {
		d := dir(filepath.Dir(a))
		d.absent = append(d.absent, a)
	}
	for _, t := range p.protectPathsOf(protectPending) {
		d := dir(deepestDir(t))
		d.pending = append(d.pending, t)
	}
	roots := p.Roots()
	w := &ProtectWatch{jobID: jobID, absent: absent, roots: roots, dirs: map[int32][]*watchedDir{}, links: p.protectedLinks(),
		tripped: make(chan struct{}), moved: map[string]bool{}}
	for i, l := range w.links {
		d := dir(filepath.Dir(l.Path))
		d.links = append(d.links, i)
	}
	if ws == nil {
		ws, w.own = &ProtectWatchers{}, true
	}
	w.pool = ws
	// No event is handled until the watch is set up.
	w.active.Lock()
	err := ws.register(w, func() error {
		for _, d := range order {
			d.root = slices.Contains(roots, d.path)
			if err := w.add(d); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = w.checkLinks()
	}
	w.active.Unlock()
	if err != nil {
		w.Stop()
		return nil, err
	}
	return w, nil
}

// add watches d's directory, opened without following a symlink, and
// then checks, in the directory watched, that d's missing paths are
// still missing: a path made before the watch would be told by no
// event.
func (w *ProtectWatch) add(d *watchedDir) error {
	f, err := OpenNoSymlinks(d.path)
	if err != nil {
		return fmt.Errorf("sandbox: watch the protected paths in %s: %w", d.path, err)
	}
	d.f = f
	w.all = append(w.all, d)
	wd, err := unix.InotifyAddWatch(w.in.fd, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), protectWatchMask)
	if errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("sandbox: watch the protected paths in %s: inotify_add_watch: %w: the user's inotify watches are used up (fs.inotify.max_user_watches; see docs/troubleshooting.md)", d.path, err)
	}
	if err != nil {
		return fmt.Errorf("sandbox: watch the protected paths in %s: inotify_add_watch: %w", d.path, err)
	}
	// Two paths of one directory (a bind mount) share a watch, and so
	// do two watches of one directory.
	if _, ok := w.dirs[int32(wd)]; !ok {
		w.wds = append(w.wds, int32(wd))
		k := wdKey{w.in, int32(wd)}
		w.pool.watches[k] = append(w.pool.watches[k], w)
	}
	w.dirs[int32(wd)] = append(w.dirs[int32(wd)], d)
	for _, a := range d.absent {
		if existsAt(int(f.Fd()), filepath.Base(a)) {
			return fmt.Errorf("sandbox: the protected path %s exists now, though it did not when the fence was resolved: %w", a, ErrProtectedAppeared)
		}
	}
	for _, t := range d.pending {
		if next := nextEntry(d.path, t); existsAt(int(f.Fd()), next) {
			return fmt.Errorf("sandbox: %s, on the way to the protected path %s, exists now, though it did not when the fence was resolved: %w", filepath.Join(d.path, next), t, ErrProtectedAppeared)
		}
	}
	return nil
}

// deepestDir returns the deepest directory of t's path that exists (not
// following a symlink), or "/" .
func deepestDir(t string) string {
	a := filepath.Dir(t)
	for a != "/" {
		if fi, err := os.Lstat(a); err == nil && fi.IsDir() {
			break
		}
		a = filepath.Dir(a)
	}
	return a
}

// nextEntry returns the name of the entry of dir on the way to t, a path
// below it.
func nextEntry(dir, t string) string {
	rel, _ := filepath.Rel(dir, t)
	return strings.Split(rel, "/")[0]
}

// checkLinks returns an error wrapping [ErrProtectedAppeared] when a
// link changed since the policy was built; call it once the links'
// directories are watched.
func (w *ProtectWatch) checkLinks() error {
	for _, l := range w.links {
		if !l.Unchanged() {
			return fmt.Errorf("sandbox: the protected symlink %s: %w", l.Path, ErrProtectedAppeared)
		}
	}
	return nil
}

// Tripped is closed once the job has created a protected path, replaced a
// protected link, or moved or removed a directory the watch relies on:
// the caller stops the job then. Nil (never closed) for a nil watch.
func (w *ProtectWatch) Tripped() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.tripped
}

// Stop ends the watch: it waits for an event being handled, removes
// the watch's inotify watches and closes its directories. It returns
// what the watch found and did, one sentence per change for the
// attempt's reason, or "" when it found nothing. Idempotent; "" for a
// nil watch.
func (w *ProtectWatch) Stop() string {
	if w == nil {
		return ""
	}
	w.stopOnce.Do(func() {
		w.active.Lock()
		w.stopped = true
		w.active.Unlock()
		w.pool.unregister(w)
		w.closeDirs()
		if w.own {
			w.pool.Close()
		}
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.found, "; ")
}

// closeDirs closes the watched directories' descriptors.
func (w *ProtectWatch) closeDirs() {
	for _, d := range w.all {
		d.f.Close()
	}
}

// currentLinks returns the protected links as the watch last put them
// back (all of the policy's, unchanged ones included).
func (w *ProtectWatch) currentLinks() []ProtectedLink {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.links)
}

// event handles one event of the watch's instance for the watch
// descriptor wd (inotify(7)).
func (w *ProtectWatch) event(wd int32, mask uint32, name string) {
	w.active.RLock()
	defer w.active.RUnlock()
	if w.stopped {
		return // Stop's own inotify_rm_watch (IN_IGNORED), or later
	}
	switch {
	case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED|unix.IN_UNMOUNT) != 0:
		dirs := w.dirs[wd]
		if len(dirs) == 0 {
			return // already reported (IN_IGNORED follows IN_DELETE_SELF)
		}
		if mask == unix.IN_MOVE_SELF && !slices.ContainsFunc(dirs, func(d *watchedDir) bool { return !d.root }) {
			// A writable root moved from outside the sandbox: the
			// job's mount and this watch follow the directory, and
			// what the job makes there is moved aside through d.f.
			return
		}
		delete(w.dirs, wd)
		for _, d := range dirs {
			w.settleAll(fmt.Sprintf("%s, which holds protected paths, was moved or removed while the job ran, so they could no longer be watched and the job was stopped", d.path), true)
		}
	default:
		for _, d := range w.dirs[wd] {
			w.settleName(d, name, mask)
		}
	}
}

// recover looks at every watched path again after inotify's queue
// overflowed (fs.inotify.max_queued_events): what an event lost would
// have shown is settled as it would have been, and the job is stopped
// only when something is found, not for another job's flood. The
// directories that held the paths are mount points the job cannot move;
// one it made on the way to a path and moved meanwhile stays watched
// where it went.
func (w *ProtectWatch) recover() {
	w.active.RLock()
	defer w.active.RUnlock()
	if w.stopped {
		return
	}
	w.settle()
	var dirs []*watchedDir
	for _, ds := range w.dirs {
		dirs = append(dirs, ds...)
	}
	var st unix.Stat_t
	for _, d := range dirs {
		for _, t := range d.pending {
			if next := nextEntry(d.path, t); lookAt(int(d.f.Fd()), next, &st) == nil {
				w.settlePending(d, next, t)
			}
		}
	}
}

// lost checks every watched path and stops the job: events were lost
// (why says how), so a directory's move among them may have gone
// unseen.
func (w *ProtectWatch) lost(why string) {
	w.active.RLock()
	defer w.active.RUnlock()
	if !w.stopped {
		w.settleAll(why, true)
	}
}

// settleName acts on an event (mask) naming the entry name of d. A
// missing protected path made there (IN_CREATE, IN_MOVED_TO) trips the
// watch before anything else, whether or not it is still there when
// looked at (a job that makes it and takes it away again is stopped as
// well), then what is there is moved aside; a protected link touched in
// any way trips it too, and is put back unless unchanged.
func (w *ProtectWatch) settleName(d *watchedDir, name string, mask uint32) {
	for _, a := range d.absent {
		if filepath.Base(a) == name && mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			w.created(int(d.f.Fd()), a)
		}
	}
	if mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
		for _, t := range d.pending {
			if nextEntry(d.path, t) == name {
				w.settlePending(d, name, t)
			}
		}
	}
	for _, i := range d.links {
		if filepath.Base(w.links[i].Path) != name {
			continue
		}
		w.trip()
		w.mu.Lock()
		s := restoreLinkIn(int(d.f.Fd()), &w.links[i], w.jobID)
		// Said already (the link put back at an earlier event of the
		// same replacement): a second sentence would contradict it.
		said := slices.ContainsFunc(w.found, func(f string) bool { return strings.Contains(f, w.links[i].Path) })
		w.mu.Unlock()
		if s == "" && !said {
			s = fmt.Sprintf("the job moved or replaced the symlink %s (it leads to a protected path), and it was as before when paddock looked", w.links[i].Path)
		}
		w.record(s, true)
	}
}

// settlePending acts on name, an entry made in d on the way to the
// protected path t (protectPending): t itself is moved aside like a
// missing protected path made in place; a directory is watched in turn,
// with what is in it already looked at (the job may have made the rest of
// the way before the watch was added); a symlink (which host tools would
// follow to wherever it leads) trips the watch and is moved aside;
// anything else cannot lead to t and is left alone. Called by the
// watch's reader, under active.
func (w *ProtectWatch) settlePending(d *watchedDir, name, t string) {
	dfd := int(d.f.Fd())
	made := filepath.Join(d.path, name)
	if made == t {
		w.created(dfd, t)
		return
	}
	var st unix.Stat_t
	switch err := lookAt(dfd, name, &st); {
	case errors.Is(err, unix.ENOENT):
		return // gone again: nothing leads to t
	case err != nil:
		w.trip()
		w.record(fmt.Sprintf("%s, on the way to the protected path %s, cannot be looked at (%v), so the job was stopped", made, t, err), true)
		return
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		w.trip()
		w.record(symlinkOnTheWay(dfd, d.path, made, t, w.jobID), true)
		return
	default:
		return // nothing can be below a file
	}
	nd := &watchedDir{path: made, pending: []string{t}}
	err := w.pool.addWatch(w, nd)
	if err == nil {
		// Made before the watch: followed as if its event came now.
		next := nextEntry(made, t)
		if existsAt(int(nd.f.Fd()), next) {
			w.settlePending(nd, next, t)
		}
		return
	}
	w.trip()
	w.record(fmt.Sprintf("%s, on the way to the protected path %s, could not be watched (%v), so the job was stopped", made, t, err), true)
}

// settleAll checks every watched path as [Policy.AfterCommand] does and
// records what it did; why, when not "", is recorded as well, and trips
// the watch when trip is set.
func (w *ProtectWatch) settleAll(why string, trip bool) {
	w.settle()
	w.record(why, trip)
}

// settle puts back every changed link and moves aside every missing
// path made, by path ([restoreLinks], [moveCreatedUnder]), recording
// what it did; something found trips the watch.
func (w *ProtectWatch) settle() {
	w.mu.Lock()
	s := restoreLinks(w.links, w.jobID)
	w.mu.Unlock()
	w.record(s, false)
	w.record(moveCreatedUnder(w.roots, w.absent, w.jobID), false)
}

// created trips the watch for t, a missing protected path made in the
// directory open as dfd, and moves it aside: said even when it is gone
// again (a job that makes it and takes it away is stopped as well).
func (w *ProtectWatch) created(dfd int, t string) {
	w.trip()
	w.moving.Lock()
	msg := moveCreatedIn(dfd, t, w.jobID)
	w.mu.Lock()
	seen := w.moved[t]
	if msg != "" {
		w.moved[t] = true
	}
	w.mu.Unlock()
	w.moving.Unlock()
	switch {
	case msg == "" && seen:
		// The event of what was moved aside already (a directory made
		// on the way is looked into when it is watched, and its events
		// follow).
		return
	case msg == "":
		msg = fmt.Sprintf("the job created the protected path %s, gone again when paddock looked", t)
	}
	w.record(msg, true)
}

// record keeps s for the reason and trips the watch when s is not "" (or
// when trip is set).
func (w *ProtectWatch) record(s string, trip bool) {
	if s != "" {
		w.mu.Lock()
		// A job that keeps making paths until it is killed would make
		// the attempt's reason as long as it liked.
		switch n := len(w.found); {
		case n < maxFound:
			w.found = append(w.found, s)
		case n == maxFound:
			w.found = append(w.found, "and more")
		}
		w.mu.Unlock()
	}
	if s != "" || trip {
		w.trip()
	}
}

// maxFound bounds the sentences a watch keeps for the attempt's reason.
const maxFound = 16

// trip closes Tripped, once: the caller stops the job.
func (w *ProtectWatch) trip() { w.tripOnce.Do(func() { close(w.tripped) }) }

// ProtectWatchers hands out [ProtectWatch]es ([ProtectWatchers.Watch])
// on one inotify instance, made at the first watch and kept: instances
// are few (fs.inotify.max_user_instances, 128 per user by default,
// inotify(7), shared by every process of the user) and closing one waits
// for an SRCU grace period in the kernel (fsnotify_destroy_group: ~8 ms
// on the machine of docs/performance.md), while watches are many
// (max_user_watches). One goroutine reads the instance's events, in the
// netpoller, and hands each to the watches of its watch descriptor. The
// zero value is ready; safe for concurrent use.
type ProtectWatchers struct {
	mu      sync.Mutex
	in      *inotify                  // nil until the first watch, after Close, or after a read error
	watches map[wdKey][]*ProtectWatch // every watch running, by instance and watch descriptor
}

// wdKey is one inotify watch: its instance and watch descriptor.
type wdKey struct {
	in *inotify
	wd int32
}

// register calls add, which adds w's inotify watches, with the
// instance made if there is none and w.in set, holding the lock the
// reader takes to find an event's watches: no event of w's watch
// descriptors can be looked up before they are registered.
func (ws *ProtectWatchers) register(w *ProtectWatch, add func() error) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.in == nil {
		fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if errors.Is(err, unix.EMFILE) {
			return fmt.Errorf("sandbox: watch the protected paths: inotify_init1: %w: the user's inotify instances are used up (fs.inotify.max_user_instances; see docs/troubleshooting.md)", err)
		}
		if err != nil {
			return fmt.Errorf("sandbox: watch the protected paths: inotify_init1: %w", err)
		}
		// Non-blocking: os.NewFile hands it to the netpoller, so the
		// reader waits in no system call. f.Fd() must never be called:
		// it would make the descriptor blocking.
		ws.in = &inotify{f: os.NewFile(uintptr(fd), "inotify"), fd: fd}
		if ws.watches == nil {
			ws.watches = map[wdKey][]*ProtectWatch{}
		}
		go ws.read(ws.in)
	}
	w.in = ws.in
	return add()
}

// addWatch adds a watch for d, a directory the job made on the way to a
// protected path, to w, on w's instance ([ProtectWatch.add] without the
// check that nothing appeared: the caller looks at what is there).
func (ws *ProtectWatchers) addWatch(w *ProtectWatch, d *watchedDir) error {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.in != w.in {
		return errors.New("the watch's inotify instance is gone")
	}
	pending := d.pending
	d.pending = nil
	err := w.add(d)
	d.pending = pending
	return err
}

// unregister removes w from the watches of its watch descriptors, and
// each inotify watch no other watch uses from its instance while that is
// open.
func (ws *ProtectWatchers) unregister(w *ProtectWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, wd := range w.wds {
		k := wdKey{w.in, wd}
		rest := slices.DeleteFunc(ws.watches[k], func(o *ProtectWatch) bool { return o == w })
		if len(rest) > 0 {
			ws.watches[k] = rest
			continue
		}
		delete(ws.watches, k)
		if ws.in == w.in {
			_, _ = unix.InotifyRmWatch(w.in.fd, uint32(wd)) // EINVAL: removed already (IN_IGNORED)
		}
	}
}

// read hands in's events to their watches until in fails or is
// closed; then every watch still on it is told its events are lost
// ([ProtectWatch.lost]: it stops its job), in is closed, and the next
// watch makes a new instance.
func (ws *ProtectWatchers) read(in *inotify) {
	// Room for many events with the longest names (inotify(7)).
	buf := make([]byte, 16*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := in.f.Read(buf)
		if err != nil {
			ws.mu.Lock()
			if ws.in == in {
				ws.in = nil
			}
			ws.mu.Unlock()
			ws.lostAll(in, fmt.Sprintf("watching the protected paths failed (%v), so the job was stopped", err))
			in.f.Close()
			return
		}
		ws.handle(in, buf[:n])
	}
}

// handle hands one read's events (inotify(7): struct inotify_event,
// followed by a NUL-padded name of len bytes) to their watches.
func (ws *ProtectWatchers) handle(in *inotify, b []byte) {
	for len(b) >= unix.SizeofInotifyEvent {
		wd := int32(binary.NativeEndian.Uint32(b[0:4]))
		mask := binary.NativeEndian.Uint32(b[4:8])
		nameLen := int(binary.NativeEndian.Uint32(b[12:16]))
		end := unix.SizeofInotifyEvent + nameLen
		if end > len(b) {
			return
		}
		name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:end]), "\x00")
		b = b[end:]
		if mask&unix.IN_Q_OVERFLOW != 0 {
			// Events were lost (some job made them faster than they
			// were read): every watch looks at all its paths again.
			for _, w := range ws.watchesOn(in) {
				w.recover()
			}
			continue
		}
		ws.mu.Lock()
		targets := slices.Clone(ws.watches[wdKey{in, wd}])
		ws.mu.Unlock()
		for _, w := range targets {
			w.event(wd, mask, name)
		}
	}
}

// lostAll tells every watch on in that it can watch no more
// ([ProtectWatch.lost]).
func (ws *ProtectWatchers) lostAll(in *inotify, why string) {
	for _, w := range ws.watchesOn(in) {
		w.lost(why)
	}
}

// watchesOn returns the watches on in, each once.
func (ws *ProtectWatchers) watchesOn(in *inotify) []*ProtectWatch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	seen := map[*ProtectWatch]bool{}
	var out []*ProtectWatch
	for k, list := range ws.watches {
		for _, w := range list {
			if k.in == in && !seen[w] {
				seen[w] = true
				out = append(out, w)
			}
		}
	}
	return out
}

// Close closes the instance: a watch still running on it is told its
// events are lost, which stops its job. The next watch makes a new
// instance. Safe on a nil ws.
func (ws *ProtectWatchers) Close() {
	if ws == nil {
		return
	}
	ws.mu.Lock()
	in := ws.in
	ws.in = nil
	ws.mu.Unlock()
	if in != nil {
		// The reader's Read fails (os.ErrClosed), and it tells the
		// watches left.
		in.f.Close()
	}
}

// inotify is one inotify instance: f for reads in the netpoller, fd for
// inotify_add_watch(2) and inotify_rm_watch(2).
type inotify struct {
	f  *os.File
	fd int
}

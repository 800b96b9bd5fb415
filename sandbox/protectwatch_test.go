package sandbox

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// watchSetup returns a canonical workspace holding a repository whose
// .git is a symlink to meta/repo.git, and a policy protecting .bashrc,
// .gitmodules (both missing), sub/.envrc (missing, in a directory below
// the root) and .git/hooks/ through the link.
// watchStarted is watchSetup with a watch of its own, for job id,
// already in place.
func watchStarted(t *testing.T, id string) (string, Policy, *ProtectWatch) {
	t.Helper()
	ws, p := watchSetup(t)
	w, err := (*ProtectWatchers)(nil).Watch(p, id)
	require.NoError(t, err)
	return ws, p, w
}

func watchSetup(t *testing.T) (string, Policy) {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "meta", "repo.git", "hooks"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(ws, "sub"), 0o755))
	require.NoError(t, os.Symlink("meta/repo.git", filepath.Join(ws, ".git")))
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws,
		Protect: []string{".bashrc", ".gitmodules", "sub/.envrc", ".git/hooks/"}})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{filepath.Join(ws, ".bashrc"), filepath.Join(ws, ".gitmodules"), filepath.Join(ws, "sub", ".envrc")}, p.protectPathsOf(protectAbsent))
	require.Len(t, p.protectedLinks(), 1)
	return ws, p
}

// TestWatchProtected: with real inotify, a missing protected path made
// while the watch runs (created in place, or made under another name and
// renamed into place) is moved aside and the watch trips; a protected
// symlink replaced by a directory is put back, once: the check after the
// command finds the restored link unchanged. Other entries of the
// watched directories are left alone.
func TestWatchProtected(t *testing.T) {
	t.Parallel()
	t.Run("create", func(t *testing.T) {
		t.Parallel()
		ws, p, w := watchStarted(t, "J1")
		require.NotNil(t, w)
		require.NoError(t, os.WriteFile(filepath.Join(ws, "other.txt"), []byte("x"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(ws, ".bashrc"), nil, 0o644))
		<-w.Tripped()
		msg := p.AfterCommand("J1", w)
		require.Contains(t, msg, "the job created the protected path "+filepath.Join(ws, ".bashrc")+"; it is now "+filepath.Join(ws, ".bashrc.paddock-created-J1"))
		require.NoFileExists(t, filepath.Join(ws, ".bashrc"))
		require.FileExists(t, filepath.Join(ws, ".bashrc.paddock-created-J1"))
		require.FileExists(t, filepath.Join(ws, "other.txt"), "another entry is left alone")
		require.NotContains(t, msg, "other.txt")
	})
	t.Run("created and removed", func(t *testing.T) {
		t.Parallel()
		ws, p, w := watchStarted(t, "J10")
		rc := filepath.Join(ws, ".bashrc")
		require.NoError(t, os.WriteFile(filepath.Join(ws, "evil"), nil, 0o644))
		require.NoError(t, os.Rename(filepath.Join(ws, "evil"), rc))
		// Taken back at once; the watch may have moved it aside first.
		_ = os.Rename(rc, filepath.Join(ws, "evil"))
		<-w.Tripped()
		msg := p.AfterCommand("J10", w)
		require.Contains(t, msg, "the job created the protected path "+rc)
	})
	t.Run("gone when looked at", func(t *testing.T) {
		t.Parallel()
		ws, p, w := watchStarted(t, "J12")
		// The event of a creation whose file is gone again by the time
		// the watch looks (made and removed in between): as the kernel
		// would report it.
		var rootWD int32 = -1
		for wd, dirs := range w.dirs {
			if slices.ContainsFunc(dirs, func(d *watchedDir) bool { return d.path == ws }) {
				rootWD = wd
			}
		}
		require.NotEqual(t, int32(-1), rootWD, "the workspace is watched")
		w.event(rootWD, unix.IN_CREATE, ".bashrc")
		<-w.Tripped()
		require.Contains(t, p.AfterCommand("J12", w), "the job created the protected path "+filepath.Join(ws, ".bashrc")+", gone again when paddock looked")
	})
	t.Run("event after the move", func(t *testing.T) {
		t.Parallel()
		ws, p, w := watchStarted(t, "J15")
		rc := filepath.Join(ws, ".bashrc")
		require.NoError(t, os.WriteFile(rc, nil, 0o644))
		<-w.Tripped()
		// A second event for the path moved aside already (as when a
		// directory made on the way was looked into before its own
		// events came): no second, contradicting sentence.
		dir, err := OpenNoSymlinks(ws)
		require.NoError(t, err)
		defer dir.Close()
		w.active.RLock()
		w.created(int(dir.Fd()), rc)
		w.active.RUnlock()
		msg := p.AfterCommand("J15", w)
		require.Contains(t, msg, "the job created the protected path "+rc+"; it is now")
		require.NotContains(t, msg, "gone again")
	})
	t.Run("aside name taken", func(t *testing.T) {
		t.Parallel()
		ws, p := watchSetup(t)
		// The job knows its id: it may have made the aside name, and
		// numbered ones, in advance.
		taken := filepath.Join(ws, ".bashrc.paddock-created-J11")
		for _, n := range []string{taken, taken + ".2", taken + ".3"} {
			require.NoError(t, os.WriteFile(n, []byte("decoy"), 0o644))
		}
		w, err := (*ProtectWatchers)(nil).Watch(p, "J11")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(ws, ".bashrc"), []byte("evil"), 0o644))
		<-w.Tripped()
		msg := p.AfterCommand("J11", w)
		require.NoFileExists(t, filepath.Join(ws, ".bashrc"))
		aside, err := filepath.Glob(taken + ".????????????????")
		require.NoError(t, err)
		require.Len(t, aside, 1, msg)
		require.Contains(t, msg, "it is now "+aside[0])
		data, err := os.ReadFile(aside[0])
		require.NoError(t, err)
		require.Equal(t, "evil", string(data))
		data, err = os.ReadFile(taken)
		require.NoError(t, err)
		require.Equal(t, "decoy", string(data), "the job's decoy is left alone")
	})
	t.Run("one instance", func(t *testing.T) {
		t.Parallel()
		ws1, p1 := watchSetup(t)
		ws2, p2 := watchSetup(t)
		var pool ProtectWatchers
		defer pool.Close()
		w1, err := pool.Watch(p1, "J5")
		require.NoError(t, err)
		w2, err := pool.Watch(p2, "J6")
		require.NoError(t, err)
		require.Same(t, w1.in, w2.in, "the watches share the pool's instance")

		// One job's change trips its own watch only.
		require.NoError(t, os.WriteFile(filepath.Join(ws1, ".bashrc"), nil, 0o644))
		<-w1.Tripped()
		require.Contains(t, p1.AfterCommand("J5", w1), ".bashrc")
		select {
		case <-w2.Tripped():
			t.Fatal("another job's change tripped this watch")
		default:
		}

		// A watch made after one stopped gets the same instance; the
		// stopped one's events do not reach it, its own do.
		w3, err := pool.Watch(p1, "J7")
		require.NoError(t, err)
		require.Same(t, w2.in, w3.in)
		require.NoError(t, os.WriteFile(filepath.Join(ws2, ".gitmodules"), nil, 0o644))
		<-w2.Tripped()
		require.Contains(t, p2.AfterCommand("J6", w2), "created the protected path "+filepath.Join(ws2, ".gitmodules"))
		require.NoError(t, os.WriteFile(filepath.Join(ws1, ".gitmodules"), nil, 0o644))
		<-w3.Tripped()
		msg := p1.AfterCommand("J7", w3)
		require.Contains(t, msg, "created the protected path "+filepath.Join(ws1, ".gitmodules"))
		require.NotContains(t, msg, ".bashrc")
		require.FileExists(t, filepath.Join(ws1, ".gitmodules.paddock-created-J7"))
	})
	t.Run("overflow", func(t *testing.T) {
		t.Parallel()
		ws1, p1 := watchSetup(t)
		_, p2 := watchSetup(t)
		var pool ProtectWatchers
		defer pool.Close()
		w1, err := pool.Watch(p1, "J13")
		require.NoError(t, err)
		w2, err := pool.Watch(p2, "J14")
		require.NoError(t, err)
		// The kernel's overflow event (wd -1, IN_Q_OVERFLOW), as one
		// job's flood would cause it: each watch looks again, and only
		// one that finds something stops its job.
		ev := make([]byte, unix.SizeofInotifyEvent)
		binary.NativeEndian.PutUint32(ev[0:4], 0xffffffff)
		binary.NativeEndian.PutUint32(ev[4:8], unix.IN_Q_OVERFLOW)
		pool.handle(w1.in, ev)
		select {
		case <-w1.Tripped():
			t.Fatal("an overflow with nothing made tripped a watch")
		case <-w2.Tripped():
			t.Fatal("an overflow with nothing made tripped a watch")
		default:
		}
		require.Empty(t, p2.AfterCommand("J14", w2))
		// The watch still works after it.
		require.NoError(t, os.WriteFile(filepath.Join(ws1, ".bashrc"), nil, 0o644))
		<-w1.Tripped()
		require.Contains(t, p1.AfterCommand("J13", w1), "the job created the protected path "+filepath.Join(ws1, ".bashrc"))
	})
	t.Run("closed instance", func(t *testing.T) {
		t.Parallel()
		_, p := watchSetup(t)
		var pool ProtectWatchers
		w, err := pool.Watch(p, "J9")
		require.NoError(t, err)
		// Nothing can be watched once the instance is gone: the job is
		// stopped, never left running unwatched.
		pool.Close()
		<-w.Tripped()
		require.Contains(t, p.AfterCommand("J9", w), "watching the protected paths failed")
	})
	t.Run("rename into place", func(t *testing.T) {
		t.Parallel()
		ws, p, w := watchStarted(t, "J2")
		tmp := filepath.Join(ws, "sub", "x.tmp")
		require.NoError(t, os.WriteFile(tmp, []byte("evil\n"), 0o644))
		require.NoError(t, os.Rename(tmp, filepath.Join(ws, "sub", ".envrc")))
		<-w.Tripped()
		msg := p.AfterCommand("J2", w)
		require.Contains(t, msg, "created the protected path "+filepath.Join(ws, "sub", ".envrc"))
		require.NoFileExists(t, filepath.Join(ws, "sub", ".envrc"))
		data, err := os.ReadFile(filepath.Join(ws, "sub", ".envrc.paddock-created-J2"))
		require.NoError(t, err)
		require.Equal(t, "evil\n", string(data))
	})
	t.Run("link replaced", func(t *testing.T) {
		t.Parallel()
		ws, p, w := watchStarted(t, "J3")
		dotgit := filepath.Join(ws, ".git")
		require.NoError(t, os.Rename(dotgit, filepath.Join(ws, "old.git")))
		// The watch may have put the link back already: then the job's
		// mkdir fails, as it would in a job.
		_ = os.MkdirAll(filepath.Join(dotgit, "hooks"), 0o755)
		<-w.Tripped()
		msg := p.AfterCommand("J3", w)
		require.Contains(t, msg, "the job replaced the symlink "+dotgit)
		target, err := os.Readlink(dotgit)
		require.NoError(t, err, msg)
		require.Equal(t, "meta/repo.git", target)
		// The link put back is the watch's own: the check after the
		// command does not put it back a second time.
		again, err := filepath.Glob(filepath.Join(ws, ".git.paddock-replaced-J3.*"))
		require.NoError(t, err)
		require.Empty(t, again, msg)
	})
	t.Run("directory moved", func(t *testing.T) {
		t.Parallel()
		ws, p, w := watchStarted(t, "J4")
		require.NoError(t, os.Rename(filepath.Join(ws, "sub"), filepath.Join(ws, "sub.old")))
		require.NoError(t, os.MkdirAll(filepath.Join(ws, "sub"), 0o755))
		<-w.Tripped()
		msg := p.AfterCommand("J4", w)
		require.Contains(t, msg, filepath.Join(ws, "sub")+", which holds protected paths, was moved or removed while the job ran")
	})
	t.Run("root moved from outside", func(t *testing.T) {
		t.Parallel()
		ws, p, w := watchStarted(t, "J7")
		// The job's mount follows its root wherever the host moves it;
		// so does the watch, which moves aside what the job creates
		// there through the directory it opened.
		moved := ws + ".moved"
		require.NoError(t, os.Rename(ws, moved))
		t.Cleanup(func() { os.RemoveAll(moved) })
		require.NoError(t, os.WriteFile(filepath.Join(moved, ".zshrc"), nil, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(moved, ".bashrc"), nil, 0o644))
		<-w.Tripped()
		msg := p.AfterCommand("J7", w)
		require.NotContains(t, msg, "was moved or removed", "the root's move stops nothing")
		require.Contains(t, msg, "the job created the protected path "+filepath.Join(ws, ".bashrc"))
		require.NoFileExists(t, filepath.Join(moved, ".bashrc"))
		require.FileExists(t, filepath.Join(moved, ".bashrc.paddock-created-J7"))
		require.FileExists(t, filepath.Join(moved, ".zshrc"), "not protected in this policy")
	})
	t.Run("link removed and a directory made", func(t *testing.T) {
		t.Parallel()
		ws, p, w := watchStarted(t, "J9")
		require.NoError(t, os.Remove(filepath.Join(ws, ".git")))
		_ = os.Mkdir(filepath.Join(ws, ".git"), 0o755) // refused once the link is back
		<-w.Tripped()
		time.Sleep(200 * time.Millisecond) // the mkdir's event, if any, read too
		msg := p.AfterCommand("J9", w)
		require.Contains(t, msg, "the job replaced the symlink "+filepath.Join(ws, ".git"))
		require.NotContains(t, msg, "as before when paddock looked", "one sentence for one replacement: %s", msg)
	})
	t.Run("root moved, link replaced", func(t *testing.T) {
		t.Parallel()
		ws, p, w := watchStarted(t, "J8")
		moved := ws + ".moved"
		require.NoError(t, os.Rename(ws, moved))
		t.Cleanup(func() { os.RemoveAll(moved) })
		require.NoError(t, os.Rename(filepath.Join(moved, ".git"), filepath.Join(moved, "old.git")))
		<-w.Tripped()
		msg := p.AfterCommand("J8", w)
		require.Contains(t, msg, "the job replaced the symlink "+filepath.Join(ws, ".git"))
		target, err := os.Readlink(filepath.Join(moved, ".git"))
		require.NoError(t, err, "put back where the job's root is: %s", msg)
		require.Equal(t, "meta/repo.git", target)
	})
}

// TestWatchProtectedRefuses: a policy with nothing to watch gets no
// watch; a missing path that exists by the time the watch is in place
// (made by someone else than the job, which has not started) refuses the
// watch and is left where it is; a directory swapped for a symlink
// before the watch is refused, never watched where it leads.
func TestWatchProtectedRefuses(t *testing.T) {
	t.Parallel()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".bashrc"), nil, 0o644))
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{".bashrc"}})
	require.NoError(t, err)
	w, err := (*ProtectWatchers)(nil).Watch(p, "J")
	require.NoError(t, err)
	require.Nil(t, w, "an existing file is mounted: nothing to watch")
	require.Nil(t, w.Tripped())
	require.Equal(t, "", w.Stop())

	ws, p = watchSetup(t)
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".gitmodules"), []byte("mine"), 0o644))
	_, err = (*ProtectWatchers)(nil).Watch(p, "J")
	require.ErrorIs(t, err, ErrProtectedAppeared)
	data, err := os.ReadFile(filepath.Join(ws, ".gitmodules"))
	require.NoError(t, err)
	require.Equal(t, "mine", string(data), "left where it is")

	ws, p = watchSetup(t)
	elsewhere := t.TempDir()
	require.NoError(t, os.Rename(filepath.Join(ws, "sub"), filepath.Join(ws, "sub.old")))
	require.NoError(t, os.Symlink(elsewhere, filepath.Join(ws, "sub")))
	_, err = (*ProtectWatchers)(nil).Watch(p, "J")
	require.ErrorIs(t, err, ErrRootChanged)
}

// benchProtect is the shell start-up files and git paths of the default
// protect list, as BenchmarkNewPolicyProtect uses them: in an empty
// workspace, the nine files are missing and watched.
var benchProtect = []string{".git/hooks/", ".git/config", ".gitmodules", ".bashrc", ".bash_profile", ".bash_login", ".profile", ".zshrc", ".zshenv", ".zprofile", ".envrc"}

// BenchmarkWatchProtected: what the watch adds to a job whose workspace
// lacks every file of benchProtect: ProtectWatchers.Watch (inotify instance,
// one watch, the check that nothing appeared) and Stop, beside building
// the policy itself ("policy", which the job pays anyway).
func BenchmarkWatchProtected(b *testing.B) {
	ws, err := filepath.EvalSymlinks(b.TempDir())
	require.NoError(b, err)
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: benchProtect})
	require.NoError(b, err)
	require.Len(b, p.protectPathsOf(protectAbsent), 9)
	b.Run("policy", func(b *testing.B) {
		for b.Loop() {
			if _, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: benchProtect}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("watch", func(b *testing.B) {
		var pool ProtectWatchers
		defer pool.Close()
		for b.Loop() {
			w, err := pool.Watch(p, "J")
			if err != nil {
				b.Fatal(err)
			}
			w.Stop()
		}
	})
}

// BenchmarkWatchProtectedReaction: how long a created protected file
// exists under its name: from just before the creating open(2) until the
// watch has moved it aside and tripped, with the watch's reader waiting
// in the netpoller (as it is by the time a job's first process runs,
// milliseconds after the watch started). Reported as the median
// (median-ns) of every creation, besides ns/op (which includes setting
// up and stopping a watch for each).
func BenchmarkWatchProtectedReaction(b *testing.B) {
	ws, err := filepath.EvalSymlinks(b.TempDir())
	require.NoError(b, err)
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: benchProtect})
	require.NoError(b, err)
	rc := filepath.Join(ws, ".bashrc")
	var took []time.Duration
	var pool ProtectWatchers
	defer pool.Close()
	for b.Loop() {
		w, err := pool.Watch(p, "J")
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(time.Millisecond) // the reader waits, as by the time a job runs
		start := time.Now()
		f, err := os.Create(rc)
		if err != nil {
			b.Fatal(err)
		}
		<-w.Tripped()
		took = append(took, time.Since(start))
		f.Close()
		w.Stop()
		if err := os.Remove(rc + ".paddock-created-J"); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "median-ns")
	b.ReportMetric(float64(took[len(took)*9/10].Nanoseconds()), "p90-ns")
}

// TestWatchProtectedPending: a protected path whose parent is missing too
// (.config/git/ in a home directory without .config) is watched through
// the directories the job makes on the way: made step by step, at once,
// or through a symlink, the job is stopped and what it made moved aside;
// other entries of those directories are left alone. Below a missing
// .git nothing is watched: a repository the job makes is its own.
func TestWatchProtectedPending(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (string, Policy) {
		ws, err := filepath.EvalSymlinks(t.TempDir())
		require.NoError(t, err)
		p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{".config/git/", ".git/hooks/"}})
		require.NoError(t, err)
		require.Equal(t, []string{filepath.Join(ws, ".config", "git")}, p.protectPathsOf(protectPending))
		return ws, p
	}
	t.Run("step by step", func(t *testing.T) {
		t.Parallel()
		ws, p := setup(t)
		w, err := (*ProtectWatchers)(nil).Watch(p, "P1")
		require.NoError(t, err)
		cfg := filepath.Join(ws, ".config")
		require.NoError(t, os.Mkdir(cfg, 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(cfg, "fish"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(cfg, "fish", "x"), nil, 0o644))
		require.NoError(t, os.Mkdir(filepath.Join(cfg, "git"), 0o755))
		_ = os.WriteFile(filepath.Join(cfg, "git", "config"), []byte("[core]\n\tfsmonitor = evil\n"), 0o644)
		<-w.Tripped()
		msg := p.AfterCommand("P1", w)
		require.Contains(t, msg, "the job created the protected path "+filepath.Join(cfg, "git"))
		require.NoDirExists(t, filepath.Join(cfg, "git"))
		require.DirExists(t, filepath.Join(cfg, "git.paddock-created-P1"))
		require.FileExists(t, filepath.Join(cfg, "fish", "x"), "another entry is left alone")
	})
	t.Run("at once", func(t *testing.T) {
		t.Parallel()
		ws, p := setup(t)
		w, err := (*ProtectWatchers)(nil).Watch(p, "P2")
		require.NoError(t, err)
		// The watch may move .config/git aside before deeper is made.
		_ = os.MkdirAll(filepath.Join(ws, ".config", "git", "deeper"), 0o755)
		<-w.Tripped()
		msg := p.AfterCommand("P2", w)
		require.Contains(t, msg, "the job created the protected path "+filepath.Join(ws, ".config", "git"))
		// Moved aside when .config was first looked into, its own
		// event after: never also "gone again".
		require.NotContains(t, msg, "gone again")
		require.NoDirExists(t, filepath.Join(ws, ".config", "git"))
	})
	t.Run("symlink as the job ends", func(t *testing.T) {
		t.Parallel()
		ws, p := setup(t)
		require.NoError(t, os.MkdirAll(filepath.Join(ws, "cfg", "git"), 0o755))
		w, err := (*ProtectWatchers)(nil).Watch(p, "P4")
		require.NoError(t, err)
		// Made just before the job's end: whether the watch or the
		// check after the command sees it, it does not stay.
		require.NoError(t, os.Symlink("cfg", filepath.Join(ws, ".config")))
		msg := p.AfterCommand("P4", w)
		require.Contains(t, msg, "the job made "+filepath.Join(ws, ".config")+", on the way to the protected path "+filepath.Join(ws, ".config", "git")+", a symlink")
		_, err = os.Lstat(filepath.Join(ws, ".config"))
		require.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("symlink on the way", func(t *testing.T) {
		t.Parallel()
		ws, p := setup(t)
		elsewhere := filepath.Join(ws, "elsewhere")
		require.NoError(t, os.MkdirAll(filepath.Join(elsewhere, "git"), 0o755))
		w, err := (*ProtectWatchers)(nil).Watch(p, "P3")
		require.NoError(t, err)
		require.NoError(t, os.Symlink("elsewhere", filepath.Join(ws, ".config")))
		<-w.Tripped()
		msg := p.AfterCommand("P3", w)
		require.Contains(t, msg, "the job made "+filepath.Join(ws, ".config")+", on the way to the protected path "+filepath.Join(ws, ".config", "git")+", a symlink")
		_, err = os.Lstat(filepath.Join(ws, ".config"))
		require.ErrorIs(t, err, os.ErrNotExist, "the link is moved aside")
	})
}

package inbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/inbox"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/sqlite"
	"paddock/queue/storetest"
)

func TestInbox(t *testing.T) {
	t.Parallel()
	type testBundle struct {
		ctx   context.Context
		dir   string
		st    *sqlite.Store
		in    *inbox.Inbox
		clock *storetest.Clock
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{ctx: context.Background(), dir: t.TempDir(), clock: storetest.NewClock(storetest.T0)}
		st, err := sqlite.Open(b.ctx, filepath.Join(b.dir, "queue.db"), sqlite.Options{Clock: b.clock.Now})
		require.NoError(t, err)
		t.Cleanup(func() { st.Close() })
		b.st = st
		b.in, err = inbox.New(inbox.Options{Dir: filepath.Join(b.dir, "inbox"), Store: st, Settle: 2 * time.Second, Clock: b.clock.Now})
		require.NoError(t, err)
		return b
	}
	write := func(t *testing.T, path, s string) {
		t.Helper()
		require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
	}

	t.Run("AcceptRejectIgnore", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		inbox := b.in.Dir()
		good := "[[job]]\nname = \"a\"\ncommand = \"true\"\ncwd = \"sub\"\n[[job]]\nname = \"b\"\ncommand = \"true\"\n"
		write(t, filepath.Join(inbox, "good.toml"), good)
		write(t, filepath.Join(inbox, "bad.toml"), "[[job]]\nname = \"ok\"\ncommand = \"true\"\n[[job]]\ncommand = \"\"\ntimout = \"1s\"\n")
		write(t, filepath.Join(inbox, ".hidden.toml.tmp"), "half")
		write(t, filepath.Join(inbox, ".dot.toml"), "half")
		write(t, filepath.Join(inbox, "notes.txt"), "x")

		res, err := b.in.Scan(b.ctx)
		require.NoError(t, err)
		require.Empty(t, res, "nothing settled yet")
		b.clock.Advance(2 * time.Second)
		res, err = b.in.Scan(b.ctx)
		require.NoError(t, err)
		require.Len(t, res, 2)

		require.Equal(t, "bad.toml", res[0].File)
		require.ErrorIs(t, res[0].Err, jobspec.ErrInvalid)
		require.Equal(t, filepath.Join(inbox, "rejected", "bad.toml"), res[0].Path)
		msg, err := os.ReadFile(res[0].Path + ".error")
		require.NoError(t, err)
		require.Contains(t, string(msg), "bad.toml:5: job 2: command: empty command")
		require.Contains(t, string(msg), `timout: unknown key (did you mean "timeout"?)`)
		_, err = b.st.JobGet(b.ctx, "ok")
		require.ErrorIs(t, err, queue.ErrNotFound, "a bad file enqueues nothing")

		require.Equal(t, "good.toml", res[1].File)
		require.NoError(t, res[1].Err)
		require.Len(t, res[1].Jobs, 2)
		acc := filepath.Join(inbox, "accepted", "good.toml")
		require.Equal(t, acc, res[1].Path)
		j, err := b.st.JobGet(b.ctx, "a")
		require.NoError(t, err)
		src, err := b.st.JobSourceGet(b.ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, good, src)
		require.Equal(t, acc, j.SourcePath)
		require.Equal(t, filepath.Join(inbox, "sub"), j.Spec.Cwd)

		for _, n := range []string{".hidden.toml.tmp", ".dot.toml", "notes.txt"} {
			require.FileExists(t, filepath.Join(inbox, n))
		}
		// The same name again gets a suffix; a name held by a queued job is refused.
		write(t, filepath.Join(inbox, "good.toml"), good)
		b.clock.Advance(2 * time.Second)
		res, err = b.in.Scan(b.ctx)
		require.NoError(t, err)
		require.Empty(t, res, "first sight of the new file starts its settle period")
		b.clock.Advance(2 * time.Second)
		res, err = b.in.Scan(b.ctx)
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.ErrorIs(t, res[0].Err, queue.ErrNameInUse)
		require.Equal(t, filepath.Join(inbox, "rejected", "good-2.toml"), res[0].Path, "names stay unique across accepted/ and rejected/")
	})

	// A .toml entry that is not a regular file is rejected at first sight,
	// moved unread: a FIFO is not opened (the scan would block), a symlink
	// is not followed, a directory is not entered.
	t.Run("NotRegularRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		inbox := b.in.Dir()
		outside := filepath.Join(b.dir, "secret.toml") // a valid job file outside the inbox
		write(t, outside, "name = \"leaked\"\ncommand = \"true\"\n")
		require.NoError(t, os.Symlink(outside, filepath.Join(inbox, "link.toml")))
		require.NoError(t, syscall.Mkfifo(filepath.Join(inbox, "pipe.toml"), 0o644))
		require.NoError(t, os.Mkdir(filepath.Join(inbox, "dir.toml"), 0o755))
		write(t, filepath.Join(inbox, "dir.toml", "inner.toml"), "name = \"inner\"\ncommand = \"true\"\n")
		write(t, filepath.Join(inbox, "good.toml"), "name = \"good\"\ncommand = \"true\"\n")

		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second) // a FIFO opened would block
		defer cancel()
		res, err := b.in.Scan(ctx)
		require.NoError(t, err)
		require.Len(t, res, 3, "the odd entries at first sight; good.toml waits to settle")
		want := map[string]string{"dir.toml": "is a directory", "link.toml": "is a symbolic link", "pipe.toml": "is a named pipe (FIFO)"}
		for _, r := range res {
			kind, ok := want[r.File]
			require.True(t, ok, r.File)
			require.Error(t, r.Err)
			require.Nil(t, r.Jobs)
			require.Equal(t, filepath.Join(inbox, "rejected", r.File), r.Path)
			msg, err := os.ReadFile(r.Path + ".error")
			require.NoError(t, err)
			require.Equal(t, "inbox: "+r.File+" "+kind+"; the inbox reads only regular files, and moves anything else here unread\n", string(msg))
			_, err = os.Lstat(filepath.Join(inbox, r.File))
			require.ErrorIs(t, err, os.ErrNotExist, "moved out of the inbox")
		}
		fi, err := os.Lstat(filepath.Join(inbox, "rejected", "link.toml"))
		require.NoError(t, err)
		require.NotZero(t, fi.Mode()&os.ModeSymlink, "the link itself moved")
		fi, err = os.Lstat(filepath.Join(inbox, "rejected", "pipe.toml"))
		require.NoError(t, err)
		require.NotZero(t, fi.Mode()&os.ModeNamedPipe)
		require.FileExists(t, filepath.Join(inbox, "rejected", "dir.toml", "inner.toml"))
		require.FileExists(t, outside, "the link's target is untouched")

		b.clock.Advance(2 * time.Second)
		res, err = b.in.Scan(ctx)
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.Equal(t, "good.toml", res[0].File)
		require.NoError(t, res[0].Err)
		require.Len(t, res[0].Jobs, 1)
		c, err := b.st.JobCounts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, c[queue.StateQueued], "only the regular file was enqueued")
		for _, n := range []string{"leaked", "inner"} {
			_, err = b.st.JobGet(b.ctx, n)
			require.ErrorIs(t, err, queue.ErrNotFound, n)
		}
	})

	t.Run("GrowingFileWaits", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := filepath.Join(b.in.Dir(), "slow.toml")
		write(t, p, "command = ")
		_, err := b.in.Scan(b.ctx)
		require.NoError(t, err)
		b.clock.Advance(1500 * time.Millisecond)
		write(t, p, "command = \"echo still writing\"\n")
		res, err := b.in.Scan(b.ctx)
		require.NoError(t, err)
		require.Empty(t, res)
		b.clock.Advance(1500 * time.Millisecond)
		res, err = b.in.Scan(b.ctx)
		require.NoError(t, err)
		require.Empty(t, res, "changed 1.5s ago: not settled")
		b.clock.Advance(time.Second)
		res, err = b.in.Scan(b.ctx)
		require.NoError(t, err)
		require.Len(t, res, 1)
		require.NoError(t, res[0].Err)
	})

	// A file nested past the decoder's depth (which would overflow its
	// stack: fatal) is rejected like any bad file, whether dropped or
	// left in processing/ by a crash; the scan goes on with the others.
	t.Run("DeepNesting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		inbox := b.in.Dir()
		deep := "command = \"true\"\nx = " + strings.Repeat("[", 5_000_000) + "\n"
		write(t, filepath.Join(inbox, "deep.toml"), deep)
		write(t, filepath.Join(inbox, ".processing", "left.toml"), deep)
		write(t, filepath.Join(inbox, "ok.toml"), "name = \"ok\"\ncommand = \"true\"\n")
		res, err := b.in.Scan(b.ctx) // recovery first; the drops settle
		require.NoError(t, err)
		b.clock.Advance(2 * time.Second)
		more, err := b.in.Scan(b.ctx)
		require.NoError(t, err)
		res = append(res, more...)
		require.Len(t, res, 3)
		rejected := 0
		for _, r := range res {
			if r.File == "ok.toml" {
				require.NoError(t, r.Err)
				continue
			}
			rejected++
			require.ErrorIs(t, r.Err, jobspec.ErrInvalid, r.File)
			require.Equal(t, filepath.Join(inbox, "rejected", r.File), r.Path)
			require.FileExists(t, r.Path)
			msg, err := os.ReadFile(r.Path + ".error")
			require.NoError(t, err)
			require.Contains(t, string(msg), r.File+":2: x: nesting deeper than 256 levels")
		}
		require.Equal(t, 2, rejected)
		require.NoFileExists(t, filepath.Join(inbox, ".processing", "left.toml"))
	})

	// A file whose recovery stopped the process too (its mark left) is
	// moved aside unread, so that no file stops every worker at every
	// start; a mark whose file is gone is dropped.
	t.Run("CrashDuringRecovery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		inbox := b.in.Dir()
		proc := filepath.Join(inbox, ".processing")
		write(t, filepath.Join(proc, "w.toml"), "name = \"w\"\ncommand = \"true\"\n")
		write(t, filepath.Join(proc, ".recovering-w.toml"), "")
		write(t, filepath.Join(proc, ".recovering-gone.toml"), "")
		write(t, filepath.Join(proc, "v.toml"), "name = \"v\"\ncommand = \"true\"\n")
		res, err := b.in.Scan(b.ctx)
		require.NoError(t, err)
		require.Len(t, res, 2)
		errs := map[string]error{}
		for _, r := range res {
			errs[r.File] = r.Err
		}
		require.Contains(t, errs, "v.toml")
		require.NoError(t, errs["v.toml"])
		require.ErrorContains(t, errs["w.toml"], "w.toml: a worker stopped while reading it, twice")
		require.FileExists(t, filepath.Join(inbox, "rejected", "w.toml.error"))
		entries, err := os.ReadDir(proc)
		require.NoError(t, err)
		require.Empty(t, entries, "no file and no mark left")
		c, err := b.st.JobCounts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, c[queue.StateQueued], "only v was enqueued")
	})

	t.Run("CrashRecovery", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		inbox := b.in.Dir()
		// A crash after enqueue, before the final move.
		src := "name = \"done\"\ncommand = \"true\"\n"
		specs, err := jobspec.Parse("x.toml", []byte(src), inbox)
		require.NoError(t, err)
		_, err = b.st.JobEnqueue(b.ctx, &queue.JobEnqueueParams{Specs: specs, Source: src, SourcePath: filepath.Join(inbox, "accepted", "x.toml")})
		require.NoError(t, err)
		write(t, filepath.Join(inbox, ".processing", "x.toml"), src)
		// A crash before enqueue.
		write(t, filepath.Join(inbox, ".processing", "y.toml"), "name = \"fresh\"\ncommand = \"true\"\n")
		// A crash after moving a symlink there: rejected, not followed.
		write(t, filepath.Join(b.dir, "out.toml"), "name = \"out\"\ncommand = \"true\"\n")
		require.NoError(t, os.Symlink(filepath.Join(b.dir, "out.toml"), filepath.Join(inbox, ".processing", "z.toml")))
		res, err := b.in.Scan(b.ctx)
		require.NoError(t, err)
		require.Len(t, res, 3)
		require.ErrorContains(t, res[2].Err, "z.toml is a symbolic link")
		require.FileExists(t, filepath.Join(inbox, "rejected", "z.toml.error"))
		require.FileExists(t, filepath.Join(inbox, "accepted", "x.toml"))
		require.FileExists(t, filepath.Join(inbox, "accepted", "y.toml"))
		c, err := b.st.JobCounts(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 2, c[queue.StateQueued], "neither lost nor duplicated")
	})
}

// InboxOptions.Check refuses a parsed file like a validation error: the
// file goes to rejected/ with the check's message, nothing is enqueued.
func TestInboxCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	clock := storetest.NewClock(storetest.T0)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "queue.db"), sqlite.Options{Clock: clock.Now})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	var checked []string
	in, err := inbox.New(inbox.Options{Dir: filepath.Join(dir, "inbox"), Store: st, Settle: time.Second, Clock: clock.Now,
		Check: func(file string, _ []byte, specs []jobspec.Spec) error {
			checked = append(checked, file)
			if len(specs[0].Hooks) > 0 {
				return errors.New(file + ":1: hooks: unknown hook")
			}
			return nil
		}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(in.Dir(), "ok.toml"), []byte("command = \"true\"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(in.Dir(), "no.toml"), []byte("command = \"true\"\nhooks = [\"x\"]\n"), 0o644))
	res, err := in.Scan(ctx) // first sight: not settled yet
	require.NoError(t, err)
	require.Empty(t, res)
	clock.Advance(time.Second)
	res, err = in.Scan(ctx)
	require.NoError(t, err)
	require.Len(t, res, 2)
	require.ElementsMatch(t, []string{"ok.toml", "no.toml"}, checked)
	for _, r := range res {
		switch r.File {
		case "ok.toml":
			require.NoError(t, r.Err)
			require.Len(t, r.Jobs, 1)
		case "no.toml":
			require.ErrorContains(t, r.Err, "unknown hook")
			msg, err := os.ReadFile(r.Path + ".error")
			require.NoError(t, err)
			require.Contains(t, string(msg), "no.toml:1: hooks: unknown hook")
		}
	}
	counts, err := st.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, counts[queue.StateQueued], "only the accepted file's job")
}
func TestScheduleInboxDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "q.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	in, err := inbox.New(inbox.Options{Dir: filepath.Join(dir, "inbox"), Store: st, Settle: -1})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "inbox", "s.toml"), []byte("name = \"s\"\ncommand = \"true\"\nschedule = \"@daily\"\n"), 0o600))
	res, err := in.Scan(ctx)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.NoError(t, res[0].Err)
	require.Empty(t, res[0].Jobs, "a schedule is not a job")
	s, err := st.ScheduleGet(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, res[0].Path, s.SourcePath)
}

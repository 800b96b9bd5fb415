package sqlite_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/queue"
	"paddock/queue/sqlite"
	"paddock/queue/storetest"
)

func openSQLite(ctx context.Context, loc string, o storetest.Options) (queue.Store, error) {
	return sqlite.Open(ctx, filepath.Join(loc, "queue.db"), sqlite.Options{Clock: o.Clock, Rand: o.Rand})
}

func TestMain(m *testing.M) {
	storetest.RunChild(openSQLite)
	if path := os.Getenv("PADDOCK_TEST_OPEN_DB"); path != "" { // a child of TestSQLiteOpenConcurrently
		st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
		if err == nil {
			_, err = st.JobCounts(context.Background())
			st.Close()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSQLiteStore(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, openSQLite)
}

// Many processes opening one new database at once (a worker and `paddock
// run` started together) all succeed: the first open's switch to WAL and
// schema creation must not surface SQLITE_BUSY to the others.
func TestSQLiteOpenConcurrently(t *testing.T) {
	t.Parallel()
	for round := range 4 {
		path := filepath.Join(t.TempDir(), "new.db")
		const n = 6
		cmds := make([]*exec.Cmd, n)
		outs := make([]*bytes.Buffer, n)
		for i := range cmds {
			cmds[i] = exec.Command(os.Args[0], "-test.run=^$")
			cmds[i].Env = append(os.Environ(), "PADDOCK_TEST_OPEN_DB="+path)
			outs[i] = &bytes.Buffer{}
			cmds[i].Stderr = outs[i]
		}
		for _, c := range cmds {
			require.NoError(t, c.Start())
		}
		for i, c := range cmds {
			require.NoError(t, c.Wait(), "round %d, process %d: %s", round, i, outs[i])
		}
	}
}

// TestSQLiteOpenSaysWhatIsWrong: what SQLite reports as "unable to open
// database file (14)" or "file is not a database (26)" is said plainly,
// with the path, once ("sqlite: open PATH: ...").
func TestSQLiteOpenSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	mk := func(name string, make func(string) error) string {
		p := filepath.Join(dir, name)
		require.NoError(t, make(p))
		return p
	}
	file := mk("file", func(p string) error {
		return os.WriteFile(p, []byte("not sqlite at all, but long enough to be read as a header........................................................................................"), 0o600)
	})
	dangling := mk("dangling", func(p string) error { return os.Symlink(filepath.Join(dir, "missing", "q.db"), p) })
	// SQLite would create the target; a dangling link is refused instead.
	danglingHere := mk("dangling-here", func(p string) error { return os.Symlink("nothing.db", p) })
	loop := mk("loop", func(p string) error { return os.Symlink("loop", p) })
	cases := []struct{ path, want string }{
		{mk("dir", func(p string) error { return os.Mkdir(p, 0o700) }), ": it is a directory; the queue database must be a file"},
		{mk("fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }), ": it is a named pipe; the queue database must be a file"},
		{filepath.Join(dir, "missing", "q.db"), ": its directory: stat " + filepath.Join(dir, "missing") + ": no such file or directory"},
		{filepath.Join(file, "q.db"), ": " + file + " is not a directory"},
		{file, ": not a SQLite database, or a damaged one: file is not a database (26)"},
		{dangling, ": it is a symlink to " + filepath.Join(dir, "missing", "q.db") + ", which does not exist"},
		{danglingHere, ": it is a symlink to nothing.db, which does not exist"},
		{loop, ": stat " + loop + ": too many levels of symbolic links"},
	}
	for _, tc := range cases {
		_, err := sqlite.Open(ctx, tc.path, sqlite.Options{})
		require.EqualError(t, err, "sqlite: open "+tc.path+tc.want)
	}
	require.NoFileExists(t, filepath.Join(dir, "nothing.db"))
}

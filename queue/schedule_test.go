package queue_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/queue"
	"paddock/queue/sqlite"
)

func TestScheduleInboxDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "q.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	in, err := queue.NewInbox(queue.InboxOptions{Dir: filepath.Join(dir, "inbox"), Store: st, Settle: -1})
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

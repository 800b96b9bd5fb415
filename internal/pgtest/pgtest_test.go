package pgtest_test

import (
	"context"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"paddock/internal/pgtest"
)

// A server listens on its Unix socket only, runs as an unprivileged
// user, survives a restart with its data, and leaves nothing behind.
func TestServerStartRestartRemove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := pgtest.Start(t)
	url := s.NewDatabase(t, "key")
	require.Equal(t, url, s.NewDatabase(t, "key"), "the same key names the same database")
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	var listen string
	require.NoError(t, c.QueryRow(ctx, `SHOW listen_addresses`).Scan(&listen))
	require.Empty(t, listen, "no TCP listener")
	_, err = c.Exec(ctx, `CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)`)
	require.NoError(t, err)
	c.Close(ctx)
	st, err := os.Stat(s.Dir + "/data")
	require.NoError(t, err)
	if os.Geteuid() == 0 {
		require.NotZero(t, st.Sys().(*syscall.Stat_t).Uid, "owned by an unprivileged user")
	}

	s.Stop()
	_, err = pgx.Connect(ctx, url)
	require.Error(t, err, "stopped")
	require.NoError(t, s.Start())
	c, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	var v int
	require.NoError(t, c.QueryRow(ctx, `SELECT v FROM kept`).Scan(&v))
	require.Equal(t, 7, v)
	c.Close(ctx)

	s.Remove()
	require.NoDirExists(t, s.Dir)
}

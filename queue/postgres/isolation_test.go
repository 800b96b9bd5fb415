package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"paddock/internal/pgtest"
)

// Every write transaction runs READ COMMITTED, and every read a
// read-only snapshot, whatever the database's default.
func TestTransactionsPinIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	s, err := Open(ctx, url, Options{})
	require.NoError(t, err)
	defer s.Close()
	var db string
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db))
	_, err = s.pool.Exec(ctx, `ALTER DATABASE `+db+` SET default_transaction_isolation = 'serializable'`)
	require.NoError(t, err)
	s.pool.Reset() // new sessions take the new default
	var def, w, wc, r, pl string
	require.NoError(t, s.pool.QueryRow(ctx, `SHOW default_transaction_isolation`).Scan(&def))
	require.Equal(t, "serializable", def)
	require.NoError(t, s.tx(ctx, func(tx pgx.Tx, _ time.Time) error {
		return tx.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&w)
	}))
	require.NoError(t, s.txClock(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&wc)
	}))
	require.NoError(t, s.read(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&r)
	}))
	require.NoError(t, s.pipelined(ctx, nil, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(&pl); err != nil {
				return err
			}
		}
		return rows.Err()
	}, `SELECT current_setting('transaction_isolation')`))
	require.Equal(t, []string{"read committed", "read committed", "repeatable read", "read committed"}, []string{w, wc, r, pl})
}

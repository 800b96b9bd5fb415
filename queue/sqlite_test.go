package queue_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"paddock/queue"
	"paddock/queue/storetest"
)

func openSQLite(ctx context.Context, loc string, o storetest.Options) (queue.Store, error) {
	return queue.OpenSQLite(ctx, filepath.Join(loc, "queue.db"), queue.SQLiteOptions{Clock: o.Clock, Rand: o.Rand})
}

func TestMain(m *testing.M) {
	storetest.RunChild(openSQLite)
	os.Exit(m.Run())
}

func TestSQLiteStore(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, openSQLite)
}

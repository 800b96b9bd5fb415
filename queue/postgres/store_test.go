package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"paddock/internal/pgtest"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/postgres"
	"paddock/queue/storetest"
)

// openPostgres opens the store in a database of its own for loc, on the
// test binary's shared server (children find it through the environment).
func openPostgres(ctx context.Context, loc string, o storetest.Options) (queue.Store, error) {
	url, err := pgtest.DatabaseFromEnv(loc)
	if err != nil {
		return nil, err
	}
	return postgres.Open(ctx, url, postgres.Options{Clock: o.Clock, Rand: o.Rand})
}

func TestMain(m *testing.M) {
	storetest.RunChild(openPostgres)
	os.Exit(pgtest.Main(m))
}

func TestPostgresStore(t *testing.T) {
	t.Parallel()
	pgtest.Shared(t)
	storetest.Exercise(t, openPostgres)
}

// An older paddock refuses a schema a newer one wrote; opening again
// migrates nothing.
func TestPostgresSchemaVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	st, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	from, err := st.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, postgres.SchemaVersion, from, "already current")
	st.Close()

	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `UPDATE paddock_schema SET version = version + 1`)
	require.NoError(t, err)
	_, err = postgres.Open(ctx, url, postgres.Options{})
	require.ErrorIs(t, err, postgres.ErrSchemaNewer)
	require.ErrorContains(t, err, fmt.Sprintf("schema version %d, this paddock knows up to %d", postgres.SchemaVersion+1, postgres.SchemaVersion))
}

// Claims stay READ COMMITTED on a database whose default isolation is
// SERIALIZABLE: concurrent claimers skip each other's rows instead of
// aborting, and every job is claimed exactly once.
func TestPostgresClaimsUnderSerializableDefault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	var db string
	require.NoError(t, c.QueryRow(ctx, `SELECT current_database()`).Scan(&db))
	_, err = c.Exec(ctx, `ALTER DATABASE `+db+` SET default_transaction_isolation = 'serializable'`)
	require.NoError(t, err)
	c.Close(ctx)

	st, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 8})
	require.NoError(t, err)
	defer st.Close()
	var iso string
	// The setting applies to new sessions: the store's are.
	c, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	require.NoError(t, c.QueryRow(ctx, `SHOW default_transaction_isolation`).Scan(&iso))
	c.Close(ctx)
	require.Equal(t, "serializable", iso)

	const n = 300
	specs := make([]jobspec.Spec, n)
	for i := range specs {
		specs[i] = jobspec.Spec{Command: []string{"true"}}
	}
	_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: "# test"})
	require.NoError(t, err)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			worker := fmt.Sprint("w", w)
			for {
				jobs, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: worker, Limit: 3})
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					return
				}
				for _, j := range jobs {
					mu.Lock()
					seen[j.ID]++
					mu.Unlock()
					if _, err := st.AttemptFinish(ctx, &queue.AttemptFinishParams{JobID: j.ID, WorkerID: worker, Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}}); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, n)
	for id, k := range seen {
		require.Equal(t, 1, k, id)
	}
	counts, err := st.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, n, counts[queue.StateSucceeded])
}

// Two hosts enqueueing the same name at once: one batch is stored, the
// other refused with ErrNameInUse (never two live jobs with one name).
func TestPostgresNameRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	a, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer a.Close()
	b, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer b.Close()
	for round := range 20 {
		name := fmt.Sprint("race-", round)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, st := range []*postgres.Store{a, b} {
			wg.Go(func() {
				_, errs[i] = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: name, Command: []string{"true"}}}, Source: "# test"})
			})
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else {
				require.ErrorIs(t, err, queue.ErrNameInUse)
			}
		}
		require.Equal(t, 1, ok, "round %d: %v", round, errs)
		l, err := a.JobList(ctx, &queue.JobListParams{NameGlob: name})
		require.NoError(t, err)
		require.Len(t, l, 1)
	}
}

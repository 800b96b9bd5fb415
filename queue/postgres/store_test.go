package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

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

// An attempt's output is stored while its worker holds the lease, read
// from any process, refused once the lease is gone, and pruned with the
// job.
func TestPostgresAttemptLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	st, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "talk", Command: []string{"echo"}}}, Source: "# test"})
	require.NoError(t, err)
	got, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	id := got[0].ID
	_, err = st.AttemptLogGet(ctx, id, 1)
	require.ErrorIs(t, err, queue.ErrNotFound)
	bin := []byte("out\x00\xff\n")
	require.ErrorIs(t, st.AttemptLogPut(ctx, &queue.AttemptLogPutParams{JobID: id, Number: 1, WorkerID: "thief", Log: queue.AttemptLog{Stdout: []byte("x")}}), queue.ErrLeaseLost)
	require.NoError(t, st.AttemptLogPut(ctx, &queue.AttemptLogPutParams{JobID: id, Number: 1, WorkerID: "w", Log: queue.AttemptLog{Stdout: bin, Stderr: []byte("err\n")}}))
	other, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer other.Close()
	l, err := other.AttemptLogGet(ctx, id, 1)
	require.NoError(t, err)
	require.Equal(t, queue.AttemptLog{Stdout: bin, Stderr: []byte("err\n")}, l)
	_, err = st.AttemptFinish(ctx, &queue.AttemptFinishParams{JobID: id, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
	require.NoError(t, err)
	require.ErrorIs(t, st.AttemptLogPut(ctx, &queue.AttemptLogPutParams{JobID: id, Number: 1, WorkerID: "w", Log: queue.AttemptLog{Stdout: []byte("late")}}), queue.ErrLeaseLost)
	n, err := st.JobPrune(ctx, &queue.JobPruneParams{})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	var left int
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM attempt_logs`).Scan(&left))
	require.Zero(t, left)
}

// A database at an older schema version is migrated, one version at a
// time, when opened: from version 1 (before the attempts' output was
// stored, and before groups), a job that ran keeps its group and gets its
// newest start from its attempts, and the group's running job counts.
func TestPostgresMigratesOlderSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	st, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "ran", Command: []string{"true"}, Group: "g"}}})
	require.NoError(t, err)
	got, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w"})
	require.NoError(t, err)
	require.Len(t, got, 1)
	st.Close()
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, v4to3+`DROP TABLE attempt_logs; DROP TABLE job_groups; DROP TABLE queue_state; DROP INDEX jobs_group;
		ALTER TABLE jobs DROP COLUMN group_name; ALTER TABLE jobs DROP COLUMN started_at;
		UPDATE paddock_schema SET version = 1`)
	require.NoError(t, err)
	st, err = postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer st.Close()
	require.Equal(t, 1, st.FoundVersion())
	from, err := st.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, postgres.SchemaVersion, from)
	var v int
	require.NoError(t, c.QueryRow(ctx, `SELECT version FROM paddock_schema`).Scan(&v))
	require.Equal(t, postgres.SchemaVersion, v)
	_, err = c.Exec(ctx, `SELECT stdout FROM attempt_logs`)
	require.NoError(t, err)
	j, err := st.JobGet(ctx, "ran")
	require.NoError(t, err)
	require.Len(t, j.Attempts, 1)
	require.False(t, j.StartedAt.IsZero())
	require.Equal(t, j.Attempts[0].StartedAt, j.StartedAt, "filled from the attempts")
	gs, err := st.GroupList(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []queue.Group{{Name: "g", Running: 1}}, gs)
}

// v4to3 turns a version-4 database back into version 3: no scheduled or
// gated columns, and one claim index holding every ready job.
const v4to3 = `DROP INDEX jobs_gated; DROP INDEX jobs_scheduled; DROP INDEX jobs_ready;
	ALTER TABLE jobs DROP COLUMN scheduled, DROP COLUMN gated;
	CREATE INDEX jobs_ready ON jobs (priority DESC, created_at, rid) WHERE state = 'queued' AND deps_pending = 0;
	UPDATE paddock_schema SET version = 3;`

// A version-3 database holding jobs in every state (ready, not yet due,
// of a full group, of a paused group, waiting for a dependency, running
// in a limited group, finished three ways) migrates to version 4 with
// every count kept, and the claim still honours the limit, the pause,
// the due time and the claim order.
func TestPostgresMigratesFromV3(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	st, err := postgres.Open(ctx, url, postgres.Options{Clock: clock})
	require.NoError(t, err)
	job := func(name string, prio int, mod func(*jobspec.Spec)) jobspec.Spec {
		sp := jobspec.Spec{Name: name, Command: []string{"true"}, Priority: prio}
		if mod != nil {
			mod(&sp)
		}
		return sp
	}
	_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
		job("run-x", 9, func(s *jobspec.Spec) { s.Group = "x" }),
		job("ok", 8, nil),
		job("bad", 7, nil),
		job("gone", 6, nil),
		job("full-x", 5, func(s *jobspec.Spec) { s.Group = "x" }),
		job("paused-p", 5, func(s *jobspec.Spec) { s.Group = "p" }),
		job("later", 5, func(s *jobspec.Spec) { s.Delay = time.Hour }),
		job("after-run-x", 5, func(s *jobspec.Spec) { s.After = []string{"run-x"} }),
		job("plain", 0, nil),
	}})
	require.NoError(t, err)
	got, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 3})
	require.NoError(t, err)
	require.Len(t, got, 3)
	finish := func(id string, o string) {
		t.Helper()
		_, err := st.AttemptFinish(ctx, &queue.AttemptFinishParams{JobID: id, WorkerID: "w", Attempt: queue.Attempt{Outcome: o}})
		require.NoError(t, err)
	}
	for _, j := range got {
		switch j.Name {
		case "ok":
			finish(j.ID, queue.OutcomeSucceeded)
		case "bad":
			finish(j.ID, queue.OutcomeFailed)
		}
	}
	_, err = st.JobCancel(ctx, "gone")
	require.NoError(t, err)
	_, err = st.GroupLimitSet(ctx, &queue.GroupLimitSetParams{Name: "x", Limit: 1})
	require.NoError(t, err)
	require.NoError(t, st.QueuePause(ctx, &queue.QueuePauseParams{Group: "p"}))
	before, err := st.JobCounts(ctx)
	require.NoError(t, err)
	st.Close()
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, v4to3)
	require.NoError(t, err)

	st, err = postgres.Open(ctx, url, postgres.Options{Clock: clock})
	require.NoError(t, err)
	defer st.Close()
	require.Equal(t, 3, st.FoundVersion())
	after, err := st.JobCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after)
	var gated, scheduled int
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FILTER (WHERE gated), count(*) FILTER (WHERE scheduled) FROM jobs`).Scan(&gated, &scheduled))
	require.Equal(t, 3, gated, "run-x, full-x, paused-p")
	require.Equal(t, 1, scheduled, "later")
	names := func(jobs []queue.Job) []string {
		var out []string
		for _, j := range jobs {
			out = append(out, j.Name)
		}
		return out
	}
	got, err = st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"plain"}, names(got), "x is full, p paused, later not due, after-run-x waits")
	now = now.Add(2 * time.Hour)
	got, err = st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"later"}, names(got))
	runX, err := st.JobGet(ctx, "run-x")
	require.NoError(t, err)
	finish(runX.ID, queue.OutcomeSucceeded)
	require.NoError(t, st.QueueResume(ctx, &queue.QueuePauseParams{Group: "p"}))
	got, err = st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"full-x", "paused-p", "after-run-x"}, names(got), "claim order: priority, then enqueue order")
}

// A claim takes a limited group's row lock only when it takes a job of
// that group: while another transaction holds the row, claims of jobs in
// no group or in an unlimited group go on, and only the claim of the
// group's job waits.
func TestPostgresClaimLocksOnlyItsGroups(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	st, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
		{Name: "free", Command: []string{"true"}, Priority: 2},
		{Name: "other", Command: []string{"true"}, Group: "unlimited", Priority: 1},
		{Name: "lim", Command: []string{"true"}, Group: "lim"},
	}})
	require.NoError(t, err)
	_, err = st.GroupLimitSet(ctx, &queue.GroupLimitSetParams{Name: "lim", Limit: 1})
	require.NoError(t, err)
	c, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer c.Close(ctx)
	tx, err := c.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT name FROM job_groups WHERE name = 'lim' FOR UPDATE`)
	require.NoError(t, err)
	claim := func(d time.Duration) ([]queue.Job, error) {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return st.JobClaim(cctx, &queue.JobClaimParams{WorkerID: "w", Limit: 1})
	}
	for _, want := range []string{"free", "other"} {
		got, err := claim(10 * time.Second)
		require.NoError(t, err, "a claim outside the limited group waits for no lock")
		require.Len(t, got, 1)
		require.Equal(t, want, got[0].Name)
	}
	_, err = claim(500 * time.Millisecond)
	require.Error(t, err, "the claim of the limited group's job waits for its row")
	require.NoError(t, tx.Rollback(ctx))
	// The claim given up above may still hold the group's row on the
	// server for a moment (its cancel request travels apart from its
	// connection), so that the next claim skips the job; or it may have
	// run to its commit: the job is then leased, as at-least-once allows.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := claim(10 * time.Second)
		require.NoError(t, err)
		if len(got) == 1 {
			require.Equal(t, "lim", got[0].Name)
			return
		}
		require.Empty(t, got)
		j, err := st.JobGet(ctx, "lim")
		require.NoError(t, err)
		if j.State == queue.StateRunning {
			return
		}
		require.True(t, time.Now().Before(deadline), "lim neither claimable nor claimed: %s", j.State)
		time.Sleep(50 * time.Millisecond)
	}
}

// A committed batch wakes listeners on other connections once, however
// many jobs it holds; a poll-only store neither notifies nor listens.
func TestPostgresNotifications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	a, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer a.Close()
	b, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer b.Close()
	wake, stop := a.Notifications()
	defer stop()
	raw, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer raw.Close(ctx)
	_, err = raw.Exec(ctx, `LISTEN paddock_queue`)
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond) // a's listener connects

	specs := make([]jobspec.Spec, 1000)
	for i := range specs {
		specs[i] = jobspec.Spec{Command: []string{"true"}}
	}
	_, err = b.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: "# test"})
	require.NoError(t, err)
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after an enqueue on another connection")
	}
	count := func() int {
		n := 0
		for {
			wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err := raw.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return n
			}
			n++
		}
	}
	require.Equal(t, 1, count(), "one notification for the 1,000-job batch")

	quiet, err := postgres.Open(ctx, url+"&"+postgres.PollOnlyParam+"=1", postgres.Options{})
	require.NoError(t, err)
	defer quiet.Close()
	_, err = quiet.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs[:10], Source: "# test"})
	require.NoError(t, err)
	require.Zero(t, count(), "a poll-only store sends none")
	_, err = postgres.Open(ctx, url+"&"+postgres.PollOnlyParam+"=maybe", postgres.Options{})
	require.ErrorContains(t, err, `paddock_poll_only="maybe": expected 1 or 0`)
}

// Calls made while the server restarts wait for it and succeed (the
// scheduler's read included); a worker's finish made across the restart
// is recorded once. The outage is reported once, each retried try, and
// its end once.
func TestPostgresServerRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t, "restart")
	st, err := postgres.Open(ctx, url, postgres.Options{})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "a", Command: []string{"true"}}, {Name: "b", Command: []string{"true"}}}, Source: "# test"})
	require.NoError(t, err)
	got, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 1})
	require.NoError(t, err)
	require.Len(t, got, 1)

	var mu sync.Mutex
	var events []queue.OutageEvent
	stop := st.WatchOutages(func(ev queue.OutageEvent) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	})
	defer stop()

	srv.Stop()
	type result struct {
		j   queue.Job
		err error
	}
	fin := make(chan result, 1)
	go func() {
		j, err := st.AttemptFinish(ctx, &queue.AttemptFinishParams{JobID: got[0].ID, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
		fin <- result{j, err}
	}()
	tick := make(chan error, 1)
	go func() {
		_, err := st.ScheduleTick(ctx, &queue.ScheduleTickParams{WorkerID: "w"})
		tick <- err
	}()
	time.Sleep(time.Second)
	select {
	case r := <-fin:
		t.Fatalf("finish returned while the server was down: %v", r.err)
	case err := <-tick:
		t.Fatalf("schedule tick returned while the server was down: %v", err)
	default:
	}
	mu.Lock()
	require.NotEmpty(t, events, "no outage reported while the server was down")
	require.Equal(t, queue.OutageStarted, events[0].Kind)
	require.Error(t, events[0].Err)
	require.Equal(t, postgres.RetryForDefault, events[0].RetryFor)
	mu.Unlock()
	require.NoError(t, srv.Start())
	r := <-fin
	require.NoError(t, r.err)
	require.NoError(t, <-tick)
	mu.Lock()
	retries := 0
	for i, ev := range events {
		switch ev.Kind {
		case queue.OutageStarted:
			require.Zero(t, i, "one start, first")
		case queue.OutageRetry:
			retries++
			require.Equal(t, retries, ev.Retries)
			require.Equal(t, events[0].Since, ev.Since)
		case queue.OutageEnded:
			require.Equal(t, len(events)-1, i, "one end, last")
			require.Equal(t, retries, ev.Retries)
			require.NoError(t, ev.Err)
		}
	}
	require.GreaterOrEqual(t, retries, 2, "the finish and the tick each retried")
	require.Equal(t, queue.OutageEnded, events[len(events)-1].Kind)
	mu.Unlock()
	require.Equal(t, queue.StateSucceeded, r.j.State)
	require.Len(t, r.j.Attempts, 1)
	next, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 5})
	require.NoError(t, err)
	require.Len(t, next, 1, "the other job, once")
	require.NotEqual(t, got[0].ID, next[0].ID)
}

// A call retries for Options.RetryFor while the server is down, and then
// fails with queue.ErrUnreachable; nothing was done.
func TestPostgresUnreachable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t, "unreachable")
	st, err := postgres.Open(ctx, url, postgres.Options{RetryFor: 300 * time.Millisecond})
	require.NoError(t, err)
	defer st.Close()
	srv.Stop()
	_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "lost", Command: []string{"true"}}}, Source: "# test"})
	require.ErrorIs(t, err, queue.ErrUnreachable)
	_, err = st.ScheduleTick(ctx, &queue.ScheduleTickParams{WorkerID: "w"})
	require.ErrorIs(t, err, queue.ErrUnreachable)
	require.NoError(t, srv.Start())
	c, err := st.JobCounts(ctx)
	require.NoError(t, err)
	require.Zero(t, c[queue.StateQueued], "the failed enqueue stored nothing")
}

// Messages never show a password, whatever the connection string's form.
func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:a@db/q?host=/s":             "postgres://u:xxxxx@db/q?host=/s",
		"postgres://u@db/q?password=hunter2":      "postgres://u@db/q?password=xxxxx",
		"postgres://u@db/q":                       "postgres://u@db/q",
		"host=db password=hunter2 dbname=q":       "host=db password=xxxxx dbname=q",
		"host=db password='hun ter\\'2' dbname=q": "host=db password=xxxxx dbname=q",
	} {
		require.Equal(t, want, postgres.Redact(in), in)
	}
}

// A batch is written by one INSERT when small and by COPY when large:
// both store what the enqueue returns (dependencies in the batch and
// stored ones, a failed dependency failing its dependents at once,
// groups, due times, names), and claims follow the batch's order.
func TestPostgresEnqueueSmallAndLargeBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, n := range []int{3, 200} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			url := pgtest.Shared(t).NewDatabase(t, t.Name())
			st, err := postgres.Open(ctx, url, postgres.Options{})
			require.NoError(t, err)
			defer st.Close()
			_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{{Name: "done", Command: []string{"true"}}, {Name: "bad", Command: []string{"true"}}}, Source: "# before"})
			require.NoError(t, err)
			claimed, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 1})
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			_, err = st.AttemptFinish(ctx, &queue.AttemptFinishParams{JobID: claimed[0].ID, WorkerID: "w", Attempt: queue.Attempt{Outcome: queue.OutcomeSucceeded}})
			require.NoError(t, err)
			_, err = st.JobCancel(ctx, "bad")
			require.NoError(t, err)

			runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
			specs := make([]jobspec.Spec, n)
			for i := range specs {
				specs[i] = jobspec.Spec{Name: fmt.Sprintf("j%03d", i), Command: []string{"echo", fmt.Sprint(i)}, Retries: i % 3, Labels: map[string]string{"i": fmt.Sprint(i)}}
			}
			specs[1].After = []string{"j000", "done"} // in the batch, and stored succeeded
			specs[2].After = []string{"bad"}          // stored canceled: fails at once
			specs[0].Group = "g"
			if n > 3 {
				specs[3].RunAt = runAt
				specs[4].After = []string{"j002"} // fails with j002
				specs[5].Name = ""
			}
			got, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: "# batch", SourcePath: "/jobs/batch.toml"})
			require.NoError(t, err)
			require.Len(t, got, n)
			for i, j := range got {
				stored, err := st.JobGet(ctx, j.ID)
				require.NoError(t, err)
				require.Equal(t, j.ID, stored.ID)
				require.Equal(t, j.Name, stored.Name, "job %d", i)
				require.Equal(t, j.State, stored.State, "job %d", i)
				require.Equal(t, j.Reason, stored.Reason, "job %d", i)
				require.Equal(t, j.DependsOn, stored.DependsOn, "job %d", i)
				require.Equal(t, j.DepsPending, stored.DepsPending, "job %d", i)
				require.Equal(t, j.MaxAttempts, stored.MaxAttempts, "job %d", i)
				require.True(t, j.NotBefore.Equal(stored.NotBefore), "job %d: %v %v", i, j.NotBefore, stored.NotBefore)
				require.Equal(t, j.Spec.Command, stored.Spec.Command, "job %d", i)
				require.Equal(t, j.Spec.Labels, stored.Spec.Labels, "job %d", i)
				require.Equal(t, "/jobs/batch.toml", stored.SourcePath)
			}
			require.Equal(t, queue.StateQueued, got[1].State)
			require.Equal(t, 1, got[1].DepsPending, "j000 in the batch; done already succeeded")
			require.Len(t, got[1].DependsOn, 2)
			require.Equal(t, queue.StateFailed, got[2].State)
			require.Contains(t, got[2].Reason, "bad")
			if n > 3 {
				require.True(t, got[3].NotBefore.Equal(runAt))
				require.Equal(t, queue.StateFailed, got[4].State)
			}
			// Claims in batch order (j000 first: its group has no limit);
			// the blocked, failed and not yet due jobs are skipped.
			var order []string
			for {
				c, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "w", Limit: 7})
				require.NoError(t, err)
				if len(c) == 0 {
					break
				}
				for _, j := range c {
					order = append(order, j.ID)
				}
			}
			var want []string
			for i, j := range got {
				if i == 1 || i == 2 || (n > 3 && (i == 3 || i == 4)) {
					continue
				}
				want = append(want, j.ID)
			}
			require.Equal(t, want, order)
			// A second batch with a live name of the first is refused
			// whole, by either path.
			again := append([]jobspec.Spec{{Name: "fresh", Command: []string{"true"}}}, specs[1:]...)
			_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: again, Source: "# again"})
			require.ErrorIs(t, err, queue.ErrNameInUse)
			_, err = st.JobGet(ctx, "fresh")
			require.ErrorIs(t, err, queue.ErrNotFound)
		})
	}
}

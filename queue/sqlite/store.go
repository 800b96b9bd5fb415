package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go)

	"paddock/queue"
)

// Options configure Open. The zero value is ready to use.
type Options struct {
	// Clock returns the current time. Defaults to time.Now. Tests inject a
	// fake clock so that backoff and lease expiry need no sleeping.
	Clock func() time.Time
	// Rand returns a jitter sample in [0,1) for Backoff. Defaults to
	// math/rand/v2.Float64.
	Rand func() float64
	// BusyTimeout is how long a write waits for another process holding the
	// write lock before failing with SQLITE_BUSY. Defaults to
	// BusyTimeoutDefault.
	BusyTimeout time.Duration
}

// BusyTimeoutDefault is Options.BusyTimeout's default.
const BusyTimeoutDefault = 10 * time.Second

// SchemaVersion is the schema the store writes (PRAGMA user_version).
const SchemaVersion = 6

// Store is the embedded [queue.Store]: one SQLite file in WAL mode, shared
// safely by many goroutines and many processes on one machine (not over a
// network file system). Every write runs in a BEGIN IMMEDIATE transaction,
// so claims are serialized by SQLite's write lock and no job is handed out
// twice. Commits use synchronous=NORMAL: a committed job survives kill -9
// of any process, though the last commits may be lost on power failure.
//
// Other processes can notice changes cheaply by watching the modification
// time of the "-wal" file beside the database (it is written on every
// commit), then calling JobClaim.
type Store struct {
	w, r   *sql.DB // w: one connection, IMMEDIATE transactions; r: readers
	clock  func() time.Time
	rand   func() float64
	closed atomic.Bool

	stClaimIDs, stClaimOpen, stClaimOpenIDs *sql.Stmt
	stAttemptIns, stJobIns, stJobIns1       *sql.Stmt
	bigMu                                   sync.Mutex
	stJobInsBig                             *sql.Stmt            // prepared on first use (jobInsBig)
	stmts                                   map[string]*sql.Stmt // hotSQL text -> statement on w (see cachedTx); read-only after open
}

var _ queue.Store = (*Store)(nil)

const schema = `
CREATE TABLE IF NOT EXISTS sources (
	id   INTEGER PRIMARY KEY,
	path TEXT NOT NULL,
	text TEXT NOT NULL,
	jobs INTEGER NOT NULL -- jobs still referring to it; deleted at 0
);
CREATE TABLE IF NOT EXISTS jobs (
	rid              INTEGER PRIMARY KEY,
	id               TEXT NOT NULL UNIQUE,
	name             TEXT NOT NULL,
	state            TEXT NOT NULL,
	priority         INTEGER NOT NULL,
	created_ns       INTEGER NOT NULL,
	updated_ns       INTEGER NOT NULL,
	finished_ns      INTEGER NOT NULL DEFAULT 0,
	not_before_ns    INTEGER NOT NULL DEFAULT 0,
	deps_pending     INTEGER NOT NULL DEFAULT 0,
	attempts         INTEGER NOT NULL DEFAULT 0,
	max_attempts     INTEGER NOT NULL,
	lease_owner      TEXT NOT NULL DEFAULT '',
	lease_expires_ns INTEGER NOT NULL DEFAULT 0,
	cancel_requested INTEGER NOT NULL DEFAULT 0,
	reason           TEXT NOT NULL DEFAULT '',
	spec             TEXT NOT NULL,
	source_id        INTEGER NOT NULL,
	source_path      TEXT NOT NULL DEFAULT '',
	depends_on       TEXT NOT NULL DEFAULT '',
	group_name       TEXT NOT NULL DEFAULT '', -- spec.group
	started_ns       INTEGER NOT NULL DEFAULT 0, -- the newest attempt's start
	-- 1 from when not_before_ns is set until a claim finds it due (then 0):
	-- a job not yet due waits in jobs_scheduled, out of the claim's way.
	scheduled        INTEGER NOT NULL DEFAULT 0,
	-- 1 while the job's group has a row in job_groups (a limit or a
	-- pause), kept on queued and running jobs by the writes of job_groups:
	-- its job waits in jobs_gated, which a claim seeks group by group.
	gated            INTEGER NOT NULL DEFAULT 0
);
-- Claimable jobs outside limited and paused groups, in claim order; the
-- claim reads the first ones and stops. not_before_ns and group_name make
-- it covering.
CREATE INDEX IF NOT EXISTS jobs_ready2 ON jobs(priority DESC, created_ns, rid, not_before_ns, group_name)
	WHERE state = 'queued' AND (deps_pending = 0 AND (scheduled = 0 AND gated = 0));
-- Claimable jobs of limited and paused groups, in claim order within each
-- group: a claim seeks the first ones of each group with slots left, and
-- never reads the jobs of a full or paused group.
CREATE INDEX IF NOT EXISTS jobs_gated ON jobs(group_name, priority DESC, created_ns, rid, not_before_ns)
	WHERE state = 'queued' AND (deps_pending = 0 AND (scheduled = 0 AND gated = 1));
-- (SQLite reads an index alone only for the column = constant terms of
-- its WHERE that nest on the right, as written here.)
-- Jobs not yet due, by due time: a claim moves those now due to the two
-- indexes above (scheduled = 0) in one range read.
CREATE INDEX IF NOT EXISTS jobs_scheduled ON jobs(not_before_ns)
	WHERE state = 'queued' AND (deps_pending = 0 AND scheduled = 1);
-- Queued and running jobs of a group, by state: running counts for the
-- claim, and GroupList. Queries repeat the WHERE terms to use it.
CREATE INDEX IF NOT EXISTS jobs_group ON jobs(group_name, state) WHERE group_name != '' AND state IN ('queued','running');
CREATE INDEX IF NOT EXISTS jobs_name ON jobs(name, created_ns) WHERE name != '';
CREATE INDEX IF NOT EXISTS jobs_lease ON jobs(lease_expires_ns) WHERE state = 'running';
-- Finished jobs (finished_ns > 0 exactly when the state is terminal), with
-- their state so that counts by state read this index alone.
CREATE INDEX IF NOT EXISTS jobs_finished2 ON jobs(finished_ns, state) WHERE finished_ns > 0;
-- Queued jobs still waiting for dependencies (only those; most have none).
CREATE INDEX IF NOT EXISTS jobs_blocked ON jobs(deps_pending) WHERE state = 'queued' AND deps_pending > 0;
-- There is no index on state alone: each one costs every claim and every
-- finish two more page writes. The partial indexes above and jobs_ready and
-- jobs_lease together cover every state.
CREATE TABLE IF NOT EXISTS deps (
	dep_rid INTEGER NOT NULL,
	job_rid INTEGER NOT NULL,
	PRIMARY KEY (dep_rid, job_rid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deps_job ON deps(job_rid);
CREATE TABLE IF NOT EXISTS attempts (
	job_rid     INTEGER NOT NULL,
	number      INTEGER NOT NULL,
	worker_id   TEXT NOT NULL,
	started_ns  INTEGER NOT NULL,
	ended_ns    INTEGER NOT NULL DEFAULT 0,
	outcome     TEXT NOT NULL DEFAULT '',
	exit_code   INTEGER,
	signal      TEXT NOT NULL DEFAULT '',
	reason      TEXT NOT NULL DEFAULT '',
	argv        TEXT NOT NULL DEFAULT '',
	trail       TEXT NOT NULL DEFAULT '',
	stdout_path TEXT NOT NULL DEFAULT '',
	stderr_path TEXT NOT NULL DEFAULT '',
	policy_sha256 TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (job_rid, number)
) WITHOUT ROWID;
-- Groups with a limit or a pause (queue.Group); other groups have no row.
CREATE TABLE IF NOT EXISTS job_groups (
	name        TEXT PRIMARY KEY,
	max_running INTEGER NOT NULL DEFAULT 0, -- 0 = unlimited
	paused      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
-- The queue-wide switches (queue.QueueState); one row once set.
CREATE TABLE IF NOT EXISTS queue_state (
	id        INTEGER PRIMARY KEY CHECK (id = 1),
	paused    INTEGER NOT NULL DEFAULT 0,
	paused_ns INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS policy (
	id     INTEGER PRIMARY KEY CHECK (id = 1),
	source TEXT NOT NULL,
	path   TEXT NOT NULL,
	sha256 TEXT NOT NULL,
	set_ns INTEGER NOT NULL
);
`

// Open opens (creating when missing) the store in the file at path,
// a plain file path (not a URI). Several processes may open the same file at
// once. The caller must Close the store. It fails when the file's schema is
// newer than SchemaVersion, and, saying what is wrong ("sqlite: open PATH:
// ..."), when path is not a regular file or is a symlink to nothing, when
// its directory is missing, or when the file cannot be read and written or
// SQLite could not create the PATH-wal and PATH-shm files it keeps beside
// it (beside a symlink's target): a directory this process cannot write, a
// read-only mount.
//
// Memory: the writer connection keeps up to 4 MiB of page cache and each
// of up to 4 reader connections 1 MiB, so at most 8 MiB of page cache per
// open store, whatever the size of the queue (PRAGMA cache_size). A
// store that enqueued, claimed and finished 20,000 jobs one by one stays
// under 30 MiB of resident memory in all, the Go heap included.
func Open(ctx context.Context, path string, o Options) (*Store, error) {
	if path == "" || strings.ContainsAny(path, "?\x00") || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("sqlite: invalid database path %q: expected a file path without '?', NUL or a file: prefix", path)
	}
	if err := checkDatabasePath(path); err != nil {
		return nil, err
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = BusyTimeoutDefault
	}
	s := &Store{clock: o.Clock, rand: o.Rand}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.rand == nil {
		s.rand = rand.Float64
	}
	base := path + "?_pragma=busy_timeout(" + strconv.FormatInt(o.BusyTimeout.Milliseconds(), 10) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=temp_store(MEMORY)"
	var err error
	if s.w, err = sql.Open("sqlite", base+"&_txlock=immediate&_pragma=cache_size(-4096)"); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxIdleTime(0)
	if s.r, err = sql.Open("sqlite", base+"&_pragma=query_only(1)&_pragma=cache_size(-1024)"); err != nil {
		s.w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s.r.SetMaxOpenConns(4)
	// Several processes opening a new database at once (a worker and
	// `paddock run`, say) race to switch it to WAL and create the schema;
	// the journal-mode switch can answer SQLITE_BUSY without waiting for
	// the busy timeout. Retry it within that timeout.
	for deadline := time.Now().Add(o.BusyTimeout); ; {
		err := s.migrate(ctx)
		if err == nil {
			break
		}
		if !isBusy(err) || time.Now().After(deadline) || ctx.Err() != nil {
			s.Close()
			if sqliteCode(err) == sqliteNotADB {
				return nil, fmt.Errorf("sqlite: open %s: not a SQLite database, or a damaged one: %w", path, err)
			}
			return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
	}
	for _, p := range []struct {
		st  **sql.Stmt
		sql string
	}{
		{&s.stClaimIDs, claimUpdSQL + `(` + claimIDsSQL + `) RETURNING ` + jobCols},
		{&s.stClaimOpen, claimUpdSQL + `(` + claimOpenSQL + `) RETURNING ` + jobCols},
		{&s.stClaimOpenIDs, claimUpdSQL + `(` + claimOpenIDsSQL + `) RETURNING ` + jobCols},
		{&s.stAttemptIns, `INSERT INTO attempts (job_rid, number, worker_id, started_ns, policy_sha256) VALUES (?, ?, ?, ?, ?)`},
		{&s.stJobIns, insertJobsSQL(insertChunk)},
		{&s.stJobIns1, insertJobsSQL(1)},
	} {
		if *p.st, err = s.w.PrepareContext(ctx, p.sql); err != nil {
			s.Close()
			return nil, fmt.Errorf("sqlite: prepare: %w", err)
		}
	}
	s.stmts = make(map[string]*sql.Stmt, len(hotSQL))
	for _, q := range hotSQL {
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("sqlite: prepare: %w", err)
		}
		s.stmts[q] = st
	}
	return s, nil
}

func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return err
	}
	if v > SchemaVersion {
		return fmt.Errorf("schema version %d is newer than this paddock (%d)", v, SchemaVersion)
	}
	if v > 0 && v < 3 {
		// Version 3 replaced the index on state with partial ones.
		if _, err := tx.ExecContext(ctx, `DROP INDEX IF EXISTS jobs_state; DROP INDEX IF EXISTS jobs_finished`); err != nil {
			return err
		}
	}
	if v > 0 && v < 4 {
		// Version 4 records each attempt's policy digest.
		var has int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('attempts') WHERE name = 'policy_sha256'`).Scan(&has); err != nil {
			return err
		}
		if has == 0 {
			if _, err := tx.ExecContext(ctx, `ALTER TABLE attempts ADD COLUMN policy_sha256 TEXT NOT NULL DEFAULT ''`); err != nil {
				return err
			}
		}
	}
	if v > 0 && v < 5 {
		// Version 5 keeps each job's group and newest start in columns,
		// and adds group_name to the claim's covering index.
		for col, def := range map[string]string{"group_name": `TEXT NOT NULL DEFAULT ''`, "started_ns": `INTEGER NOT NULL DEFAULT 0`} {
			var has int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('jobs') WHERE name = ?`, col).Scan(&has); err != nil {
				return err
			}
			if has == 0 {
				if _, err := tx.ExecContext(ctx, `ALTER TABLE jobs ADD COLUMN `+col+` `+def); err != nil {
					return err
				}
			}
		}
		for _, q := range []string{
			`UPDATE jobs SET group_name = coalesce(json_extract(spec, '$.group'), '') WHERE json_extract(spec, '$.group') IS NOT NULL`,
			`UPDATE jobs SET started_ns = coalesce((SELECT max(started_ns) FROM attempts WHERE job_rid = jobs.rid), 0) WHERE attempts > 0`,
			`DROP INDEX IF EXISTS jobs_ready`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
	}
	if v > 0 && v < 6 {
		// Version 6 keeps jobs not yet due and jobs of limited or paused
		// groups out of the claim's index (scheduled, gated).
		for _, col := range []string{"scheduled", "gated"} {
			var has int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('jobs') WHERE name = ?`, col).Scan(&has); err != nil {
				return err
			}
			if has == 0 {
				if _, err := tx.ExecContext(ctx, `ALTER TABLE jobs ADD COLUMN `+col+` INTEGER NOT NULL DEFAULT 0`); err != nil {
					return err
				}
			}
		}
		qs := []string{`UPDATE jobs SET scheduled = 1 WHERE state = 'queued' AND not_before_ns > 0`, `DROP INDEX IF EXISTS jobs_ready`}
		if v == 5 { // job_groups came with version 5
			qs = append(qs, `UPDATE jobs SET gated = 1 WHERE group_name != '' AND state IN ('queued','running') AND group_name IN (SELECT name FROM job_groups)`)
		}
		for _, q := range qs {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
	}
	if _, err := tx.ExecContext(ctx, schema+scheduleSchema); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `PRAGMA user_version = `+strconv.Itoa(SchemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// Close closes the database. Safe to call more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.bigMu.Lock()
	big := s.stJobInsBig
	s.bigMu.Unlock()
	for _, st := range []*sql.Stmt{s.stClaimIDs, s.stClaimOpen, s.stClaimOpenIDs, s.stAttemptIns, s.stJobIns, s.stJobIns1, big} {
		if st != nil {
			st.Close()
		}
	}
	for _, st := range s.stmts {
		st.Close()
	}
	err := s.w.Close()
	if s.r != nil {
		err = errors.Join(err, s.r.Close())
	}
	return err
}

func (s *Store) now() int64 { return s.clock().UnixNano() }

// tx runs fn in an IMMEDIATE transaction.
func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	if s.closed.Load() {
		return queue.ErrClosed
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	return nil
}

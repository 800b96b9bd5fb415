package queue

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go)

	"paddock/jobspec"
)

// SQLiteOptions configure OpenSQLite. The zero value is ready to use.
type SQLiteOptions struct {
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

// BusyTimeoutDefault is SQLiteOptions.BusyTimeout's default.
const BusyTimeoutDefault = 10 * time.Second

// SchemaVersion is the schema the store writes (PRAGMA user_version).
const SchemaVersion = 3

// SQLiteStore is the embedded Store: one SQLite file in WAL mode, shared
// safely by many goroutines and many processes on one machine (not over a
// network file system). Every write runs in a BEGIN IMMEDIATE transaction,
// so claims are serialized by SQLite's write lock and no job is handed out
// twice. Commits use synchronous=NORMAL: a committed job survives kill -9
// of any process, though the last commits may be lost on power failure.
//
// Other processes can notice changes cheaply by watching the modification
// time of the "-wal" file beside the database (it is written on every
// commit), then calling JobClaim.
type SQLiteStore struct {
	w, r   *sql.DB // w: one connection, IMMEDIATE transactions; r: readers
	clock  func() time.Time
	rand   func() float64
	closed atomic.Bool

	stClaimReady, stClaimIDs, stAttemptIns, stJobIns, stJobIns1 *sql.Stmt
	bigMu                                                       sync.Mutex
	stJobInsBig                                                 *sql.Stmt            // prepared on first use (jobInsBig)
	stmts                                                       map[string]*sql.Stmt // hotSQL text -> statement on w (see cachedTx); read-only after open
}

var _ Store = (*SQLiteStore)(nil)

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
	depends_on       TEXT NOT NULL DEFAULT ''
);
-- Ready jobs in claim order; not_before_ns makes the index covering.
CREATE INDEX IF NOT EXISTS jobs_ready ON jobs(priority DESC, created_ns, rid, not_before_ns)
	WHERE state = 'queued' AND deps_pending = 0;
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
	PRIMARY KEY (job_rid, number)
) WITHOUT ROWID;
`

// OpenSQLite opens (creating when missing) the store in the file at path,
// a plain file path (not a URI). Several processes may open the same file at
// once. The caller must Close the store. It fails when the file's schema is
// newer than SchemaVersion, and, saying what is wrong ("queue: open PATH:
// ..."), when path is not a regular file or is a symlink to nothing, when
// its directory is missing, or when the file cannot be read and written or
// SQLite could not create the PATH-wal and PATH-shm files it keeps beside
// it (beside a symlink's target): a directory this process cannot write, a
// read-only mount.
//
// Memory: the writer connection keeps up to 16 MiB of page cache, each of
// up to 4 reader connections SQLite's default 2 MiB.
func OpenSQLite(ctx context.Context, path string, o SQLiteOptions) (*SQLiteStore, error) {
	if path == "" || strings.ContainsAny(path, "?\x00") || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("queue: invalid database path %q: expected a file path without '?', NUL or a file: prefix", path)
	}
	if err := checkDatabasePath(path); err != nil {
		return nil, err
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = BusyTimeoutDefault
	}
	s := &SQLiteStore{clock: o.Clock, rand: o.Rand}
	if s.clock == nil {
		s.clock = time.Now
	}
	if s.rand == nil {
		s.rand = rand.Float64
	}
	base := path + "?_pragma=busy_timeout(" + strconv.FormatInt(o.BusyTimeout.Milliseconds(), 10) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=temp_store(MEMORY)"
	var err error
	if s.w, err = sql.Open("sqlite", base+"&_txlock=immediate&_pragma=cache_size(-16384)"); err != nil {
		return nil, fmt.Errorf("queue: open %s: %w", path, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxIdleTime(0)
	if s.r, err = sql.Open("sqlite", base+"&_pragma=query_only(1)"); err != nil {
		s.w.Close()
		return nil, fmt.Errorf("queue: open %s: %w", path, err)
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
				return nil, fmt.Errorf("queue: open %s: not a SQLite database, or a damaged one: %w", path, err)
			}
			return nil, fmt.Errorf("queue: open %s: %w", path, err)
		}
		time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
	}
	for _, p := range []struct {
		st  **sql.Stmt
		sql string
	}{
		{&s.stClaimReady, claimUpdSQL + `(` + claimSQL + `) RETURNING ` + jobCols},
		{&s.stClaimIDs, claimUpdSQL + `(` + claimIDsSQL + `) RETURNING ` + jobCols},
		{&s.stAttemptIns, `INSERT INTO attempts (job_rid, number, worker_id, started_ns) VALUES (?, ?, ?, ?)`},
		{&s.stJobIns, insertJobsSQL(insertChunk)},
		{&s.stJobIns1, insertJobsSQL(1)},
	} {
		if *p.st, err = s.w.PrepareContext(ctx, p.sql); err != nil {
			s.Close()
			return nil, fmt.Errorf("queue: prepare: %w", err)
		}
	}
	s.stmts = make(map[string]*sql.Stmt, len(hotSQL))
	for _, q := range hotSQL {
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("queue: prepare: %w", err)
		}
		s.stmts[q] = st
	}
	return s, nil
}

// isBusy reports whether err is SQLite's SQLITE_BUSY (5) or SQLITE_LOCKED (6).
func isBusy(err error) bool {
	c := sqliteCode(err)
	return c == 5 || c == 6
}

// sqliteNotADB is SQLITE_NOTADB: the file is not a database
// (https://sqlite.org/rescode.html#notadb).
const sqliteNotADB = 26

// sqliteCode returns the primary SQLite result code of err, or 0 when err
// carries none.
func sqliteCode(err error) int {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		return coded.Code() & 0xff // extended codes keep the primary in the low byte
	}
	return 0
}

// checkDatabasePath says plainly what SQLite would report as "unable to
// open database file (14)" or "attempt to write a readonly database": path
// is not a regular file (a directory, say), or a symlink to nothing; its
// directory does not exist or is not a directory; the file cannot be read
// and written; or SQLite could not create the -wal and -shm files it keeps
// beside the file (beside the symlink's target when path is a symlink)
// because that directory is not writable (a read-only mount, say). Each
// error reads "queue: open PATH: ..." and wraps the system's error where
// there is one (errors.Is(err, fs.ErrPermission) holds for EACCES).
func checkDatabasePath(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		kind := "not a regular file"
		switch t := fi.Mode().Type(); {
		case t&fs.ModeDir != 0:
			kind = "a directory"
		case t&fs.ModeNamedPipe != 0:
			kind = "a named pipe"
		case t&fs.ModeSocket != 0:
			kind = "a socket"
		case t&fs.ModeDevice != 0:
			kind = "a device"
		}
		return fmt.Errorf("queue: open %s: it is %s; the queue database must be a file", path, kind)
	case err == nil:
		if not, err := readWrite(path); err != nil {
			return fmt.Errorf("queue: open %s: it is not %s: %w", path, not, err)
		}
		// SQLite keeps -wal and -shm beside the file a symlink names.
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return fmt.Errorf("queue: open %s: %w", path, err)
		}
		return checkDatabaseDir(path, real, false)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		if target, err := os.Readlink(path); err == nil {
			// SQLite would create the target when its directory exists;
			// a dangling link is more likely a mistake (a disk not
			// mounted), and a new empty queue there would hide the jobs.
			return fmt.Errorf("queue: open %s: it is a symlink to %s, which does not exist", path, target)
		}
		dir := filepath.Dir(path)
		if di, err := os.Stat(dir); err != nil {
			return fmt.Errorf("queue: open %s: its directory: %w", path, err)
		} else if !di.IsDir() {
			return fmt.Errorf("queue: open %s: %s is not a directory", path, dir)
		}
		return checkDatabaseDir(path, path, true)
	default:
		return fmt.Errorf("queue: open %s: %w", path, err) // "stat PATH: permission denied", a symlink loop
	}
}

// checkDatabaseDir checks that SQLite can create what it needs beside real,
// the database file path (symlinks resolved) opened as path: real itself
// when missing, and real-wal and real-shm; or, when these exist, that they
// are writable.
func checkDatabaseDir(path, real string, missing bool) error {
	var create []string
	if missing {
		create = append(create, real)
	}
	for _, p := range []string{real + "-wal", real + "-shm"} {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			create = append(create, p)
		} else if not, err := readWrite(p); err != nil {
			return fmt.Errorf("queue: open %s: %s is not %s: %w", path, p, not, err)
		}
	}
	if len(create) == 0 {
		return nil
	}
	dir := filepath.Dir(real)
	if err := unix.Access(dir, unix.W_OK); err != nil {
		list := strings.Join(create[:len(create)-1], ", ")
		if list != "" {
			list += " and "
		}
		list += create[len(create)-1]
		return fmt.Errorf("queue: open %s: directory %s is not writable: %w; the queue creates %s there", path, dir, err, list)
	}
	return nil
}

// readWrite checks that this process may read and write the file at p. On
// failure it says which ("readable" or "writable") and returns the
// system's error (EACCES, EROFS).
func readWrite(p string) (not string, err error) {
	if err := unix.Access(p, unix.R_OK); err != nil {
		return "readable", err
	}
	if err := unix.Access(p, unix.W_OK); err != nil {
		return "writable", err
	}
	return "", nil
}

func (s *SQLiteStore) migrate(ctx context.Context) error {
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
	if _, err := tx.ExecContext(ctx, schema+scheduleSchema); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `PRAGMA user_version = `+strconv.Itoa(SchemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// Close closes the database. Safe to call more than once.
func (s *SQLiteStore) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.bigMu.Lock()
	big := s.stJobInsBig
	s.bigMu.Unlock()
	for _, st := range []*sql.Stmt{s.stClaimReady, s.stClaimIDs, s.stAttemptIns, s.stJobIns, s.stJobIns1, big} {
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

func (s *SQLiteStore) now() int64 { return s.clock().UnixNano() }

// tx runs fn in an IMMEDIATE transaction.
func (s *SQLiteStore) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("queue: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("queue: commit: %w", err)
	}
	return nil
}

// Hot statements (TestQueryPlans checks their plans use indexes).
const (
	jobByIDSQL      = `SELECT ` + jobCols + ` FROM jobs WHERE id = ?`
	jobByRidSQL     = `SELECT ` + jobCols + ` FROM jobs WHERE rid = ?`
	attemptsSQL     = `SELECT number, worker_id, started_ns, ended_ns, outcome, exit_code, signal, reason, argv, trail, stdout_path, stderr_path FROM attempts WHERE job_rid = ? ORDER BY number`
	sourceSQL       = `SELECT text FROM sources WHERE id = ?`
	closeAttemptSQL = `UPDATE attempts SET ended_ns = ?, outcome = ?, exit_code = ?, signal = ?, reason = ?, argv = ?, trail = ?, stdout_path = ?, stderr_path = ? WHERE job_rid = ? AND number = ?`
	setStateSQL     = `UPDATE jobs SET state = ?, reason = ?, not_before_ns = ?, finished_ns = ?, updated_ns = ?, lease_owner = '', lease_expires_ns = 0, cancel_requested = 0 WHERE rid = ?`

	// claimUpdSQL takes the lease of the jobs whose rid is in a subquery
	// (claimSQL or claimIDsSQL): selecting and updating is one statement.
	claimUpdSQL  = `UPDATE jobs SET state = 'running', attempts = attempts + 1, lease_owner = ?, lease_expires_ns = ?, updated_ns = ?, cancel_requested = 0 WHERE rid IN `
	claimSQL     = `SELECT rid FROM jobs INDEXED BY jobs_ready WHERE state = 'queued' AND deps_pending = 0 AND not_before_ns <= ? ORDER BY priority DESC, created_ns, rid LIMIT ?`
	claimIDsSQL  = `SELECT j.rid FROM json_each(?) AS w CROSS JOIN jobs AS j ON j.id = w.value WHERE j.state = 'queued' AND j.deps_pending = 0 AND j.not_before_ns <= ? ORDER BY j.priority DESC, j.created_ns, j.rid LIMIT ?`
	heldNamesSQL = `SELECT j.name, j.id, j.state FROM json_each(?) AS n CROSS JOIN jobs AS j ON j.name = n.value WHERE j.name != '' AND j.state IN ('queued','running')`
	failSQL      = `UPDATE jobs SET state = 'failed', reason = ?, finished_ns = ?, updated_ns = ?
			WHERE state = 'queued' AND rid IN (SELECT job_rid FROM deps WHERE dep_rid = ?) RETURNING rid, id, name`
	releaseSQL = `UPDATE jobs SET deps_pending = deps_pending - 1, updated_ns = ?
		WHERE state = 'queued' AND deps_pending > 0 AND rid IN (SELECT job_rid FROM deps WHERE dep_rid = ?)`
	retryDepsSQL   = `SELECT j.id, j.name, j.state FROM deps d JOIN jobs j ON j.rid = d.dep_rid WHERE d.job_rid = ? AND j.state != 'succeeded'`
	pruneInsertSQL = `INSERT INTO temp.prune ` + pruneSelectSQL
	// countsSQL reads only indexes: jobs_ready and jobs_blocked hold every
	// queued job, jobs_lease every running one, jobs_finished2 the rest.
	countsSQL = `SELECT 'queued', (SELECT count(*) FROM jobs INDEXED BY jobs_ready WHERE state = 'queued' AND deps_pending = 0) +
			(SELECT count(*) FROM jobs INDEXED BY jobs_blocked WHERE state = 'queued' AND deps_pending > 0)
		UNION ALL SELECT 'running', count(*) FROM jobs INDEXED BY jobs_lease WHERE state = 'running'
		UNION ALL SELECT state, count(*) FROM jobs INDEXED BY jobs_finished2 WHERE finished_ns > 0 GROUP BY state`
	pruneSelectSQL = `SELECT rid FROM jobs WHERE finished_ns > 0 AND finished_ns <= ?`
)

// hotSQL are prepared once when the store opens and used by [cachedTx].
var hotSQL = []string{jobByIDSQL, jobByRidSQL, attemptsSQL, sourceSQL, closeAttemptSQL, setStateSQL, failSQL, releaseSQL}

const jobCols = `rid, id, name, state, spec, source_id, reason, created_ns, updated_ns, finished_ns, not_before_ns, deps_pending, attempts, max_attempts, lease_owner, lease_expires_ns, cancel_requested, depends_on, source_path`

type jobRow struct {
	Job
	rid, sourceID int64
}

type scanner interface{ Scan(...any) error }

func scanJob(sc scanner) (jobRow, error) {
	var (
		r                                          jobRow
		spec, deps                                 string
		state                                      string
		created, updated, finished, notBefore, exp int64
		cancel                                     int
	)
	err := sc.Scan(&r.rid, &r.ID, &r.Name, &state, &spec, &r.sourceID, &r.Reason, &created, &updated, &finished, &notBefore,
		&r.DepsPending, &r.AttemptCount, &r.MaxAttempts, &r.LeaseOwner, &exp, &cancel, &deps, &r.SourcePath)
	if err != nil {
		return r, err
	}
	r.State = JobState(state)
	if err := json.Unmarshal([]byte(spec), &r.Spec); err != nil {
		return r, fmt.Errorf("queue: job %s: corrupt spec: %w", r.ID, err)
	}
	if deps != "" {
		r.DependsOn = strings.Split(deps, " ")
	}
	r.CreatedAt, r.UpdatedAt, r.FinishedAt, r.NotBefore, r.LeaseExpiresAt = ts(created), ts(updated), ts(finished), ts(notBefore), ts(exp)
	r.CancelRequested = cancel != 0
	return r, nil
}

func ts(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

func nsOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

type querier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// execQuerier is a querier that also writes: a *sql.Tx, or a [cachedTx].
type execQuerier interface {
	querier
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

// cachedTx runs a transaction's statements through the statements of
// hotSQL, prepared once on the writer connection when the store opens, so
// the per-job paths (recording an attempt, its dependents, the reload) do
// not parse their SQL on every call. Any other SQL runs on the plain
// transaction. (Preparing lazily would need a second writer connection
// while the transaction holds the only one.)
type cachedTx struct {
	s  *SQLiteStore
	tx *sql.Tx
}

// cached wraps tx.
func (s *SQLiteStore) cached(tx *sql.Tx) cachedTx { return cachedTx{s, tx} }

func (c cachedTx) stmt(ctx context.Context, q string) *sql.Stmt {
	if st, ok := c.s.stmts[q]; ok {
		return c.tx.StmtContext(ctx, st)
	}
	return nil
}

func (c cachedTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := c.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.tx.QueryRowContext(ctx, q, args...)
}

func (c cachedTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := c.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return c.tx.QueryContext(ctx, q, args...)
}

func (c cachedTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := c.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return c.tx.ExecContext(ctx, q, args...)
}

// resolve finds a job by id, or by name (the newest with that name).
func resolve(ctx context.Context, q querier, ref string) (jobRow, error) {
	if ref == "" {
		return jobRow{}, fmt.Errorf("%w: empty id or name", ErrNotFound)
	}
	if jobspec.LooksLikeID(ref) {
		r, err := scanJob(q.QueryRowContext(ctx, jobByIDSQL, ref))
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return r, fmt.Errorf("queue: get %s: %w", ref, err)
		}
	}
	r, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE name = ? AND name != '' ORDER BY created_ns DESC, rid DESC LIMIT 1`, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w: no job with id or name %q", ErrNotFound, ref)
	}
	if err != nil {
		return r, fmt.Errorf("queue: get %s: %w", ref, err)
	}
	return r, nil
}

func loadAttempts(ctx context.Context, q querier, rid int64) ([]Attempt, error) {
	rows, err := q.QueryContext(ctx, attemptsSQL, rid)
	if err != nil {
		return nil, fmt.Errorf("queue: attempts: %w", err)
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		var (
			a              Attempt
			started, ended int64
			exit           sql.NullInt64
			argv, trail    string
		)
		if err := rows.Scan(&a.Number, &a.WorkerID, &started, &ended, &a.Outcome, &exit, &a.Signal, &a.Reason, &argv, &trail, &a.StdoutPath, &a.StderrPath); err != nil {
			return nil, fmt.Errorf("queue: attempts: %w", err)
		}
		a.StartedAt, a.EndedAt = ts(started), ts(ended)
		if exit.Valid {
			c := int(exit.Int64)
			a.ExitCode = &c
		}
		if argv != "" {
			_ = json.Unmarshal([]byte(argv), &a.ConfinedArgv)
		}
		if trail != "" {
			a.Trail = json.RawMessage(trail)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

func (s *SQLiteStore) fill(ctx context.Context, q querier, r *jobRow, attempts, source bool) error {
	if attempts {
		a, err := loadAttempts(ctx, q, r.rid)
		if err != nil {
			return err
		}
		r.Attempts = a
	}
	if source {
		err := q.QueryRowContext(ctx, sourceSQL, r.sourceID).Scan(&r.Source)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("queue: source: %w", err)
		}
	}
	return nil
}

// JobEnqueue implements Store: JobEnqueueAll of one batch.
func (s *SQLiteStore) JobEnqueue(ctx context.Context, p *JobEnqueueParams) ([]Job, error) {
	jobs, err := s.JobEnqueueAll(ctx, []*JobEnqueueParams{p})
	if err != nil {
		return nil, err
	}
	return jobs[0], nil
}

// JobEnqueueAll implements Store. Names in Spec.After resolve first to a
// job of the same batch, then to a stored job or one of an earlier batch
// (by id, or the newest job with that name); a reference to nothing
// refuses the whole call. A dependency that already succeeded counts as
// met; one that already failed, was denied or was canceled makes the new
// job fail at once (with its dependents).
func (s *SQLiteStore) JobEnqueueAll(ctx context.Context, ps []*JobEnqueueParams) ([][]Job, error) {
	batches, err := PlanEnqueue(ps)
	if err != nil {
		return nil, err
	}
	specJSON := make([][][]byte, len(batches))
	big := false
	for i, b := range batches {
		if specJSON[i], err = encodeSpecs(b.Jobs.Specs); err != nil {
			return nil, err
		}
		big = big || len(b.Jobs.Specs) >= insertChunkBig
	}
	now := s.now()
	var bigIns *sql.Stmt
	if big {
		// Prepared before the transaction takes the only write connection.
		if bigIns, err = s.jobInsBig(ctx); err != nil {
			return nil, fmt.Errorf("queue: enqueue: %w", err)
		}
	}
	out := make([][]Job, len(batches))
	err = s.tx(ctx, func(tx *sql.Tx) error {
		for i, b := range batches {
			jobs, err := s.enqueueTx(ctx, tx, b, specJSON[i], bigIns, now)
			if err != nil {
				return err
			}
			out[i] = jobs
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// enqueueTx stores batch b, whose specs encode to specJSON, in tx and
// returns its jobs (b.Schedules goes in as schedules).
func (s *SQLiteStore) enqueueTx(ctx context.Context, tx *sql.Tx, b EnqueueBatch, specJSON [][]byte, bigIns *sql.Stmt, now int64) ([]Job, error) {
	p := b.Jobs
	jobs := make([]Job, len(p.Specs))
	if len(b.Schedules.Specs) > 0 {
		if _, err := s.scheduleUpsertTx(ctx, tx, b.Schedules, now); err != nil {
			return nil, err
		}
	}
	if len(p.Specs) == 0 {
		return jobs, nil
	}
	deps, err := b.PlanDeps(EnqueueLookup{
		Held: func(names []string) (map[string]StoredJob, error) { return heldNames(ctx, tx, names) },
		Resolve: func(ref string) (StoredJob, bool, error) {
			r, err := resolve(ctx, tx, ref)
			if errors.Is(err, ErrNotFound) {
				return StoredJob{}, false, nil
			}
			return StoredJob{Row: r.rid, ID: r.ID, Name: r.Name, State: r.State}, err == nil, err
		},
	})
	if err != nil {
		return nil, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO sources (path, text, jobs) VALUES (?, ?, ?)`, p.SourcePath, p.Source, len(p.Specs))
	if err != nil {
		return nil, fmt.Errorf("queue: enqueue: %w", err)
	}
	srcID, _ := res.LastInsertId()
	// Row ids are assigned here (we hold the write lock) so that
	// dependencies can refer to them and rows go in chunks.
	var base int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(rid), 0) FROM jobs`).Scan(&base); err != nil {
		return nil, fmt.Errorf("queue: enqueue: %w", err)
	}
	rids := make([]int64, len(p.Specs))
	ids := make([]string, len(p.Specs))
	for i := range p.Specs {
		ids[i] = NewID(ts(now))
		rids[i] = base + 1 + int64(i)
	}
	args := make([]any, 0, len(p.Specs)*insertCols)
	for i, sp := range p.Specs {
		pending, dep := deps[i].Pending(), deps[i].IDs(ids)
		args = append(args, rids[i], ids[i], sp.Name, sp.Priority, now, now, pending, sp.Retries+1, specJSON[i], srcID, p.SourcePath, strings.Join(dep, " "))
		jobs[i] = Job{ID: ids[i], Name: sp.Name, State: StateQueued, Spec: sp, Source: p.Source, SourcePath: p.SourcePath,
			MaxAttempts: sp.Retries + 1, CreatedAt: ts(now), UpdatedAt: ts(now), DepsPending: pending, DependsOn: dep}
	}
	for len(args) > 0 {
		n := len(args) / insertCols
		var err error
		switch {
		case n >= insertChunkBig:
			n = insertChunkBig
			_, err = tx.StmtContext(ctx, bigIns).ExecContext(ctx, args[:n*insertCols]...)
		case n >= insertChunk:
			n = insertChunk
			_, err = tx.StmtContext(ctx, s.stJobIns).ExecContext(ctx, args[:n*insertCols]...)
		case n == 1:
			_, err = tx.StmtContext(ctx, s.stJobIns1).ExecContext(ctx, args...)
		default:
			_, err = tx.ExecContext(ctx, insertJobsSQL(n), args...)
		}
		if err != nil {
			return nil, fmt.Errorf("queue: enqueue: %w", err)
		}
		args = args[n*insertCols:]
	}
	var badDeps []StoredJob
	for i := range p.Specs {
		for _, j := range deps[i].InBatch {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO deps (dep_rid, job_rid) VALUES (?, ?)`, rids[j], rids[i]); err != nil {
				return nil, fmt.Errorf("queue: enqueue: %w", err)
			}
		}
		for _, e := range deps[i].Stored {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO deps (dep_rid, job_rid) VALUES (?, ?)`, e.Row, rids[i]); err != nil {
				return nil, fmt.Errorf("queue: enqueue: %w", err)
			}
			if FailsDependents(e.State) {
				badDeps = append(badDeps, e)
			}
		}
	}
	for _, e := range badDeps {
		if err := failDependents(ctx, tx, e.Row, JobLabel(e.ID, e.Name), e.State, now); err != nil {
			return nil, err
		}
	}
	if len(badDeps) > 0 { // refresh the states we report
		for i := range jobs {
			var state, reason string
			var fin int64
			if err := tx.QueryRowContext(ctx, `SELECT state, reason, finished_ns FROM jobs WHERE rid = ?`, rids[i]).Scan(&state, &reason, &fin); err != nil {
				return nil, fmt.Errorf("queue: enqueue: %w", err)
			}
			jobs[i].State, jobs[i].Reason, jobs[i].FinishedAt = JobState(state), reason, ts(fin)
		}
	}
	return jobs, nil
}

// encodeSpecs returns the JSON of each spec, in order. Large batches are
// encoded by two goroutines (a 10,000-job batch takes about 12 ms on one
// core here).
func encodeSpecs(specs []jobspec.Spec) ([][]byte, error) {
	out := make([][]byte, len(specs))
	encode := func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			b, err := json.Marshal(&specs[i])
			if err != nil {
				return fmt.Errorf("queue: encode spec %d: %w", i+1, err)
			}
			out[i] = b
		}
		return nil
	}
	if len(specs) < 512 {
		return out, encode(0, len(specs))
	}
	half := len(specs) / 2
	errc := make(chan error, 1)
	go func() { errc <- encode(half, len(specs)) }()
	err := encode(0, half)
	if err2 := <-errc; err == nil {
		err = err2
	}
	return out, err
}

// Rows per INSERT statement. Each statement of a multi-row INSERT keeps a
// statement journal of the pages it changes that existed before it; with
// 1,024 rows per statement instead of 64, that copying all but disappears
// (a 10,000-job enqueue spent 13% of its CPU there). The big statement is
// prepared on first use: preparing its 12,288 parameters costs every
// process that opens the store otherwise.
const (
	insertChunkBig = 1024
	insertChunk    = 64
	insertCols     = 12
)

// jobInsBig returns the prepared 1,024-row INSERT, preparing it on first
// use. Safe for concurrent use; never call it inside a write transaction
// (the writer pool has one connection, which the transaction holds).
func (s *SQLiteStore) jobInsBig(ctx context.Context) (*sql.Stmt, error) {
	s.bigMu.Lock()
	defer s.bigMu.Unlock()
	if s.stJobInsBig == nil {
		st, err := s.w.PrepareContext(ctx, insertJobsSQL(insertChunkBig))
		if err != nil {
			return nil, err
		}
		s.stJobInsBig = st
	}
	return s.stJobInsBig, nil
}

func insertJobsSQL(rows int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO jobs (rid, id, name, priority, created_ns, updated_ns, deps_pending, max_attempts, spec, source_id, source_path, depends_on, state) VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`(?,?,?,?,?,?,?,?,?,?,?,?,'queued')`)
	}
	return b.String()
}

// heldNames returns, for each name held by a queued or running job, that
// job.
func heldNames(ctx context.Context, tx *sql.Tx, names []string) (map[string]StoredJob, error) {
	b, _ := json.Marshal(names)
	rows, err := tx.QueryContext(ctx, heldNamesSQL, string(b))
	if err != nil {
		return nil, fmt.Errorf("queue: enqueue: %w", err)
	}
	defer rows.Close()
	held := map[string]StoredJob{}
	for rows.Next() {
		var j StoredJob
		var st string
		if err := rows.Scan(&j.Name, &j.ID, &st); err != nil {
			return nil, fmt.Errorf("queue: enqueue: %w", err)
		}
		j.State = JobState(st)
		held[j.Name] = j
	}
	return held, rows.Err()
}

// failDependents fails, transitively, every queued job waiting on rid.
func failDependents(ctx context.Context, tx execQuerier, rid int64, label string, state JobState, now int64) error {
	type item struct {
		rid   int64
		label string
		how   string
	}
	root := label + " " + string(state)
	work := []item{{rid, label, string(state)}}
	for len(work) > 0 {
		it := work[len(work)-1]
		work = work[:len(work)-1]
		because := ""
		if it.rid != rid {
			because = root
		}
		reason := DependencyFailedReason(it.label, it.how, because)
		rows, err := tx.QueryContext(ctx, failSQL, reason, now, now, it.rid)
		if err != nil {
			return fmt.Errorf("queue: fail dependents: %w", err)
		}
		for rows.Next() {
			var n item
			var id, name string
			if err := rows.Scan(&n.rid, &id, &name); err != nil {
				rows.Close()
				return fmt.Errorf("queue: fail dependents: %w", err)
			}
			n.label = JobLabel(id, name)
			n.how = "failed"
			work = append(work, n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("queue: fail dependents: %w", err)
		}
	}
	return nil
}

// releaseDependents counts a success towards every job waiting on rid.
func releaseDependents(ctx context.Context, tx execQuerier, rid, now int64) error {
	_, err := tx.ExecContext(ctx, releaseSQL, now, rid)
	if err != nil {
		return fmt.Errorf("queue: release dependents: %w", err)
	}
	return nil
}

// JobClaim implements Store.
func (s *SQLiteStore) JobClaim(ctx context.Context, p *JobClaimParams) ([]Job, error) {
	c, err := p.WithDefaults()
	if err != nil {
		return nil, err
	}
	p, limit, lease := &c, c.Limit, c.Lease
	var out []Job
	err = s.tx(ctx, func(tx *sql.Tx) error {
		now := s.now()
		var rows *sql.Rows
		var err error
		if len(p.JobIDs) > 0 {
			ids, jerr := json.Marshal(p.JobIDs)
			if jerr != nil {
				return fmt.Errorf("queue: claim: %w", jerr)
			}
			rows, err = tx.StmtContext(ctx, s.stClaimIDs).QueryContext(ctx, p.WorkerID, now+int64(lease), now, string(ids), now, limit)
		} else {
			rows, err = tx.StmtContext(ctx, s.stClaimReady).QueryContext(ctx, p.WorkerID, now+int64(lease), now, now, limit)
		}
		if err != nil {
			return fmt.Errorf("queue: claim: %w", err)
		}
		var claimed []jobRow
		for rows.Next() {
			r, err := scanJob(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("queue: claim: %w", err)
			}
			claimed = append(claimed, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("queue: claim: %w", err)
		}
		// RETURNING has no order: hand the jobs out in claim order.
		slices.SortFunc(claimed, func(a, b jobRow) int {
			return cmp.Or(cmp.Compare(b.Spec.Priority, a.Spec.Priority), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.rid, b.rid))
		})
		ins := tx.StmtContext(ctx, s.stAttemptIns)
		for _, r := range claimed {
			if _, err := ins.ExecContext(ctx, r.rid, r.AttemptCount, p.WorkerID, now); err != nil {
				return fmt.Errorf("queue: claim: %w", err)
			}
			out = append(out, r.Job)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LeaseExtend implements Store.
func (s *SQLiteStore) LeaseExtend(ctx context.Context, p *LeaseExtendParams) ([]string, error) {
	c, err := p.WithDefaults()
	if err != nil {
		return nil, err
	}
	if len(c.JobIDs) == 0 {
		return nil, nil
	}
	p, lease := &c, c.Lease
	var stop []string
	err = s.tx(ctx, func(tx *sql.Tx) error {
		stop = stop[:0]
		now := s.now()
		for _, id := range p.JobIDs {
			var cancel int
			err := tx.QueryRowContext(ctx, `UPDATE jobs SET lease_expires_ns = ? WHERE id = ? AND state = 'running' AND lease_owner = ? RETURNING cancel_requested`,
				now+int64(lease), id, p.WorkerID).Scan(&cancel)
			if errors.Is(err, sql.ErrNoRows) || cancel != 0 {
				stop = append(stop, id)
				continue
			}
			if err != nil {
				return fmt.Errorf("queue: lease extend: %w", err)
			}
		}
		return nil
	})
	return stop, err
}

// AttemptFinish implements Store.
func (s *SQLiteStore) AttemptFinish(ctx context.Context, p *AttemptFinishParams) (Job, error) {
	if err := p.Check(); err != nil {
		return Job{}, err
	}
	a := p.Attempt
	var out Job
	err := s.tx(ctx, func(stx *sql.Tx) error {
		tx := s.cached(stx)
		r, err := scanJob(tx.QueryRowContext(ctx, jobByIDSQL, p.JobID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s", ErrNotFound, p.JobID)
		}
		if err != nil {
			return fmt.Errorf("queue: attempt finish: %w", err)
		}
		if r.State != StateRunning || r.LeaseOwner != p.WorkerID {
			return fmt.Errorf("%w: job %s is %s (lease owner %q), not running for worker %q", ErrLeaseLost, r.ID, r.State, r.LeaseOwner, p.WorkerID)
		}
		now := s.now()
		ended := nsOf(a.EndedAt)
		if ended == 0 {
			ended = now
		}
		if err := s.closeAttempt(ctx, tx, r.rid, r.AttemptCount, ended, a); err != nil {
			return err
		}
		t := AttemptEnded(r.Job, a.Outcome, a.Reason, s.rand())
		next, reason, notBefore := t.State, t.Reason, int64(0)
		if t.Delay > 0 {
			notBefore = now + int64(t.Delay)
		}
		if err := s.setState(ctx, tx, r, next, reason, notBefore, now); err != nil {
			return err
		}
		// The row is what setStateSQL made of it: no need to read it back
		// (and decode its spec) again; only the attempts are loaded.
		r.State, r.Reason, r.NotBefore, r.UpdatedAt = next, reason, ts(notBefore), ts(now)
		if next.Finished() {
			r.FinishedAt = ts(now)
		}
		r.LeaseOwner, r.LeaseExpiresAt, r.CancelRequested = "", time.Time{}, false
		if err := s.fill(ctx, tx, &r, true, false); err != nil {
			return err
		}
		out = r.Job
		return nil
	})
	return out, err
}

func (s *SQLiteStore) closeAttempt(ctx context.Context, tx execQuerier, rid int64, number int, ended int64, a Attempt) error {
	var exit any
	if a.ExitCode != nil {
		exit = *a.ExitCode
	}
	argv := ""
	if a.ConfinedArgv != nil {
		b, _ := json.Marshal(a.ConfinedArgv)
		argv = string(b)
	}
	_, err := tx.ExecContext(ctx, closeAttemptSQL,
		ended, a.Outcome, exit, a.Signal, a.Reason, argv, string(a.Trail), a.StdoutPath, a.StderrPath, rid, number)
	if err != nil {
		return fmt.Errorf("queue: record attempt: %w", err)
	}
	return nil
}

func (s *SQLiteStore) setState(ctx context.Context, tx execQuerier, r jobRow, next JobState, reason string, notBefore, now int64) error {
	fin := int64(0)
	if next.Finished() {
		fin = now
	}
	_, err := tx.ExecContext(ctx, setStateSQL,
		string(next), reason, notBefore, fin, now, r.rid)
	if err != nil {
		return fmt.Errorf("queue: set state: %w", err)
	}
	switch next {
	case StateSucceeded:
		return releaseDependents(ctx, tx, r.rid, now)
	case StateFailed, StateDenied, StateCanceled:
		return failDependents(ctx, tx, r.rid, JobLabel(r.ID, r.Name), next, now)
	}
	return nil
}

// reload reads a job back after a write, with its attempts but not its
// Source (see Job.Source).
func (s *SQLiteStore) reload(ctx context.Context, q querier, rid int64) (Job, error) {
	r, err := scanJob(q.QueryRowContext(ctx, jobByRidSQL, rid))
	if err != nil {
		return Job{}, fmt.Errorf("queue: reload: %w", err)
	}
	if err := s.fill(ctx, q, &r, true, false); err != nil {
		return Job{}, err
	}
	return r.Job, nil
}

// JobCancel implements Store.
func (s *SQLiteStore) JobCancel(ctx context.Context, ref string) (Job, error) {
	var out Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		r, err := resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		now := s.now()
		effect, err := CancelOf(r.Job)
		if err != nil {
			out = r.Job
			return err
		}
		switch effect {
		case CancelNow:
			if err := s.setState(ctx, tx, r, StateCanceled, ReasonCanceledBeforeStart, 0, now); err != nil {
				return err
			}
		case CancelFlag:
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET cancel_requested = 1, reason = ?, updated_ns = ? WHERE rid = ?`, ReasonCancelRequested, now, r.rid); err != nil {
				return fmt.Errorf("queue: cancel: %w", err)
			}
		}
		out, err = s.reload(ctx, tx, r.rid)
		return err
	})
	return out, err
}

// JobRetry implements Store.
func (s *SQLiteStore) JobRetry(ctx context.Context, ref string) (Job, error) {
	var out Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		r, err := resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		if err := RetryCheck(r.Job); err != nil {
			return err
		}
		if r.Name != "" {
			var id, state string
			err := tx.QueryRowContext(ctx, `SELECT id, state FROM jobs WHERE name = ? AND state IN ('queued','running')`, r.Name).Scan(&id, &state)
			if err == nil {
				return NameHeldError(r.Name, JobState(state), id)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("queue: retry: %w", err)
			}
		}
		rows, err := tx.QueryContext(ctx, retryDepsSQL, r.rid)
		if err != nil {
			return fmt.Errorf("queue: retry: %w", err)
		}
		pending := 0
		var blocked error
		for rows.Next() {
			var id, name, state string
			if err := rows.Scan(&id, &name, &state); err != nil {
				rows.Close()
				return fmt.Errorf("queue: retry: %w", err)
			}
			if blocked == nil {
				blocked = RetryBlocked(r.Job, id, name, JobState(state))
			}
			pending++
		}
		rows.Close()
		if blocked != nil {
			return blocked
		}
		now := s.now()
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET state = 'queued', reason = ?, deps_pending = ?, max_attempts = attempts + ?, not_before_ns = 0, finished_ns = 0, updated_ns = ?, cancel_requested = 0 WHERE rid = ?`,
			ReasonRetryRequested, pending, r.Spec.Retries+1, now, r.rid)
		if err != nil {
			return fmt.Errorf("queue: retry: %w", err)
		}
		out, err = s.reload(ctx, tx, r.rid)
		return err
	})
	return out, err
}

// LeaseRecoverExpired implements Store.
func (s *SQLiteStore) LeaseRecoverExpired(ctx context.Context) ([]Job, error) {
	var out []Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		now := s.now()
		rows, err := tx.QueryContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE state = 'running' AND lease_expires_ns < ?`, now)
		if err != nil {
			return fmt.Errorf("queue: recover: %w", err)
		}
		var expired []jobRow
		for rows.Next() {
			r, err := scanJob(rows)
			if err != nil {
				rows.Close()
				return err
			}
			expired = append(expired, r)
		}
		rows.Close()
		for _, r := range expired {
			why := LeaseExpiredReason(r.LeaseOwner, r.LeaseExpiresAt)
			j, err := s.interrupt(ctx, tx, r, why, now, true)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		return nil
	})
	return out, err
}

// interrupt closes r's running attempt as interrupted and moves the job
// back to queued, or to failed (attempts spent) or canceled (cancel
// requested); it returns the job as it is now. With counted false (the
// job's own worker stopped it: LeaseRelease) the attempt does not count
// against retries: MaxAttempts is raised by one and the job is queued
// again even when it was its last attempt.
func (s *SQLiteStore) interrupt(ctx context.Context, tx *sql.Tx, r jobRow, why string, now int64, counted bool) (Job, error) {
	if err := s.closeAttempt(ctx, tx, r.rid, r.AttemptCount, now, Attempt{Outcome: OutcomeInterrupted, Reason: why}); err != nil {
		return Job{}, err
	}
	t := AttemptInterrupted(r.Job, why, counted)
	if t.RaiseMaxAttempts {
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET max_attempts = max_attempts + 1 WHERE rid = ?`, r.rid); err != nil {
			return Job{}, fmt.Errorf("queue: interrupt: %w", err)
		}
	}
	if err := s.setState(ctx, tx, r, t.State, t.Reason, 0, now); err != nil {
		return Job{}, err
	}
	return s.reload(ctx, tx, r.rid)
}

// LeaseRelease implements Store.
func (s *SQLiteStore) LeaseRelease(ctx context.Context, p *LeaseReleaseParams) ([]Job, error) {
	c, err := p.WithDefaults()
	if err != nil {
		return nil, err
	}
	p, why := &c, c.Reason
	var out []Job
	err = s.tx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		now := s.now()
		for _, id := range p.JobIDs {
			r, err := scanJob(tx.QueryRowContext(ctx, jobByIDSQL, id))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("queue: lease release: %w", err)
			}
			if r.State != StateRunning || r.LeaseOwner != p.WorkerID {
				continue
			}
			j, err := s.interrupt(ctx, tx, r, why, now, false)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		return nil
	})
	return out, err
}

// JobGet implements Store.
func (s *SQLiteStore) JobGet(ctx context.Context, ref string) (Job, error) {
	if s.closed.Load() {
		return Job{}, ErrClosed
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Job{}, fmt.Errorf("queue: get: %w", err)
	}
	defer tx.Rollback()
	r, err := resolve(ctx, tx, ref)
	if err != nil {
		return Job{}, err
	}
	if err := s.fill(ctx, tx, &r, true, true); err != nil {
		return Job{}, err
	}
	return r.Job, nil
}

// JobList implements Store.
func (s *SQLiteStore) JobList(ctx context.Context, p *JobListParams) ([]Job, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if p == nil {
		p = &JobListParams{}
	}
	var where []string
	var args []any
	if len(p.IDs) > 0 {
		// One JSON array argument, not one placeholder per id: the
		// statement's text stays the same whatever the number of ids.
		ids, err := json.Marshal(p.IDs)
		if err != nil {
			return nil, fmt.Errorf("queue: list: %w", err)
		}
		where = append(where, "id IN (SELECT value FROM json_each(?))")
		args = append(args, string(ids))
	}
	if len(p.States) > 0 {
		ph := make([]string, len(p.States))
		for i, st := range p.States {
			ph[i] = "?"
			args = append(args, string(st))
		}
		// With ids, a lookup of each id is the plan: the state must not
		// steer the planner to an index of every finished job.
		col := "state"
		if len(p.IDs) > 0 {
			col = "+state"
		}
		where = append(where, col+" IN ("+strings.Join(ph, ",")+")")
		if len(p.IDs) == 0 && !slices.ContainsFunc(p.States, func(st JobState) bool { return !st.Finished() }) {
			// Implied by a terminal state; lets the planner use jobs_finished2.
			where = append(where, "finished_ns > 0")
		}
	}
	if p.NameGlob != "" {
		where = append(where, "name GLOB ?")
		args = append(args, p.NameGlob)
	}
	if p.SourcePath != "" {
		where = append(where, "source_path = ?")
		args = append(args, p.SourcePath)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		where = append(where, "json_extract(spec, ?) IS ?")
		args = append(args, `$.labels."`+strings.ReplaceAll(k, `"`, `""`)+`"`, p.Labels[k])
	}
	q := `SELECT ` + jobCols + ` FROM jobs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_ns DESC, rid DESC"
	if p.Limit > 0 {
		q += " LIMIT " + strconv.Itoa(p.Limit)
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("queue: list: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("queue: list: %w", err)
	}
	var rs []jobRow
	for rows.Next() {
		r, err := scanJob(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		rs = append(rs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("queue: list: %w", err)
	}
	out := make([]Job, 0, len(rs))
	for i := range rs {
		if err := s.fill(ctx, tx, &rs[i], p.WithAttempts, p.WithSource); err != nil {
			return nil, err
		}
		out = append(out, rs[i].Job)
	}
	return out, nil
}

// JobCounts implements Store.
func (s *SQLiteStore) JobCounts(ctx context.Context) (map[JobState]int, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	rows, err := s.r.QueryContext(ctx, countsSQL)
	if err != nil {
		return nil, fmt.Errorf("queue: counts: %w", err)
	}
	defer rows.Close()
	out := map[JobState]int{}
	for _, st := range JobStates() {
		out[st] = 0
	}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("queue: counts: %w", err)
		}
		out[JobState(st)] = n
	}
	return out, rows.Err()
}

// JobPrune implements Store.
func (s *SQLiteStore) JobPrune(ctx context.Context, p *JobPruneParams) (int, error) {
	if p == nil || p.OlderThan < 0 {
		return 0, errors.New("queue: prune: OlderThan must be zero or more")
	}
	n := 0
	err := s.tx(ctx, func(tx *sql.Tx) error {
		cutoff := s.now() - int64(p.OlderThan)
		if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS prune (rid INTEGER PRIMARY KEY)`); err != nil {
			return fmt.Errorf("queue: prune: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM temp.prune`); err != nil {
			return fmt.Errorf("queue: prune: %w", err)
		}
		res, err := tx.ExecContext(ctx, pruneInsertSQL, cutoff)
		if err != nil {
			return fmt.Errorf("queue: prune: %w", err)
		}
		m, _ := res.RowsAffected()
		n = int(m)
		for _, q := range []string{
			`DELETE FROM attempts WHERE job_rid IN (SELECT rid FROM temp.prune)`,
			`DELETE FROM deps WHERE job_rid IN (SELECT rid FROM temp.prune)`,
			`DELETE FROM deps WHERE dep_rid IN (SELECT rid FROM temp.prune)`,
			`UPDATE sources SET jobs = jobs - (SELECT count(*) FROM temp.prune p JOIN jobs j ON j.rid = p.rid WHERE j.source_id = sources.id)
				WHERE id IN (SELECT j.source_id FROM temp.prune p JOIN jobs j ON j.rid = p.rid)`,
			`DELETE FROM sources WHERE jobs <= 0`,
			`DELETE FROM jobs WHERE rid IN (SELECT rid FROM temp.prune)`,
			`DELETE FROM temp.prune`,
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("queue: prune: %w", err)
			}
		}
		return pruneScheduleDecisions(ctx, tx, cutoff)
	})
	return n, err
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	neturl "net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"paddock/queue"
)

// Options configure Open. The zero value is ready to use.
type Options struct {
	// Clock, when set, replaces the database's clock: tests inject a fake
	// clock so that backoff and lease expiry need no sleeping. Leave it
	// nil in production: every host then judges leases, backoff and
	// schedules by the server's now(), never by its own (skewed) clock.
	Clock func() time.Time
	// Rand returns a jitter sample in [0,1) for Backoff. Defaults to
	// math/rand/v2.Float64.
	Rand func() float64
	// MaxConns caps the connections of the store's pool. Defaults to 4.
	MaxConns int32
	// RetryFor is how long a call keeps retrying, with backoff, while the
	// server cannot be reached (restarting, failing over). Defaults to
	// RetryForDefault; negative: no retry.
	RetryFor time.Duration
}

// RetryForDefault is Options.RetryFor's default: a restart or a
// fail-over of the server usually takes seconds.
const RetryForDefault = time.Minute

// Store is the PostgreSQL [queue.Store]: shared by workers on any number
// of hosts reaching one database. See the package documentation for its
// guarantees.
type Store struct {
	pool   *pgxpool.Pool
	clock  func() time.Time // nil: the database's now()
	rand   func() float64
	closed atomic.Bool
	// pollOnly: no NOTIFY, no LISTEN (PollOnlyParam).
	pollOnly bool
	retryFor time.Duration
	// foundVersion is the schema version Open found (0: an empty
	// database), before it migrated.
	foundVersion int
	outages      outages
}

// FoundVersion returns the schema version the database had when Open
// found it, before Open migrated it to SchemaVersion (0 for an empty
// database).
func (s *Store) FoundVersion() int { return s.foundVersion }

var _ queue.Store = (*Store)(nil)

// Open connects to the database at url (a postgres:// URL or a
// key=value connection string, as libpq takes; see
// https://www.postgresql.org/docs/current/libpq-connect.html), checks its
// schema version and creates or migrates the schema when it is older.
// It fails with [ErrSchemaNewer] when the database was migrated by a
// newer paddock. The caller must Close the store.
func Open(ctx context.Context, url string, o Options) (*Store, error) {
	s, err := connect(ctx, url, o)
	if err != nil {
		return nil, err
	}
	// A server that cannot be reached at start is said at once (a wrong
	// URL must not look like a hang); calls retry later outages.
	if err := s.pool.Ping(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("postgres: open %s: %w", Redact(url), err)
	}
	from, err := s.Migrate(ctx)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("postgres: open %s: %w", Redact(url), err)
	}
	s.foundVersion = from
	return s, nil
}

// connect opens the pool without touching the schema.
func connect(ctx context.Context, url string, o Options) (*Store, error) {
	conn, pollOnly, err := splitPollOnly(url)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %s: %w", Redact(url), err)
	}
	cfg.MaxConns = 4
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "paddock"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %s: %w", Redact(url), err)
	}
	s := &Store{pool: pool, clock: o.Clock, rand: o.Rand, pollOnly: pollOnly, retryFor: o.RetryFor}
	if s.retryFor == 0 {
		s.retryFor = RetryForDefault
	}
	if s.rand == nil {
		s.rand = rand.Float64
	}
	return s, nil
}

// Redact returns url with its password, if any, replaced by "xxxxx", for
// messages: the user@host form (postgres://user:secret@host/db) and the
// key=value form (password=secret).
func Redact(raw string) string {
	if u, err := neturl.Parse(raw); err == nil && u.Scheme != "" {
		if _, has := u.User.Password(); has {
			u.User = neturl.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	return passwordKV.ReplaceAllString(raw, "${1}xxxxx")
}

// passwordKV finds the value of password= in a key=value connection
// string, quoted or not.
var passwordKV = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// Close closes the pool. Safe to call more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.pool.Close()
	return nil
}

// txOptions pins every write transaction to READ COMMITTED, whatever the
// database's default_transaction_isolation: under SERIALIZABLE, claims
// that skip each other's locked rows would abort each other (40001).
var txOptions = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

// readOptions: a consistent snapshot for reads of several statements (a
// job and its attempts); read-only REPEATABLE READ never aborts.
var readOptions = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// maxTries bounds the retries of a transaction that hit a serialization
// failure, a deadlock or a unique violation from a concurrent twin.
const maxTries = 8

// retryable reports whether err is worth running the transaction again:
// 40001 serialization_failure, 40P01 deadlock_detected (PostgreSQL
// Appendix A, "Error Codes"), and 23505 unique_violation (a concurrent
// enqueue took the name or key first; the retry sees it and says so).
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", "23505":
			return true
		}
	}
	return false
}

// tx runs fn in a READ COMMITTED transaction, with now the transaction's
// time (the database's now(), or Options.Clock's), and runs it again on a
// retryable error. fn must be safe to run again: it must reset whatever
// it returns.
func (s *Store) tx(ctx context.Context, fn func(tx pgx.Tx, now time.Time) error) error {
	return s.txOpts(ctx, txOptions, true, fn)
}

// txClock is tx for the hot paths (claim, heartbeat) whose statements
// read the clock themselves (coalesce of [Store.nowArg] and now()): it
// saves the round trip that reads it.
func (s *Store) txClock(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.txOpts(ctx, txOptions, false, func(tx pgx.Tx, _ time.Time) error { return fn(tx) })
}

// read runs fn in a read-only snapshot.
func (s *Store) read(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.txOpts(ctx, readOptions, false, func(tx pgx.Tx, _ time.Time) error { return fn(tx) })
}

func (s *Store) txOpts(ctx context.Context, opts pgx.TxOptions, wantNow bool, fn func(tx pgx.Tx, now time.Time) error) error {
	return s.retry(ctx, func() (bool, error) { return false, s.txOnce(ctx, opts, wantNow, fn) })
}

// retry runs once until it succeeds or fails for good. A serialization
// failure, a deadlock or a racing twin's unique violation runs it again
// (at most maxTries times, after a short random backoff); so does a
// server that cannot be reached, with backoff, for up to
// Options.RetryFor, but only when once says that nothing was sent (a
// failed COMMIT, or a batch cut after it was sent, may have committed:
// errCommitUnknown). Past RetryFor the error wraps queue.ErrUnreachable.
// Tries that found the server unreachable, and the first success after
// them, are reported to the outage watchers.
func (s *Store) retry(ctx context.Context, once func() (sent bool, err error)) error {
	if s.closed.Load() {
		return queue.ErrClosed
	}
	start := time.Now()
	wait := 50 * time.Millisecond
	for try := 1; ; try++ {
		sent, err := once()
		switch {
		case err == nil:
			s.outageOver()
			return nil
		case ctx.Err() != nil || s.closed.Load():
			return err
		case retryable(err) && try < maxTries:
			time.Sleep(time.Duration(1+rand.IntN(4<<try)) * time.Millisecond)
		case connLost(err) && sent:
			return fmt.Errorf("%w: %w", errCommitUnknown, err)
		case connLost(err) && time.Since(start) < s.retryFor:
			// The server went away before this transaction could commit
			// (nothing of it was kept): run it again once it is back.
			s.outageRetry(err)
			time.Sleep(wait/2 + rand.N(wait/2))
			wait = min(2*wait, 2*time.Second)
		case connLost(err):
			return fmt.Errorf("%w (for %s): %w", queue.ErrUnreachable, time.Since(start).Round(time.Second), err)
		default:
			return err
		}
	}
}

// errCommitUnknown marks a commit whose connection failed: the server may
// have committed or not. It is never retried (an enqueue would be made
// twice); the callers' own checks settle it (a lost finish finds the job
// no longer running under its lease).
var errCommitUnknown = errors.New("postgres: connection lost during commit: it may or may not have been committed")

// connLost reports whether err says the connection to the server failed
// or the server is shutting down or starting (classes 08 and 57P0x of
// PostgreSQL Appendix A), rather than a refusal of the statement.
func connLost(err error) bool {
	if errors.Is(err, errCommitUnknown) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

func (s *Store) txOnce(ctx context.Context, opts pgx.TxOptions, wantNow bool, fn func(tx pgx.Tx, now time.Time) error) error {
	tx, err := s.pool.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var now time.Time
	if wantNow {
		if now, err = s.now(ctx, tx); err != nil {
			return err
		}
	}
	ntx := &notifyingTx{Tx: tx}
	if err := fn(ntx, now); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		if connLost(err) {
			return fmt.Errorf("%w: %w", errCommitUnknown, err)
		}
		return fmt.Errorf("postgres: commit: %w", err)
	}
	if ntx.notify {
		s.sendNotify(ctx)
	}
	return nil
}

// pipelined runs one statement (sql with args, whose rows scan reads),
// after the prelude's statements (settings, and writes the statement must
// see), in a READ
// COMMITTED transaction sent as one batch: BEGIN, the statements and
// COMMIT reach the server together, one round trip.
// It is retried as [Store.tx] retries: on a serialization failure or a
// deadlock, and, while the server cannot be reached, only when nothing
// was sent (a batch cut after it was sent may have committed).
func (s *Store) pipelined(ctx context.Context, prelude []batchStmt, scan func(pgx.Rows) error, sql string, args ...any) error {
	return s.retry(ctx, func() (bool, error) { return s.pipelineOnce(ctx, prelude, scan, sql, args...) })
}

// batchStmt is a statement of a pipelined batch, with its arguments.
type batchStmt struct {
	sql  string
	args []any
}

// pipelineOnce is one try of pipelined; sent is false when the batch
// never reached the server (no connection).
func (s *Store) pipelineOnce(ctx context.Context, prelude []batchStmt, scan func(pgx.Rows) error, sql string, args ...any) (sent bool, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	b := &pgx.Batch{}
	b.Queue(`BEGIN ISOLATION LEVEL READ COMMITTED`)
	for _, q := range prelude {
		b.Queue(q.sql, q.args...)
	}
	b.Queue(sql, args...)
	b.Queue(`COMMIT`)
	br := conn.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return !pgconn.SafeToRetry(err), err
	}
	for range prelude {
		if _, err := br.Exec(); err != nil {
			return true, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return true, err
	}
	err = scan(rows)
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return true, err
	}
	tag, err := br.Exec()
	if err != nil {
		return true, err
	}
	if tag.String() != "COMMIT" {
		return true, fmt.Errorf("postgres: the transaction was rolled back (%s)", tag)
	}
	return true, br.Close()
}

// now is the transaction's time: Options.Clock's, else the server's
// now() (the start of the transaction, the same for all its statements),
// in UTC, to the microsecond (the resolution of timestamptz).
func (s *Store) now(ctx context.Context, tx pgx.Tx) (time.Time, error) {
	if s.clock != nil {
		return s.clock().UTC().Truncate(time.Microsecond), nil
	}
	var t time.Time
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&t); err != nil {
		return t, fmt.Errorf("postgres: now: %w", err)
	}
	return t.UTC(), nil
}

// nowArg is the clock argument of the statements that run alone (a claim,
// a heartbeat): nil makes them use the server's now().
func (s *Store) nowArg() any {
	if s.clock == nil {
		return nil
	}
	return s.clock().UTC().Truncate(time.Microsecond)
}

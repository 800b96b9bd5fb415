package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"paddock/jobspec"
	"paddock/queue"
)

const jobCols = `rid, id, name, state, spec, source_id, reason, created_at, updated_at, finished_at, not_before, deps_pending, attempts, max_attempts, lease_owner, lease_expires, cancel_requested, depends_on, source_path, started_at`

// jobColsOf is jobCols qualified by table alias a.
func jobColsOf(a string) string {
	return a + `.rid, ` + a + `.id, ` + a + `.name, ` + a + `.state, ` + a + `.spec, ` + a + `.source_id, ` + a + `.reason, ` + a + `.created_at, ` + a + `.updated_at, ` +
		a + `.finished_at, ` + a + `.not_before, ` + a + `.deps_pending, ` + a + `.attempts, ` + a + `.max_attempts, ` + a + `.lease_owner, ` + a + `.lease_expires, ` +
		a + `.cancel_requested, ` + a + `.depends_on, ` + a + `.source_path, ` + a + `.started_at`
}

const attemptCols = `number, worker_id, started_at, ended_at, outcome, exit_code, signal, reason, argv, trail, stdout_path, stderr_path, policy_sha256`

type jobRow struct {
	queue.Job
	rid, sourceID int64
}

func scanJob(row pgx.Row) (jobRow, error) {
	var (
		r                                          jobRow
		spec                                       []byte
		state                                      string
		created, updated, finished, notBefore, exp pgtype.Timestamptz
		started                                    pgtype.Timestamptz
	)
	err := row.Scan(&r.rid, &r.ID, &r.Name, &state, &spec, &r.sourceID, &r.Reason, &created, &updated, &finished, &notBefore,
		&r.DepsPending, &r.AttemptCount, &r.MaxAttempts, &r.LeaseOwner, &exp, &r.CancelRequested, &r.DependsOn, &r.SourcePath, &started)
	if err != nil {
		return r, err
	}
	r.State = queue.JobState(state)
	if err := json.Unmarshal(spec, &r.Spec); err != nil {
		return r, fmt.Errorf("postgres: job %s: corrupt spec: %w", r.ID, err)
	}
	if len(r.DependsOn) == 0 {
		r.DependsOn = nil
	}
	r.CreatedAt, r.UpdatedAt, r.FinishedAt, r.NotBefore, r.LeaseExpiresAt, r.StartedAt = ts(created), ts(updated), ts(finished), ts(notBefore), ts(exp), ts(started)
	return r, nil
}

// ts converts a scanned timestamptz: NULL is the zero time; others are
// in UTC.
func ts(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// tz is the argument for a nullable timestamptz: NULL for the zero time.
func tz(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Truncate(time.Microsecond)
}

// resolve finds a job by id, or by name (the newest with that name).
// lock is "" or a row-locking clause (" FOR UPDATE", " FOR SHARE") for
// the writers that must see the job's state stay put until they commit.
func resolve(ctx context.Context, q pgx.Tx, ref, lock string) (jobRow, error) {
	if ref == "" {
		return jobRow{}, fmt.Errorf("%w: empty id or name", queue.ErrNotFound)
	}
	if jobspec.LooksLikeID(ref) {
		r, err := scanJob(q.QueryRow(ctx, `SELECT `+jobCols+` FROM jobs WHERE id = $1`+lock, ref))
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return r, fmt.Errorf("postgres: get %s: %w", ref, err)
		}
	}
	r, err := scanJob(q.QueryRow(ctx, `SELECT `+jobCols+` FROM jobs WHERE name = $1 AND name <> '' ORDER BY created_at DESC, rid DESC LIMIT 1`+lock, ref))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("%w: no job with id or name %q", queue.ErrNotFound, ref)
	}
	if err != nil {
		return r, fmt.Errorf("postgres: get %s: %w", ref, err)
	}
	return r, nil
}

func scanAttempt(row pgx.Row) (queue.Attempt, error) {
	var (
		a              queue.Attempt
		started, ended pgtype.Timestamptz
		exit           *int32
		argv, trail    string
	)
	if err := row.Scan(&a.Number, &a.WorkerID, &started, &ended, &a.Outcome, &exit, &a.Signal, &a.Reason, &argv, &trail, &a.StdoutPath, &a.StderrPath, &a.PolicySHA256); err != nil {
		return a, err
	}
	a.StartedAt, a.EndedAt = ts(started), ts(ended)
	if exit != nil {
		c := int(*exit)
		a.ExitCode = &c
	}
	if argv != "" {
		_ = json.Unmarshal([]byte(argv), &a.ConfinedArgv)
	}
	if trail != "" {
		a.Trail = json.RawMessage(trail)
	}
	return a, nil
}

type scanFunc func(dest ...any) error

func (f scanFunc) Scan(dest ...any) error { return f(dest...) }

// fill loads r's attempts and source as asked.
func fill(ctx context.Context, q pgx.Tx, rs []jobRow, attempts, source bool) error {
	if len(rs) == 0 {
		return nil
	}
	if attempts {
		rids := make([]int64, len(rs))
		for i := range rs {
			rids[i] = rs[i].rid
		}
		rows, err := q.Query(ctx, `SELECT job_rid, `+attemptCols+` FROM attempts WHERE job_rid = ANY($1) ORDER BY job_rid, number`, rids)
		if err != nil {
			return fmt.Errorf("postgres: attempts: %w", err)
		}
		by := map[int64][]queue.Attempt{}
		for rows.Next() {
			var rid int64
			a, err := scanAttempt(scanFunc(func(dest ...any) error {
				return rows.Scan(append([]any{&rid}, dest...)...)
			}))
			if err != nil {
				rows.Close()
				return fmt.Errorf("postgres: attempts: %w", err)
			}
			by[rid] = append(by[rid], a)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: attempts: %w", err)
		}
		for i := range rs {
			rs[i].Attempts = by[rs[i].rid]
		}
	}
	if source {
		ids := make([]int64, len(rs))
		for i := range rs {
			ids[i] = rs[i].sourceID
		}
		rows, err := q.Query(ctx, `SELECT id, text FROM sources WHERE id = ANY($1)`, ids)
		if err != nil {
			return fmt.Errorf("postgres: source: %w", err)
		}
		by := map[int64]string{}
		for rows.Next() {
			var id int64
			var text string
			if err := rows.Scan(&id, &text); err != nil {
				rows.Close()
				return fmt.Errorf("postgres: source: %w", err)
			}
			by[id] = text
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: source: %w", err)
		}
		for i := range rs {
			rs[i].Source = by[rs[i].sourceID]
		}
	}
	return nil
}

// reload reads a job back after a write, with its attempts but not its
// Source (see Job.Source).
func reload(ctx context.Context, q pgx.Tx, rid int64) (queue.Job, error) {
	r, err := scanJob(q.QueryRow(ctx, `SELECT `+jobCols+` FROM jobs WHERE rid = $1`, rid))
	if err != nil {
		return queue.Job{}, fmt.Errorf("postgres: reload: %w", err)
	}
	rs := []jobRow{r}
	if err := fill(ctx, q, rs, true, false); err != nil {
		return queue.Job{}, err
	}
	return rs[0].Job, nil
}

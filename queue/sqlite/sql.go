package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"paddock/jobspec"
	"paddock/queue"
)

// Hot statements (TestQueryPlans checks their plans use indexes).
const (
	jobByIDSQL  = `SELECT ` + jobCols + ` FROM jobs WHERE id = ?`
	jobByRidSQL = `SELECT ` + jobCols + ` FROM jobs WHERE rid = ?`
	attemptCols = `job_rid, number, worker_id, started_ns, ended_ns, outcome, exit_code, signal, reason, argv, trail, stdout_path, stderr_path, policy_sha256`
	attemptsSQL = `SELECT ` + attemptCols + ` FROM attempts WHERE job_rid = ? ORDER BY number`
	// attemptsOfSQL reads the attempts of the jobs of a JSON array of rids,
	// in no particular order (a sort would need a temporary b-tree).
	attemptsOfSQL   = `SELECT ` + attemptCols + ` FROM json_each(?) AS w CROSS JOIN attempts ON attempts.job_rid = w.value`
	sourceSQL       = `SELECT text FROM sources WHERE id = ?`
	closeAttemptSQL = `UPDATE attempts SET ended_ns = ?, outcome = ?, exit_code = ?, signal = ?, reason = ?, argv = ?, trail = ?, stdout_path = ?, stderr_path = ? WHERE job_rid = ? AND number = ?`
	setStateSQL     = `UPDATE jobs SET state = ?, reason = ?, not_before_ns = ?, scheduled = ?, finished_ns = ?, updated_ns = ?, lease_owner = '', lease_expires_ns = 0, cancel_requested = 0 WHERE rid = ?`

	// claimUpdSQL takes the lease of the jobs whose rid is in a subquery:
	// selecting and updating is one statement. claimOpenSQL selects the
	// first claimable jobs outside limited and paused groups from
	// jobs_ready2 (the whole claim when no limited group has room);
	// otherwise claimPickOpenSQL and claimPickGroupSQL (one seek in
	// jobs_gated per group with room) return candidates for
	// queue.ClaimGate.Choose, and claimRidsUpdSQL takes those chosen.
	// claimIDsSQL and claimPickIDsSQL are the claims restricted to a json
	// array of ids (looked up by id, so nothing is walked); they skip the
	// groups of a json array (paused or full: queue.ClaimGate.Blocked).
	claimUpdSQL       = `UPDATE jobs SET state = 'running', attempts = attempts + 1, lease_owner = ?, lease_expires_ns = ?, updated_ns = ?, started_ns = ?, cancel_requested = 0 WHERE rid IN `
	claimOpenWhere    = `state = 'queued' AND deps_pending = 0 AND scheduled = 0 AND gated = 0 AND not_before_ns <= ? ORDER BY priority DESC, created_ns, rid LIMIT ?`
	claimOpenSQL      = `SELECT rid FROM jobs INDEXED BY jobs_ready2 WHERE ` + claimOpenWhere
	claimPickOpenSQL  = `SELECT rid, group_name, priority, created_ns FROM jobs INDEXED BY jobs_ready2 WHERE ` + claimOpenWhere
	claimPickGroupSQL = `SELECT rid, group_name, priority, created_ns FROM jobs INDEXED BY jobs_gated
		WHERE group_name = ? AND state = 'queued' AND deps_pending = 0 AND scheduled = 0 AND gated = 1 AND not_before_ns <= ? ORDER BY priority DESC, created_ns, rid LIMIT ?`
	// claimPromoteSQL makes the jobs now due claimable: a range of
	// jobs_scheduled, empty in the common case.
	claimPromoteSQL   = `UPDATE jobs INDEXED BY jobs_scheduled SET scheduled = 0 WHERE state = 'queued' AND deps_pending = 0 AND scheduled = 1 AND not_before_ns <= ?`
	claimIDsWhere     = `state = 'queued' AND deps_pending = 0 AND not_before_ns <= ? AND group_name NOT IN (SELECT value FROM json_each(?)) ORDER BY priority DESC, created_ns, rid LIMIT ?`
	claimIDsOpenWhere = `state = 'queued' AND deps_pending = 0 AND not_before_ns <= ? ORDER BY priority DESC, created_ns, rid LIMIT ?`
	claimIDsFrom      = ` FROM json_each(?) AS w CROSS JOIN jobs ON jobs.id = w.value WHERE `
	claimIDsSQL       = `SELECT jobs.rid` + claimIDsFrom + claimIDsWhere
	claimOpenIDsSQL   = `SELECT jobs.rid` + claimIDsFrom + claimIDsOpenWhere
	claimPickIDsSQL   = `SELECT jobs.rid, jobs.group_name` + claimIDsFrom + claimIDsWhere
	claimRidsUpdSQL   = claimUpdSQL + `(SELECT value FROM json_each(?)) RETURNING ` + jobCols
	// claimGroupsSQL reads what a claim checks first: a row with the
	// queue's pause, the earliest due time waiting in jobs_scheduled (0:
	// none; claimPromoteSQL runs only when it has come) and the policy
	// digest, then each paused or limited group
	// with its running count (from jobs_group), for queue.NewClaimGate.
	// The count names state = 'running' before the IN that lets it use
	// jobs_group: in the other order SQLite seeks both states and counts
	// every queued job of the group too (2 ms for 20,000).
	claimGroupsSQL = `SELECT '', 0, coalesce((SELECT paused FROM queue_state WHERE id = 1), 0),
			coalesce((SELECT min(not_before_ns) FROM jobs INDEXED BY jobs_scheduled WHERE state = 'queued' AND deps_pending = 0 AND scheduled = 1), 0),
			coalesce((SELECT sha256 FROM policy WHERE id = 1), '')
		UNION ALL SELECT g.name, g.max_running, g.paused, (SELECT count(*) FROM jobs INDEXED BY jobs_group WHERE group_name = g.name AND state = 'running' AND group_name != '' AND state IN ('queued','running')), ''
		FROM job_groups AS g WHERE g.max_running > 0 OR g.paused != 0`
	heldNamesSQL = `SELECT j.name, j.id, j.state FROM json_each(?) AS n CROSS JOIN jobs AS j ON j.name = n.value WHERE j.name != '' AND j.state IN ('queued','running')`
	failSQL      = `UPDATE jobs SET state = 'failed', reason = ?, finished_ns = ?, updated_ns = ?
			WHERE state = 'queued' AND rid IN (SELECT job_rid FROM deps WHERE dep_rid = ?) RETURNING rid, id, name`
	releaseSQL = `UPDATE jobs SET deps_pending = deps_pending - 1, updated_ns = ?
		WHERE state = 'queued' AND deps_pending > 0 AND rid IN (SELECT job_rid FROM deps WHERE dep_rid = ?)`
	retryDepsSQL   = `SELECT j.id, j.name, j.state FROM deps d JOIN jobs j ON j.rid = d.dep_rid WHERE d.job_rid = ? AND j.state != 'succeeded'`
	pruneInsertSQL = `INSERT INTO temp.prune ` + pruneSelectSQL
	// countsSQL reads only indexes: jobs_ready2, jobs_gated,
	// jobs_scheduled and jobs_blocked hold every queued job, jobs_lease
	// every running one, jobs_finished2 the rest.
	countsSQL = `SELECT 'queued', (SELECT count(*) FROM jobs INDEXED BY jobs_ready2 WHERE state = 'queued' AND deps_pending = 0 AND scheduled = 0 AND gated = 0) +
			(SELECT count(*) FROM jobs INDEXED BY jobs_gated WHERE state = 'queued' AND deps_pending = 0 AND scheduled = 0 AND gated = 1) +
			(SELECT count(*) FROM jobs INDEXED BY jobs_scheduled WHERE state = 'queued' AND deps_pending = 0 AND scheduled = 1) +
			(SELECT count(*) FROM jobs INDEXED BY jobs_blocked WHERE state = 'queued' AND deps_pending > 0)
		UNION ALL SELECT 'running', count(*) FROM jobs INDEXED BY jobs_lease WHERE state = 'running'
		UNION ALL SELECT state, count(*) FROM jobs INDEXED BY jobs_finished2 WHERE finished_ns > 0 GROUP BY state`
	pruneSelectSQL = `SELECT rid FROM jobs WHERE finished_ns > 0 AND finished_ns <= ?`
)

// hotSQL are prepared once when the store opens and used by [cachedTx].
var hotSQL = []string{jobByIDSQL, jobByRidSQL, attemptsSQL, sourceSQL, closeAttemptSQL, setStateSQL, failSQL, releaseSQL,
	claimGroupsSQL, claimPickOpenSQL, claimPickGroupSQL, claimPromoteSQL, claimPickIDsSQL, claimRidsUpdSQL}

const jobCols = `rid, id, name, state, spec, source_id, reason, created_ns, updated_ns, finished_ns, not_before_ns, deps_pending, attempts, max_attempts, lease_owner, lease_expires_ns, cancel_requested, depends_on, source_path, started_ns`

type jobRow struct {
	queue.Job
	rid, sourceID int64
}

type scanner interface{ Scan(...any) error }

func scanJob(sc scanner) (jobRow, error) {
	var (
		r                                          jobRow
		spec, deps                                 string
		state                                      string
		created, updated, finished, notBefore, exp int64
		started                                    int64
		cancel                                     int
	)
	err := sc.Scan(&r.rid, &r.ID, &r.Name, &state, &spec, &r.sourceID, &r.Reason, &created, &updated, &finished, &notBefore,
		&r.DepsPending, &r.AttemptCount, &r.MaxAttempts, &r.LeaseOwner, &exp, &cancel, &deps, &r.SourcePath, &started)
	if err != nil {
		return r, err
	}
	r.State = queue.JobState(state)
	if err := json.Unmarshal([]byte(spec), &r.Spec); err != nil {
		return r, fmt.Errorf("sqlite: job %s: corrupt spec: %w", r.ID, err)
	}
	if deps != "" {
		r.DependsOn = strings.Split(deps, " ")
	}
	r.CreatedAt, r.UpdatedAt, r.FinishedAt, r.NotBefore, r.LeaseExpiresAt, r.StartedAt = ts(created), ts(updated), ts(finished), ts(notBefore), ts(exp), ts(started)
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
	s  *Store
	tx *sql.Tx
}

// cached wraps tx.
func (s *Store) cached(tx *sql.Tx) cachedTx { return cachedTx{s, tx} }

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
		return jobRow{}, fmt.Errorf("%w: empty id or name", queue.ErrNotFound)
	}
	if jobspec.LooksLikeID(ref) {
		r, err := scanJob(q.QueryRowContext(ctx, jobByIDSQL, ref))
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return r, fmt.Errorf("sqlite: get %s: %w", ref, err)
		}
	}
	r, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE name = ? AND name != '' ORDER BY created_ns DESC, rid DESC LIMIT 1`, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return r, fmt.Errorf("%w: no job with id or name %q", queue.ErrNotFound, ref)
	}
	if err != nil {
		return r, fmt.Errorf("sqlite: get %s: %w", ref, err)
	}
	return r, nil
}

func loadAttempts(ctx context.Context, q querier, rid int64) ([]queue.Attempt, error) {
	rows, err := q.QueryContext(ctx, attemptsSQL, rid)
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempts: %w", err)
	}
	var out []queue.Attempt
	err = scanAttempts(rows, func(_ int64, a queue.Attempt) { out = append(out, a) })
	return out, err
}

// scanAttempts reads rows of attemptCols (job_rid first) into add, and
// closes rows.
func scanAttempts(rows *sql.Rows, add func(rid int64, a queue.Attempt)) error {
	defer rows.Close()
	for rows.Next() {
		var (
			a              queue.Attempt
			rid            int64
			started, ended int64
			exit           sql.NullInt64
			argv, trail    string
		)
		if err := rows.Scan(&rid, &a.Number, &a.WorkerID, &started, &ended, &a.Outcome, &exit, &a.Signal, &a.Reason, &argv, &trail, &a.StdoutPath, &a.StderrPath, &a.PolicySHA256); err != nil {
			return fmt.Errorf("sqlite: attempts: %w", err)
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
		add(rid, a)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: attempts: %w", err)
	}
	return nil
}

func (s *Store) fill(ctx context.Context, q querier, r *jobRow, attempts, source bool) error {
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
			return fmt.Errorf("sqlite: source: %w", err)
		}
	}
	return nil
}

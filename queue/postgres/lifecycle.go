package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"paddock/queue"
)

// claimSQL returns the statement claiming jobs in one statement. Without
// byID it reads jobs_ready, which holds neither the jobs not yet due
// (scheduled) nor those of groups with a limit or a pause (gated), and
// claims only while no limited group with room has a claimable job
// (claimRoomSQL): then the claim needs no group's lock and no count, and
// [Store.claimSeek] claims otherwise. With byID it looks the jobs up by
// id, skips the jobs of paused groups, and claims only while no group
// has a limit ([Store.claimCounted] claims otherwise). The rows picked
// are locked FOR UPDATE SKIP LOCKED (a concurrent claimer skips them
// instead of waiting, and no row is handed out twice), their lease taken
// and their attempt opened, only when the claimer's policy digest is the
// queue's and the queue is not paused. $1 is the claimer, $2 the clock
// (NULL: the server's now()), $3 the lease in microseconds, $4 the
// limit, $5 the policy digest, and with byID, $6 the ids to restrict the
// claim to. (Two statements rather than one with "$6 IS NULL OR ...": a
// generic plan of that one cannot read jobs_ready in order, and sorts
// every ready job.)
func claimSQL(byID bool) string {
	g := `g AS (SELECT NOT coalesce((SELECT paused FROM queue_state WHERE id = 1), false) AND NOT coalesce(nullif(current_setting('paddock.claim_room', true), '')::boolean, false) AS open),
c AS (
	SELECT rid FROM jobs
	WHERE state = 'queued' AND deps_pending = 0 AND NOT scheduled AND NOT gated AND (not_before IS NULL OR not_before <= (SELECT now FROM t))
		AND (SELECT have FROM p) = $5 AND (SELECT open FROM g)`
	if byID {
		g = `g AS (SELECT NOT coalesce((SELECT paused FROM queue_state WHERE id = 1), false)
		AND NOT EXISTS (SELECT 1 FROM job_groups WHERE max_running > 0) AS open,
	coalesce((SELECT array_agg(name) FROM job_groups WHERE paused), '{}') AS paused),
c AS (
	SELECT rid FROM jobs
	WHERE state = 'queued' AND deps_pending = 0 AND (not_before IS NULL OR not_before <= (SELECT now FROM t))
		AND (SELECT have FROM p) = $5 AND (SELECT open FROM g) AND group_name <> ALL ((SELECT paused FROM g)::text[]) AND id = ANY($6::text[])`
	}
	return `WITH t AS (SELECT coalesce($2::timestamptz, now()) AS now),
p AS (SELECT coalesce((SELECT sha256 FROM policy WHERE id = 1), '') AS have),
` + g + `
	ORDER BY priority DESC, created_at, rid
	LIMIT $4
	FOR UPDATE SKIP LOCKED
),
u AS (
	UPDATE jobs j SET state = 'running', attempts = j.attempts + 1, lease_owner = $1,
		lease_expires = (SELECT now FROM t) + $3 * interval '1 microsecond', updated_at = (SELECT now FROM t),
		started_at = (SELECT now FROM t), cancel_requested = false
	WHERE j.rid = ANY (ARRAY(SELECT rid FROM c))
	RETURNING ` + jobColsOf("j") + `
),
a AS (
	INSERT INTO attempts (job_rid, number, worker_id, started_at, policy_sha256)
	SELECT rid, attempts, $1, (SELECT now FROM t), $5 FROM u
)
SELECT * FROM u`
}

// claimRoomSetSQL stores claimRoomSQL's answer in the transaction's
// setting paddock.claim_room, which the claim statement reads: a
// statement without parameters is planned once per connection, while
// the claim's own parameters make the server plan it at every execution,
// where these subqueries cost more than the claim itself.
const claimRoomSetSQL = `SELECT set_config('paddock.claim_room', (` + claimRoomSQL + `)::text, true)`

// claimRoomSQL is true when a group with a limit, not paused, has room
// by an unlocked count and a claimable job: one probe of jobs_gated and
// one count of jobs_group per limited group (a handful), whatever the
// number of jobs. The probe is a scalar subquery with LIMIT 1, not an
// EXISTS: the planner turns an EXISTS into a join that reads every entry
// of jobs_gated (56 ms a claim with 100,000 jobs of a full group).
const claimRoomSQL = `EXISTS (SELECT 1 FROM job_groups gr WHERE gr.max_running > 0 AND NOT gr.paused
	AND (SELECT rid FROM jobs WHERE group_name = gr.name AND state = 'queued' AND deps_pending = 0 AND NOT scheduled AND gated LIMIT 1) IS NOT NULL
	AND (SELECT count(*) FROM jobs WHERE group_name = gr.name AND group_name <> '' AND state = 'running') < gr.max_running)`

var claimReadySQL, claimIDsSQL = claimSQL(false), claimSQL(true)

// claimPrelude makes the claim of ready jobs (not the claim by ids) read
// jobs_ready in order and stop at its limit whatever the table's
// statistics say. A queue fills faster than
// autovacuum analyzes it: right after a 100,000-job enqueue the planner
// still believes the table empty, and picks a bitmap scan that sorts
// every ready job (90 ms a claim instead of well under one).
var claimPrelude = []string{`SET LOCAL enable_sort = off`}

// claimPromoteSQL makes the jobs due at $1 claimable: a range of
// jobs_scheduled, empty in the common case. Rows another claim is
// promoting are skipped, not waited for. claimPromoteNowSQL is the same
// at now(), without parameters (planned once per connection).
const (
	claimPromoteSQL = `UPDATE jobs SET scheduled = false WHERE rid IN (
	SELECT rid FROM jobs WHERE state = 'queued' AND deps_pending = 0 AND scheduled AND not_before <= $1::timestamptz
	FOR UPDATE SKIP LOCKED)`
	claimPromoteNowSQL = `UPDATE jobs SET scheduled = false WHERE rid IN (
	SELECT rid FROM jobs WHERE state = 'queued' AND deps_pending = 0 AND scheduled AND not_before <= now()
	FOR UPDATE SKIP LOCKED)`
)

// promoteStmt is the promotion at the store's clock.
func (s *Store) promoteStmt() batchStmt {
	if now := s.nowArg(); now != nil {
		return batchStmt{sql: claimPromoteSQL, args: []any{now}}
	}
	return batchStmt{sql: claimPromoteNowSQL}
}

// The statements of [Store.claimSeek] and [Store.claimCounted]:
// claimGateSQL reads the policy digest, the queue's pause and whether a
// limited group has room and a claimable job (and whether any group has
// a limit, for the claim by ids); claimGroupsReadSQL reads every group
// with a limit or a pause and its running jobs, without a lock;
// claimLockSQL locks the rows of the groups of $1 in name order (so two
// claimers never deadlock on them); claimGroupsSQL locks every group
// with a limit or a pause (the claim by ids); claimRunningSQL counts the
// running jobs of the groups of $1 (run after the locks: under READ
// COMMITTED it sees every claim committed before them);
// claimPickOpenSQL and claimPickGroupSQL select candidates in claim
// order outside limited and paused groups ($1 the clock, $2 how many)
// and in group $3; claimPickSQL selects the candidates of a claim by ids
// ($1 the clock, $2 the blocked groups, $3 how many, $4 the ids);
// claimTakeSQL takes the jobs of rids $4 for claimer $1 at clock $2
// (NULL: clock_timestamp(), the time after the group locks) for $3
// microseconds, with policy digest $5.
const (
	claimGateSQL       = `SELECT coalesce((SELECT sha256 FROM policy WHERE id = 1), ''), coalesce((SELECT paused FROM queue_state WHERE id = 1), false), ` + claimRoomSQL + `, EXISTS (SELECT 1 FROM job_groups WHERE max_running > 0)`
	claimGroupsReadSQL = `SELECT g.name, g.max_running, g.paused, (SELECT count(*) FROM jobs WHERE group_name = g.name AND group_name <> '' AND state = 'running')
	FROM job_groups g WHERE g.max_running > 0 OR g.paused`
	claimLockSQL     = `SELECT name FROM job_groups WHERE name = ANY($1::text[]) ORDER BY name FOR UPDATE`
	claimGroupsSQL   = `SELECT name, max_running, paused FROM job_groups WHERE max_running > 0 OR paused ORDER BY name FOR UPDATE`
	claimRunningSQL  = `SELECT group_name, count(*) FROM jobs WHERE group_name = ANY($1::text[]) AND group_name <> '' AND state = 'running' GROUP BY group_name`
	claimPickOpenSQL = `SELECT rid, group_name, priority, created_at FROM jobs
	WHERE state = 'queued' AND deps_pending = 0 AND NOT scheduled AND NOT gated AND (not_before IS NULL OR not_before <= coalesce($1::timestamptz, now()))
	ORDER BY priority DESC, created_at, rid LIMIT $2 FOR UPDATE SKIP LOCKED`
	claimPickGroupSQL = `SELECT rid, group_name, priority, created_at FROM jobs
	WHERE group_name = $3 AND state = 'queued' AND deps_pending = 0 AND NOT scheduled AND gated AND (not_before IS NULL OR not_before <= coalesce($1::timestamptz, now()))
	ORDER BY priority DESC, created_at, rid LIMIT $2 FOR UPDATE SKIP LOCKED`
	claimPickSQL = `SELECT rid, group_name FROM jobs
	WHERE state = 'queued' AND deps_pending = 0 AND (not_before IS NULL OR not_before <= $1) AND group_name <> ALL ($2::text[])
		AND id = ANY($4::text[])
	ORDER BY priority DESC, created_at, rid LIMIT $3 FOR UPDATE SKIP LOCKED`
)

var claimTakeSQL = `WITH t AS (SELECT coalesce($2::timestamptz, clock_timestamp()) AS now),
u AS (
	UPDATE jobs j SET state = 'running', attempts = j.attempts + 1, lease_owner = $1,
		lease_expires = (SELECT now FROM t) + $3 * interval '1 microsecond', updated_at = (SELECT now FROM t), started_at = (SELECT now FROM t), cancel_requested = false
	WHERE j.rid = ANY($4::bigint[]) AND j.state = 'queued'
	RETURNING ` + jobColsOf("j") + `
),
a AS (
	INSERT INTO attempts (job_rid, number, worker_id, started_at, policy_sha256)
	SELECT rid, attempts, $1, (SELECT now FROM t), $5 FROM u
)
SELECT * FROM u`

// JobClaim implements Store: claimSQL in a READ COMMITTED transaction
// sent as one pipelined batch (BEGIN, the settings, the promotion of
// the jobs now due, claimRoomSetSQL, the claim, COMMIT: one round trip). When it claims nothing, the policy,
// the queue's pause and the groups are read: a claimer with another
// policy gets ErrPolicyChanged, and when a limited group has room and a
// claimable job, [Store.claimSeek] (or for ids [Store.claimCounted])
// claims.
func (s *Store) JobClaim(ctx context.Context, p *queue.JobClaimParams) ([]queue.Job, error) {
	c, err := p.WithDefaults()
	if err != nil {
		return nil, err
	}
	now := s.nowArg()
	q, args := claimReadySQL, []any{c.WorkerID, now, c.Lease.Microseconds(), c.Limit, c.PolicySHA256}
	// The claim statement's generic plan (planned once per connection)
	// reads jobs_ready in order as its custom plans do; left to choose,
	// the server plans it anew at every execution once the table has
	// statistics, which costs more than running it.
	prelude := []batchStmt{{sql: `SET LOCAL plan_cache_mode = force_generic_plan`}}
	for _, q := range claimPrelude {
		prelude = append(prelude, batchStmt{sql: q})
	}
	prelude = append(prelude, s.promoteStmt(), batchStmt{sql: claimRoomSetSQL})
	byID := len(c.JobIDs) > 0
	if byID {
		// A few ids: looked up by id, then sorted.
		q, args, prelude = claimIDsSQL, append(args, c.JobIDs), nil
	}
	var claimed []jobRow
	err = s.pipelined(ctx, prelude, func(rows pgx.Rows) error {
		claimed = nil
		for rows.Next() {
			r, err := scanJob(rows)
			if err != nil {
				return err
			}
			claimed = append(claimed, r)
		}
		return rows.Err()
	}, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	if len(claimed) == 0 {
		var room, limited bool
		err := s.read(ctx, func(tx pgx.Tx) error {
			var have string
			var paused bool
			if err := tx.QueryRow(ctx, claimGateSQL).Scan(&have, &paused, &room, &limited); err != nil {
				return fmt.Errorf("postgres: claim: %w", err)
			}
			room, limited = room && !paused, limited && !paused
			return queue.CheckPolicyDigest(have, c.PolicySHA256)
		})
		switch {
		case err != nil:
			return nil, err
		case byID && limited:
			claimed, err = s.claimCounted(ctx, c)
		case !byID && room:
			claimed, err = s.claimSeek(ctx, c)
		}
		if err != nil {
			return nil, err
		}
	}
	// RETURNING has no order: hand the jobs out in claim order.
	slices.SortFunc(claimed, func(a, b jobRow) int {
		return cmp.Or(cmp.Compare(b.Spec.Priority, a.Spec.Priority), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.rid, b.rid))
	})
	out := make([]queue.Job, len(claimed))
	for i, r := range claimed {
		out[i] = r.Job
	}
	return out, nil
}

// claimSeek is the claim of ready jobs when a limited group has room, as
// queue.ClaimGate describes it, in one READ COMMITTED transaction: the
// first jobs outside limited and paused groups, and of each limited
// group with room its first jobs up to its room, each a seek in claim
// order locked FOR UPDATE SKIP LOCKED; queue.ClaimGate.Choose picks
// among them. Only the rows of the groups whose jobs it picks are then
// locked FOR UPDATE, their running jobs counted again and the choice
// made again, until every group chosen is locked: claimers on any host
// take a group's slots one after the other and never exceed its limit,
// while a claim of jobs outside limited groups takes no group's lock.
// The jobs of full and paused groups are never read.
func (s *Store) claimSeek(ctx context.Context, c queue.JobClaimParams) ([]jobRow, error) {
	var claimed []jobRow
	err := s.txClock(ctx, func(tx pgx.Tx) error {
		claimed = nil
		now := s.nowArg()
		// One round trip: the gate, the settings, the promotion of the
		// jobs now due, the groups and the first candidates outside them.
		b := &pgx.Batch{}
		var have string
		var paused, room, limited bool
		b.Queue(claimGateSQL).QueryRow(func(r pgx.Row) error { return r.Scan(&have, &paused, &room, &limited) })
		for _, q := range claimPrelude {
			b.Queue(q)
		}
		pr := s.promoteStmt()
		b.Queue(pr.sql, pr.args...)
		var groups []queue.Group
		b.Queue(claimGroupsReadSQL).Query(func(rows pgx.Rows) error {
			var err error
			groups, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (queue.Group, error) {
				var g queue.Group
				err := r.Scan(&g.Name, &g.Limit, &g.Paused, &g.Running)
				return g, err
			})
			return err
		})
		var open []queue.ClaimCandidate
		b.Queue(claimPickOpenSQL, now, c.Limit).Query(func(rows pgx.Rows) error {
			var err error
			open, err = collectCandidates(rows)
			return err
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		if err := queue.CheckPolicyDigest(have, c.PolicySHA256); err != nil || paused {
			return err
		}
		limits := map[string]int{}
		for _, g := range groups {
			limits[g.Name] = g.Limit
		}
		fetched := map[string]int{} // group -> candidates read
		byGroup := map[string][]queue.ClaimCandidate{}
		locked := map[string]bool{}
		var take []int64
		for {
			gate := queue.NewClaimGate(queue.QueueState{}, groups)
			cands := slices.Clone(open)
			for name, room := range gate.Rooms() {
				want := min(room, c.Limit)
				if want > fetched[name] {
					rows, err := tx.Query(ctx, claimPickGroupSQL, now, want, name)
					if err != nil {
						return fmt.Errorf("postgres: claim: %w", err)
					}
					if byGroup[name], err = collectCandidates(rows); err != nil {
						return fmt.Errorf("postgres: claim: %w", err)
					}
					fetched[name] = want
				}
				cands = append(cands, byGroup[name]...)
			}
			take = gate.Choose(cands, c.Limit)
			var need []string
			for _, x := range cands {
				if x.Group != "" && limits[x.Group] > 0 && !locked[x.Group] && slices.Contains(take, x.Row) && !slices.Contains(need, x.Group) {
					need = append(need, x.Group)
				}
			}
			if len(need) == 0 {
				break
			}
			// Lock the groups chosen, then count their running jobs
			// again, in a statement of its own: under READ COMMITTED it
			// sees every claim committed while this one waited.
			if _, err := tx.Exec(ctx, claimLockSQL, need); err != nil {
				return fmt.Errorf("postgres: claim: %w", err)
			}
			running, err := runningByGroup(ctx, tx, need)
			if err != nil {
				return err
			}
			for i := range groups {
				if slices.Contains(need, groups[i].Name) {
					groups[i].Running = running[groups[i].Name]
				}
			}
			for _, n := range need {
				locked[n] = true
			}
		}
		if len(take) == 0 {
			return nil
		}
		// The attempts start after the locks (clock_timestamp(), not the
		// transaction's start, or Options.Clock read now): a finish that
		// freed the slot this claim waited for ended before it.
		rows, err := tx.Query(ctx, claimTakeSQL, c.WorkerID, s.nowArg(), c.Lease.Microseconds(), take, c.PolicySHA256)
		if err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		claimed, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (jobRow, error) { return scanJob(r) })
		if err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		return nil
	})
	return claimed, err
}

// collectCandidates reads the rows of claimPickOpenSQL or
// claimPickGroupSQL.
func collectCandidates(rows pgx.Rows) ([]queue.ClaimCandidate, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (queue.ClaimCandidate, error) {
		var x queue.ClaimCandidate
		err := r.Scan(&x.Row, &x.Group, &x.Priority, &x.Created)
		return x, err
	})
}

// claimCounted is the claim of a list of ids when a group has a limit, as
// queue.ClaimGate describes it, in one READ COMMITTED transaction: the
// rows of the limited and paused groups are locked FOR UPDATE before
// their running jobs are counted, so that claimers on any host take a
// group's slots one after the other and never exceed its limit; the
// candidates are locked FOR UPDATE SKIP LOCKED as in claimSQL.
func (s *Store) claimCounted(ctx context.Context, c queue.JobClaimParams) ([]jobRow, error) {
	var claimed []jobRow
	err := s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		claimed = nil
		var have string
		var paused, room, limited bool
		if err := tx.QueryRow(ctx, claimGateSQL).Scan(&have, &paused, &room, &limited); err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		if err := queue.CheckPolicyDigest(have, c.PolicySHA256); err != nil || paused {
			return err
		}
		rows, err := tx.Query(ctx, claimGroupsSQL)
		if err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		var groups []queue.Group
		var names []string
		for rows.Next() {
			var g queue.Group
			if err := rows.Scan(&g.Name, &g.Limit, &g.Paused); err != nil {
				rows.Close()
				return fmt.Errorf("postgres: claim: %w", err)
			}
			groups, names = append(groups, g), append(names, g.Name)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		running, err := runningByGroup(ctx, tx, names)
		if err != nil {
			return err
		}
		for i := range groups {
			groups[i].Running = running[groups[i].Name]
		}
		// The attempts start now, after the locks, not when the
		// transaction began: a finish that freed the slot this claim
		// waited for ended before it.
		if s.clock != nil {
			now = s.clock()
		} else if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			return fmt.Errorf("postgres: claim: %w", err)
		}
		now = now.UTC().Truncate(time.Microsecond)
		gate := queue.NewClaimGate(queue.QueueState{}, groups)
		ids := c.JobIDs
		for len(claimed) < c.Limit {
			want := c.Limit - len(claimed)
			rows, err := tx.Query(ctx, claimPickSQL, now, gate.Blocked(), want, ids)
			if err != nil {
				return fmt.Errorf("postgres: claim: %w", err)
			}
			var take []int64
			picked, refused := 0, false
			for rows.Next() {
				var rid int64
				var group string
				if err := rows.Scan(&rid, &group); err != nil {
					rows.Close()
					return fmt.Errorf("postgres: claim: %w", err)
				}
				picked++
				if gate.Take(group) {
					take = append(take, rid)
				} else {
					refused = true
				}
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("postgres: claim: %w", err)
			}
			if len(take) > 0 {
				rows, err := tx.Query(ctx, claimTakeSQL, c.WorkerID, now, c.Lease.Microseconds(), take, c.PolicySHA256)
				if err != nil {
					return fmt.Errorf("postgres: claim: %w", err)
				}
				for rows.Next() {
					r, err := scanJob(rows)
					if err != nil {
						rows.Close()
						return fmt.Errorf("postgres: claim: %w", err)
					}
					claimed = append(claimed, r)
				}
				rows.Close()
				if err := rows.Err(); err != nil {
					return fmt.Errorf("postgres: claim: %w", err)
				}
			}
			if !refused || picked < want {
				break
			}
		}
		return nil
	})
	return claimed, err
}

// LeaseExtend implements Store: one UPDATE of the leases the worker still
// holds, at the server's clock.
func (s *Store) LeaseExtend(ctx context.Context, p *queue.LeaseExtendParams) ([]string, error) {
	c, err := p.WithDefaults()
	if err != nil {
		return nil, err
	}
	if len(c.JobIDs) == 0 {
		return nil, nil
	}
	var stop []string
	err = s.txClock(ctx, func(tx pgx.Tx) error {
		stop = nil
		rows, err := tx.Query(ctx, `UPDATE jobs SET lease_expires = coalesce($1::timestamptz, now()) + $2 * interval '1 microsecond'
			WHERE id = ANY($3) AND state = 'running' AND lease_owner = $4 RETURNING id, cancel_requested`,
			s.nowArg(), c.Lease.Microseconds(), c.JobIDs, c.WorkerID)
		if err != nil {
			return fmt.Errorf("postgres: lease extend: %w", err)
		}
		held := map[string]bool{}
		for rows.Next() {
			var id string
			var cancel bool
			if err := rows.Scan(&id, &cancel); err != nil {
				rows.Close()
				return fmt.Errorf("postgres: lease extend: %w", err)
			}
			held[id] = !cancel
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: lease extend: %w", err)
		}
		for _, id := range c.JobIDs {
			if !held[id] {
				stop = append(stop, id)
			}
		}
		return nil
	})
	return stop, err
}

// AttemptFinish implements Store. The job's row is locked first: a
// recovery of its lease, a cancel or another report waits for this one
// (and then finds the job no longer running under this lease).
func (s *Store) AttemptFinish(ctx context.Context, p *queue.AttemptFinishParams) (queue.Job, error) {
	if err := p.Check(); err != nil {
		return queue.Job{}, err
	}
	a := p.Attempt
	var out queue.Job
	err := s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		r, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobCols+` FROM jobs WHERE id = $1 FOR UPDATE`, p.JobID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", queue.ErrNotFound, p.JobID)
		}
		if err != nil {
			return fmt.Errorf("postgres: attempt finish: %w", err)
		}
		if r.State != queue.StateRunning || r.LeaseOwner != p.WorkerID {
			return fmt.Errorf("%w: job %s is %s (lease owner %q), not running for worker %q", queue.ErrLeaseLost, r.ID, r.State, r.LeaseOwner, p.WorkerID)
		}
		ended := a.EndedAt
		if ended.IsZero() {
			ended = now
		}
		if err := closeAttempt(ctx, tx, r.rid, r.AttemptCount, ended, a); err != nil {
			return err
		}
		t := queue.AttemptEnded(r.Job, a.Outcome, a.Reason, s.rand())
		var notBefore time.Time
		if t.Delay > 0 {
			notBefore = now.Add(t.Delay).Truncate(time.Microsecond)
		}
		ready, err := setState(ctx, tx, r, t.State, t.Reason, notBefore, now)
		if err != nil {
			return err
		}
		if out, err = reload(ctx, tx, r.rid); err != nil {
			return err
		}
		// Only a dependent made ready wakes workers: a finish per job
		// would be a NOTIFY per job (waits poll for final states).
		if !ready {
			return nil
		}
		return s.notify(ctx, tx)
	})
	return out, err
}

func closeAttempt(ctx context.Context, tx pgx.Tx, rid int64, number int, ended time.Time, a queue.Attempt) error {
	var exit any
	if a.ExitCode != nil {
		exit = int32(*a.ExitCode)
	}
	argv := ""
	if a.ConfinedArgv != nil {
		b, _ := json.Marshal(a.ConfinedArgv)
		argv = string(b)
	}
	_, err := tx.Exec(ctx, `UPDATE attempts SET ended_at = $1, outcome = $2, exit_code = $3, signal = $4, reason = $5, argv = $6, trail = $7, stdout_path = $8, stderr_path = $9
		WHERE job_rid = $10 AND number = $11`,
		tz(ended), a.Outcome, exit, a.Signal, a.Reason, argv, string(a.Trail), a.StdoutPath, a.StderrPath, rid, number)
	if err != nil {
		return fmt.Errorf("postgres: record attempt: %w", err)
	}
	return nil
}

// setState moves r to next and releases or fails its dependents; ready
// reports whether a dependent became ready to claim.
func setState(ctx context.Context, tx pgx.Tx, r jobRow, next queue.JobState, reason string, notBefore, now time.Time) (ready bool, err error) {
	var fin time.Time
	if next.Finished() {
		fin = now
	}
	_, err = tx.Exec(ctx, `UPDATE jobs SET state = $1, reason = $2, not_before = $3, scheduled = $3::timestamptz IS NOT NULL, finished_at = $4, updated_at = $5,
		lease_owner = '', lease_expires = NULL, cancel_requested = false WHERE rid = $6`,
		string(next), reason, tz(notBefore), tz(fin), now, r.rid)
	if err != nil {
		return false, fmt.Errorf("postgres: set state: %w", err)
	}
	switch next {
	case queue.StateSucceeded:
		return releaseDependents(ctx, tx, r.rid, now)
	case queue.StateFailed, queue.StateDenied, queue.StateCanceled:
		return false, failDependents(ctx, tx, r.rid, queue.JobLabel(r.ID, r.Name), next, now)
	}
	return false, nil
}

// JobCancel implements Store.
func (s *Store) JobCancel(ctx context.Context, ref string) (queue.Job, error) {
	var out queue.Job
	err := s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		r, err := resolve(ctx, tx, ref, " FOR UPDATE")
		if err != nil {
			return err
		}
		effect, err := queue.CancelOf(r.Job)
		if err != nil {
			out = r.Job
			return err
		}
		switch effect {
		case queue.CancelNow:
			if _, err := setState(ctx, tx, r, queue.StateCanceled, queue.ReasonCanceledBeforeStart, time.Time{}, now); err != nil {
				return err
			}
		case queue.CancelFlag:
			if _, err := tx.Exec(ctx, `UPDATE jobs SET cancel_requested = true, reason = $1, updated_at = $2 WHERE rid = $3`, queue.ReasonCancelRequested, now, r.rid); err != nil {
				return fmt.Errorf("postgres: cancel: %w", err)
			}
		}
		out, err = reload(ctx, tx, r.rid)
		return err
	})
	return out, err
}

// JobRetry implements Store. The job and its dependencies are locked, so
// that a dependency finishing meanwhile releases or fails it after this
// commits.
func (s *Store) JobRetry(ctx context.Context, ref string) (queue.Job, error) {
	var out queue.Job
	err := s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		r, err := resolve(ctx, tx, ref, " FOR UPDATE")
		if err != nil {
			return err
		}
		if err := queue.RetryCheck(r.Job); err != nil {
			return err
		}
		if r.Name != "" {
			var id, state string
			err := tx.QueryRow(ctx, `SELECT id, state FROM jobs WHERE name = $1 AND state IN ('queued', 'running') LIMIT 1`, r.Name).Scan(&id, &state)
			if err == nil {
				return queue.NameHeldError(r.Name, queue.JobState(state), id)
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("postgres: retry: %w", err)
			}
		}
		rows, err := tx.Query(ctx, `SELECT j.id, j.name, j.state FROM deps d JOIN jobs j ON j.rid = d.dep_rid WHERE d.job_rid = $1 ORDER BY j.rid FOR SHARE OF j`, r.rid)
		if err != nil {
			return fmt.Errorf("postgres: retry: %w", err)
		}
		pending := 0
		var blocked error
		for rows.Next() {
			var id, name, state string
			if err := rows.Scan(&id, &name, &state); err != nil {
				rows.Close()
				return fmt.Errorf("postgres: retry: %w", err)
			}
			if queue.JobState(state) == queue.StateSucceeded {
				continue
			}
			if blocked == nil {
				blocked = queue.RetryBlocked(r.Job, id, name, queue.JobState(state))
			}
			pending++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: retry: %w", err)
		}
		if blocked != nil {
			return blocked
		}
		if err := shareGroups(ctx, tx, []string{r.Spec.Group}); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE jobs SET state = 'queued', reason = $1, deps_pending = $2, max_attempts = attempts + $3, not_before = $6, finished_at = NULL, updated_at = $4, cancel_requested = false,
			scheduled = $6::timestamptz IS NOT NULL, gated = group_name <> '' AND EXISTS (SELECT 1 FROM job_groups WHERE name = jobs.group_name) WHERE rid = $5`,
			queue.ReasonRetryRequested, pending, r.Spec.Retries+1, now, r.rid, tz(queue.RetryDueAt(r.Spec)))
		if err != nil {
			return fmt.Errorf("postgres: retry: %w", err)
		}
		if out, err = reload(ctx, tx, r.rid); err != nil {
			return err
		}
		return s.notify(ctx, tx)
	})
	return out, err
}

// recoverSQL takes back expired leases in one guarded statement: only
// jobs still running whose lease has expired at the store's clock, locked
// FOR UPDATE SKIP LOCKED (a job being finished right now is skipped; the
// next round sees it finished). The lease is cleared in the same
// statement, so a late heartbeat or report of the old owner finds it
// gone. It returns the jobs as they were, with the old owner and expiry.
var recoverSQL = `WITH x AS (
	SELECT rid, lease_owner, lease_expires FROM jobs
	WHERE state = 'running' AND lease_expires < $1
	ORDER BY lease_expires LIMIT 1000
	FOR UPDATE SKIP LOCKED
)
UPDATE jobs j SET lease_owner = '', lease_expires = NULL
FROM x WHERE j.rid = x.rid AND j.state = 'running' AND j.lease_expires < $1
RETURNING ` + jobColsOf("j") + `, x.lease_owner, x.lease_expires`

// LeaseRecoverExpired implements Store: recoverSQL, then each job's next
// state by queue.AttemptInterrupted, in the same transaction.
func (s *Store) LeaseRecoverExpired(ctx context.Context) ([]queue.Job, error) {
	var out []queue.Job
	err := s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		out = nil
		rows, err := tx.Query(ctx, recoverSQL, now)
		if err != nil {
			return fmt.Errorf("postgres: recover: %w", err)
		}
		var expired []jobRow
		for rows.Next() {
			var owner string
			var exp time.Time
			r, err := scanJob(scanFunc(func(dest ...any) error { return rows.Scan(append(dest, &owner, &exp)...) }))
			if err != nil {
				rows.Close()
				return fmt.Errorf("postgres: recover: %w", err)
			}
			r.LeaseOwner, r.LeaseExpiresAt = owner, exp.UTC()
			expired = append(expired, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: recover: %w", err)
		}
		slices.SortFunc(expired, func(a, b jobRow) int { return cmp.Compare(a.rid, b.rid) })
		for _, r := range expired {
			why := queue.LeaseExpiredReason(r.LeaseOwner, r.LeaseExpiresAt)
			j, err := s.interrupt(ctx, tx, r, why, now, true)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		if len(out) == 0 {
			return nil
		}
		return s.notify(ctx, tx)
	})
	return out, err
}

// interrupt closes r's running attempt as interrupted and moves the job
// on as queue.AttemptInterrupted decides; it returns the job as it is
// now.
func (s *Store) interrupt(ctx context.Context, tx pgx.Tx, r jobRow, why string, now time.Time, counted bool) (queue.Job, error) {
	if err := closeAttempt(ctx, tx, r.rid, r.AttemptCount, now, queue.Attempt{Outcome: queue.OutcomeInterrupted, Reason: why}); err != nil {
		return queue.Job{}, err
	}
	t := queue.AttemptInterrupted(r.Job, why, counted)
	if t.RaiseMaxAttempts {
		if _, err := tx.Exec(ctx, `UPDATE jobs SET max_attempts = max_attempts + 1 WHERE rid = $1`, r.rid); err != nil {
			return queue.Job{}, fmt.Errorf("postgres: interrupt: %w", err)
		}
	}
	if _, err := setState(ctx, tx, r, t.State, t.Reason, time.Time{}, now); err != nil {
		return queue.Job{}, err
	}
	return reload(ctx, tx, r.rid)
}

// LeaseRelease implements Store.
func (s *Store) LeaseRelease(ctx context.Context, p *queue.LeaseReleaseParams) ([]queue.Job, error) {
	c, err := p.WithDefaults()
	if err != nil {
		return nil, err
	}
	var out []queue.Job
	err = s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		out = nil
		rows, err := tx.Query(ctx, `SELECT `+jobCols+` FROM jobs WHERE id = ANY($1) AND state = 'running' AND lease_owner = $2 ORDER BY rid FOR UPDATE`, c.JobIDs, c.WorkerID)
		if err != nil {
			return fmt.Errorf("postgres: lease release: %w", err)
		}
		var mine []jobRow
		for rows.Next() {
			r, err := scanJob(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("postgres: lease release: %w", err)
			}
			mine = append(mine, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: lease release: %w", err)
		}
		for _, r := range mine {
			j, err := s.interrupt(ctx, tx, r, c.Reason, now, false)
			if err != nil {
				return err
			}
			out = append(out, j)
		}
		if len(out) == 0 {
			return nil
		}
		return s.notify(ctx, tx)
	})
	return out, err
}

// runningByGroup counts the running jobs of each of the named groups
// (claimRunningSQL); a group with none is absent from the map.
func runningByGroup(ctx context.Context, tx pgx.Tx, names []string) (map[string]int, error) {
	rows, err := tx.Query(ctx, claimRunningSQL, names)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	running := map[string]int{}
	var name string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		running[name] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: claim: %w", err)
	}
	return running, nil
}

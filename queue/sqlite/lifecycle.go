package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"paddock/queue"
)

// JobClaim implements Store.
func (s *Store) JobClaim(ctx context.Context, p *queue.JobClaimParams) ([]queue.Job, error) {
	c, err := p.WithDefaults()
	if err != nil {
		return nil, err
	}
	p, limit, lease := &c, c.Limit, c.Lease
	var out []queue.Job
	err = s.tx(ctx, func(tx *sql.Tx) error {
		now := s.now()
		gate, policy, due, err := s.claimGate(ctx, tx)
		if err != nil {
			return err
		}
		if err := queue.CheckPolicyDigest(policy, p.PolicySHA256); err != nil {
			return err
		}
		if gate.Paused() {
			return nil
		}
		blockedList := gate.Blocked()
		blocked, _ := json.Marshal(blockedList)
		ids := ""
		if len(p.JobIDs) > 0 {
			b, err := json.Marshal(p.JobIDs)
			if err != nil {
				return fmt.Errorf("sqlite: claim: %w", err)
			}
			ids = string(b)
		}
		if due > 0 && due <= now {
			if _, err := s.cached(tx).ExecContext(ctx, claimPromoteSQL, now); err != nil {
				return fmt.Errorf("sqlite: claim: %w", err)
			}
		}
		var claimed []jobRow
		switch {
		case ids == "" && !gate.Limited():
			// Every limited or paused group is blocked: its jobs are out
			// of jobs_ready2, and the rest is one statement.
			rows, err := tx.StmtContext(ctx, s.stClaimOpen).QueryContext(ctx, p.WorkerID, now+int64(lease), now, now, now, limit)
			if claimed, err = scanClaimed(rows, err, claimed); err != nil {
				return err
			}
		case ids == "":
			if claimed, err = s.claimSeek(ctx, tx, gate, p.WorkerID, now, now+int64(lease), limit); err != nil {
				return err
			}
		case !gate.Limited():
			// Every job the subquery selects is admitted: one statement.
			st, args := s.stClaimIDs, []any{p.WorkerID, now + int64(lease), now, now, ids, now, string(blocked), limit}
			if len(blockedList) == 0 {
				st, args = s.stClaimOpenIDs, []any{p.WorkerID, now + int64(lease), now, now, ids, now, limit}
			}
			rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, args...)
			if claimed, err = scanClaimed(rows, err, claimed); err != nil {
				return err
			}
		default:
			if claimed, err = s.claimCounted(ctx, tx, gate, ids, p.WorkerID, now, now+int64(lease), limit); err != nil {
				return err
			}
		}
		// RETURNING has no order: hand the jobs out in claim order.
		slices.SortFunc(claimed, func(a, b jobRow) int {
			return cmp.Or(cmp.Compare(b.Spec.Priority, a.Spec.Priority), a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.rid, b.rid))
		})
		ins := tx.StmtContext(ctx, s.stAttemptIns)
		for _, r := range claimed {
			if _, err := ins.ExecContext(ctx, r.rid, r.AttemptCount, p.WorkerID, now, p.PolicySHA256); err != nil {
				return fmt.Errorf("sqlite: claim: %w", err)
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

// claimGate reads, in the claim's transaction and one statement, the
// queue's policy digest ("" when none is set), its pause, the earliest
// due time of the jobs not yet claimable for it (0: none), and its
// paused and limited groups with their running jobs.
func (s *Store) claimGate(ctx context.Context, tx *sql.Tx) (*queue.ClaimGate, string, int64, error) {
	rows, err := s.cached(tx).QueryContext(ctx, claimGroupsSQL)
	if err != nil {
		return nil, "", 0, fmt.Errorf("sqlite: claim: %w", err)
	}
	defer rows.Close()
	var q queue.QueueState
	var groups []queue.Group
	var policy string
	var due int64
	for first := true; rows.Next(); first = false {
		var g queue.Group
		var paused int
		var n int64
		var sha string
		if err := rows.Scan(&g.Name, &g.Limit, &paused, &n, &sha); err != nil {
			return nil, "", 0, fmt.Errorf("sqlite: claim: %w", err)
		}
		if first {
			q.Paused, due, policy = paused != 0, n, sha
			continue
		}
		g.Paused, g.Running = paused != 0, int(n)
		groups = append(groups, g)
	}
	if err := rows.Err(); err != nil {
		return nil, "", 0, fmt.Errorf("sqlite: claim: %w", err)
	}
	return queue.NewClaimGate(q, groups), policy, due, nil
}

// claimSeek is the claim of ready jobs when a group with a limit has
// slots left: the first limit jobs outside limited and paused groups,
// and of each group with room its first jobs up to its room, each read by
// a seek in claim order; queue.ClaimGate.Choose picks among them, and
// the chosen are taken in one statement. The jobs of full and paused
// groups are never read.
func (s *Store) claimSeek(ctx context.Context, tx *sql.Tx, gate *queue.ClaimGate, worker string, now, expires int64, limit int) ([]jobRow, error) {
	c := s.cached(tx)
	var cands []queue.ClaimCandidate
	pick := func(q string, args ...any) error {
		rows, err := c.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("sqlite: claim: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var x queue.ClaimCandidate
			var created int64
			if err := rows.Scan(&x.Row, &x.Group, &x.Priority, &created); err != nil {
				return fmt.Errorf("sqlite: claim: %w", err)
			}
			x.Created = ts(created)
			cands = append(cands, x)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("sqlite: claim: %w", err)
		}
		return nil
	}
	if err := pick(claimPickOpenSQL, now, limit); err != nil {
		return nil, err
	}
	for name, room := range gate.Rooms() {
		if err := pick(claimPickGroupSQL, name, now, min(room, limit)); err != nil {
			return nil, err
		}
	}
	take := gate.Choose(cands, limit)
	if len(take) == 0 {
		return nil, nil
	}
	b, _ := json.Marshal(take)
	rows, err := c.QueryContext(ctx, claimRidsUpdSQL, worker, expires, now, now, string(b))
	return scanClaimed(rows, err, nil)
}

// claimCounted is the claim of a list of ids when a group with a limit
// has slots left:
// select candidates, admit them through gate.Take, take the admitted,
// and select again while a group filled up and jobs are still wanted
// (queue.ClaimGate gives the rounds).
func (s *Store) claimCounted(ctx context.Context, tx *sql.Tx, gate *queue.ClaimGate, ids, worker string, now, expires int64, limit int) ([]jobRow, error) {
	var claimed []jobRow
	c := s.cached(tx)
	for len(claimed) < limit {
		blocked, _ := json.Marshal(gate.Blocked())
		want := limit - len(claimed)
		rows, err := c.QueryContext(ctx, claimPickIDsSQL, ids, now, string(blocked), want)
		if err != nil {
			return nil, fmt.Errorf("sqlite: claim: %w", err)
		}
		var take []int64
		picked, refused := 0, false
		for rows.Next() {
			var rid int64
			var group string
			if err := rows.Scan(&rid, &group); err != nil {
				rows.Close()
				return nil, fmt.Errorf("sqlite: claim: %w", err)
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
			return nil, fmt.Errorf("sqlite: claim: %w", err)
		}
		if len(take) > 0 {
			b, _ := json.Marshal(take)
			rows, err := c.QueryContext(ctx, claimRidsUpdSQL, worker, expires, now, now, string(b))
			if claimed, err = scanClaimed(rows, err, claimed); err != nil {
				return nil, err
			}
		}
		if !refused || picked < want {
			break
		}
	}
	return claimed, nil
}

// scanClaimed appends the rows of a claim's RETURNING to claimed.
func scanClaimed(rows *sql.Rows, err error, claimed []jobRow) ([]jobRow, error) {
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: claim: %w", err)
		}
		claimed = append(claimed, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: claim: %w", err)
	}
	return claimed, nil
}

// LeaseExtend implements Store.
func (s *Store) LeaseExtend(ctx context.Context, p *queue.LeaseExtendParams) ([]string, error) {
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
				return fmt.Errorf("sqlite: lease extend: %w", err)
			}
		}
		return nil
	})
	return stop, err
}

// AttemptFinish implements Store.
func (s *Store) AttemptFinish(ctx context.Context, p *queue.AttemptFinishParams) (queue.Job, error) {
	if err := p.Check(); err != nil {
		return queue.Job{}, err
	}
	a := p.Attempt
	var out queue.Job
	err := s.tx(ctx, func(stx *sql.Tx) error {
		tx := s.cached(stx)
		r, err := scanJob(tx.QueryRowContext(ctx, jobByIDSQL, p.JobID))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s", queue.ErrNotFound, p.JobID)
		}
		if err != nil {
			return fmt.Errorf("sqlite: attempt finish: %w", err)
		}
		if r.State != queue.StateRunning || r.LeaseOwner != p.WorkerID {
			return fmt.Errorf("%w: job %s is %s (lease owner %q), not running for worker %q", queue.ErrLeaseLost, r.ID, r.State, r.LeaseOwner, p.WorkerID)
		}
		now := s.now()
		ended := nsOf(a.EndedAt)
		if ended == 0 {
			ended = now
		}
		if err := s.closeAttempt(ctx, tx, r.rid, r.AttemptCount, ended, a); err != nil {
			return err
		}
		t := queue.AttemptEnded(r.Job, a.Outcome, a.Reason, s.rand())
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

func (s *Store) closeAttempt(ctx context.Context, tx execQuerier, rid int64, number int, ended int64, a queue.Attempt) error {
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
		return fmt.Errorf("sqlite: record attempt: %w", err)
	}
	return nil
}

func (s *Store) setState(ctx context.Context, tx execQuerier, r jobRow, next queue.JobState, reason string, notBefore, now int64) error {
	fin := int64(0)
	if next.Finished() {
		fin = now
	}
	_, err := tx.ExecContext(ctx, setStateSQL,
		string(next), reason, notBefore, b2i(notBefore > 0), fin, now, r.rid)
	if err != nil {
		return fmt.Errorf("sqlite: set state: %w", err)
	}
	switch next {
	case queue.StateSucceeded:
		return releaseDependents(ctx, tx, r.rid, now)
	case queue.StateFailed, queue.StateDenied, queue.StateCanceled:
		return failDependents(ctx, tx, r.rid, queue.JobLabel(r.ID, r.Name), next, now)
	}
	return nil
}

// reload reads a job back after a write, with its attempts but not its
// Source (see Job.Source).
func (s *Store) reload(ctx context.Context, q querier, rid int64) (queue.Job, error) {
	r, err := scanJob(q.QueryRowContext(ctx, jobByRidSQL, rid))
	if err != nil {
		return queue.Job{}, fmt.Errorf("sqlite: reload: %w", err)
	}
	if err := s.fill(ctx, q, &r, true, false); err != nil {
		return queue.Job{}, err
	}
	return r.Job, nil
}

// JobCancel implements Store.
func (s *Store) JobCancel(ctx context.Context, ref string) (queue.Job, error) {
	var out queue.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		r, err := resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		now := s.now()
		effect, err := queue.CancelOf(r.Job)
		if err != nil {
			out = r.Job
			return err
		}
		switch effect {
		case queue.CancelNow:
			if err := s.setState(ctx, tx, r, queue.StateCanceled, queue.ReasonCanceledBeforeStart, 0, now); err != nil {
				return err
			}
		case queue.CancelFlag:
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET cancel_requested = 1, reason = ?, updated_ns = ? WHERE rid = ?`, queue.ReasonCancelRequested, now, r.rid); err != nil {
				return fmt.Errorf("sqlite: cancel: %w", err)
			}
		}
		out, err = s.reload(ctx, tx, r.rid)
		return err
	})
	return out, err
}

// JobRetry implements Store.
func (s *Store) JobRetry(ctx context.Context, ref string) (queue.Job, error) {
	var out queue.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		r, err := resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		if err := queue.RetryCheck(r.Job); err != nil {
			return err
		}
		if r.Name != "" {
			var id, state string
			err := tx.QueryRowContext(ctx, `SELECT id, state FROM jobs WHERE name = ? AND state IN ('queued','running')`, r.Name).Scan(&id, &state)
			if err == nil {
				return queue.NameHeldError(r.Name, queue.JobState(state), id)
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("sqlite: retry: %w", err)
			}
		}
		rows, err := tx.QueryContext(ctx, retryDepsSQL, r.rid)
		if err != nil {
			return fmt.Errorf("sqlite: retry: %w", err)
		}
		pending := 0
		var blocked error
		for rows.Next() {
			var id, name, state string
			if err := rows.Scan(&id, &name, &state); err != nil {
				rows.Close()
				return fmt.Errorf("sqlite: retry: %w", err)
			}
			if blocked == nil {
				blocked = queue.RetryBlocked(r.Job, id, name, queue.JobState(state))
			}
			pending++
		}
		rows.Close()
		if blocked != nil {
			return blocked
		}
		now := s.now()
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET state = 'queued', reason = ?, deps_pending = ?, max_attempts = attempts + ?, not_before_ns = ?, scheduled = ?,
			gated = (group_name != '' AND EXISTS (SELECT 1 FROM job_groups WHERE name = jobs.group_name)), finished_ns = 0, updated_ns = ?, cancel_requested = 0 WHERE rid = ?`,
			queue.ReasonRetryRequested, pending, r.Spec.Retries+1, nsOf(queue.RetryDueAt(r.Spec)), b2i(!queue.RetryDueAt(r.Spec).IsZero()), now, r.rid)
		if err != nil {
			return fmt.Errorf("sqlite: retry: %w", err)
		}
		out, err = s.reload(ctx, tx, r.rid)
		return err
	})
	return out, err
}

// LeaseRecoverExpired implements Store.
func (s *Store) LeaseRecoverExpired(ctx context.Context) ([]queue.Job, error) {
	var out []queue.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		now := s.now()
		rows, err := tx.QueryContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE state = 'running' AND lease_expires_ns < ?`, now)
		if err != nil {
			return fmt.Errorf("sqlite: recover: %w", err)
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
			why := queue.LeaseExpiredReason(r.LeaseOwner, r.LeaseExpiresAt)
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
func (s *Store) interrupt(ctx context.Context, tx *sql.Tx, r jobRow, why string, now int64, counted bool) (queue.Job, error) {
	if err := s.closeAttempt(ctx, tx, r.rid, r.AttemptCount, now, queue.Attempt{Outcome: queue.OutcomeInterrupted, Reason: why}); err != nil {
		return queue.Job{}, err
	}
	t := queue.AttemptInterrupted(r.Job, why, counted)
	if t.RaiseMaxAttempts {
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET max_attempts = max_attempts + 1 WHERE rid = ?`, r.rid); err != nil {
			return queue.Job{}, fmt.Errorf("sqlite: interrupt: %w", err)
		}
	}
	if err := s.setState(ctx, tx, r, t.State, t.Reason, 0, now); err != nil {
		return queue.Job{}, err
	}
	return s.reload(ctx, tx, r.rid)
}

// LeaseRelease implements Store.
func (s *Store) LeaseRelease(ctx context.Context, p *queue.LeaseReleaseParams) ([]queue.Job, error) {
	c, err := p.WithDefaults()
	if err != nil {
		return nil, err
	}
	p, why := &c, c.Reason
	var out []queue.Job
	err = s.tx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		now := s.now()
		for _, id := range p.JobIDs {
			r, err := scanJob(tx.QueryRowContext(ctx, jobByIDSQL, id))
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return fmt.Errorf("sqlite: lease release: %w", err)
			}
			if r.State != queue.StateRunning || r.LeaseOwner != p.WorkerID {
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

// b2i is SQLite's boolean: 1 for true, 0 for false.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

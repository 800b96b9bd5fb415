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

// Schedules as in the SQLite store: a row per schedule whose next_at is
// the scheduler's cursor, and a row per decided tick whose primary key
// (schedule, tick) makes an instance per tick unique across hosts. A
// ScheduleTick locks the due schedules' rows FOR UPDATE SKIP LOCKED: two
// hosts ticking at once decide disjoint schedules, and the second finds
// the first's cursor moved once it commits.

const scheduleCols = `s.name, s.spec, s.source_path, s.paused, s.created_at, s.updated_at, s.next_at, s.last_tick, s.last_job_id, coalesce(j.state, ''), coalesce(src.text, '')`

const scheduleFrom = ` FROM schedules s LEFT JOIN jobs j ON j.id = s.last_job_id AND s.last_job_id <> '' LEFT JOIN sources src ON src.id = s.source_id`

const decisionCols = `schedule, tick, decision, count, job_id, at, worker_id, detail`

func scanSchedule(row pgx.Row) (queue.Schedule, error) {
	var (
		s                queue.Schedule
		spec             []byte
		state            string
		created, updated time.Time
		next, last       pgtype.Timestamptz
	)
	if err := row.Scan(&s.Name, &spec, &s.SourcePath, &s.Paused, &created, &updated, &next, &last, &s.LastJobID, &state, &s.Source); err != nil {
		return s, err
	}
	if err := json.Unmarshal(spec, &s.Spec); err != nil {
		return s, fmt.Errorf("postgres: schedule %s: corrupt spec: %w", s.Name, err)
	}
	s.CreatedAt, s.UpdatedAt, s.LastRun = created.UTC(), updated.UTC(), ts(last)
	if !s.Paused {
		s.NextRun = ts(next).In(s.Location())
	}
	if !s.LastRun.IsZero() {
		s.LastRun = s.LastRun.In(s.Location())
	}
	s.LastJobState = queue.JobState(state)
	return s, nil
}

func scanDecision(row pgx.Row) (queue.ScheduleDecision, error) {
	var d queue.ScheduleDecision
	var tick, at time.Time
	if err := row.Scan(&d.Schedule, &tick, &d.Decision, &d.Count, &d.JobID, &at, &d.WorkerID, &d.Detail); err != nil {
		return d, err
	}
	d.Tick, d.At = tick.UTC(), at.UTC()
	return d, nil
}

func getSchedule(ctx context.Context, q pgx.Tx, name string) (queue.Schedule, error) {
	s, err := scanSchedule(q.QueryRow(ctx, `SELECT `+scheduleCols+scheduleFrom+` WHERE s.name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("%w: %q", queue.ErrScheduleNotFound, name)
	}
	if err != nil {
		return s, fmt.Errorf("postgres: schedule %s: %w", name, err)
	}
	d, err := scanDecision(q.QueryRow(ctx, `SELECT `+decisionCols+` FROM schedule_decisions WHERE schedule = $1 ORDER BY at DESC, tick DESC LIMIT 1`, name))
	switch {
	case err == nil:
		s.LastDecision = &d
	case !errors.Is(err, pgx.ErrNoRows):
		return s, fmt.Errorf("postgres: schedule %s: %w", name, err)
	}
	return s, nil
}

// ScheduleUpsert implements Store.
func (s *Store) ScheduleUpsert(ctx context.Context, p *queue.ScheduleUpsertParams) ([]queue.Schedule, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	var out []queue.Schedule
	err := s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		var err error
		out, err = s.scheduleUpsertTx(ctx, tx, p, now)
		return err
	})
	return out, err
}

// scheduleUpsertTx stores validated scheduled specs in tx.
func (s *Store) scheduleUpsertTx(ctx context.Context, tx pgx.Tx, p *queue.ScheduleUpsertParams, now time.Time) ([]queue.Schedule, error) {
	var srcID int64
	if err := tx.QueryRow(ctx, `INSERT INTO sources (path, text, jobs) VALUES ($1, $2, $3) RETURNING id`, p.SourcePath, p.Source, len(p.Specs)).Scan(&srcID); err != nil {
		return nil, fmt.Errorf("postgres: schedule upsert: %w", err)
	}
	out := make([]queue.Schedule, 0, len(p.Specs))
	for _, sp := range p.Specs {
		c, err := jobspec.ParseCron(sp.Schedule)
		if err != nil { // validated before; kept for Go callers' safety
			return nil, fmt.Errorf("%w: %s", jobspec.ErrInvalid, err)
		}
		sp.Schedule = c.String()
		specJSON, err := json.Marshal(&sp)
		if err != nil {
			return nil, fmt.Errorf("postgres: encode spec: %w", err)
		}
		next := c.Next(now, sp.Location())
		var oldExpr, oldTZ string
		var oldSrc int64
		err = tx.QueryRow(ctx, `SELECT expr, timezone, source_id FROM schedules WHERE name = $1 FOR UPDATE`, sp.Name).Scan(&oldExpr, &oldTZ, &oldSrc)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			_, err = tx.Exec(ctx, `INSERT INTO schedules (name, spec, expr, timezone, source_id, source_path, created_at, updated_at, next_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8)`,
				sp.Name, string(specJSON), sp.Schedule, sp.Timezone, srcID, p.SourcePath, now, tz(next))
		case err == nil:
			changed := oldExpr != sp.Schedule || oldTZ != sp.Timezone
			_, err = tx.Exec(ctx, `UPDATE schedules SET spec = $1, expr = $2, timezone = $3, source_id = $4, source_path = $5, updated_at = $6,
				next_at = CASE WHEN $7 THEN $8 ELSE next_at END, deferred_at = CASE WHEN $7 THEN NULL ELSE deferred_at END WHERE name = $9`,
				string(specJSON), sp.Schedule, sp.Timezone, srcID, p.SourcePath, now, changed, tz(next), sp.Name)
			if err == nil && changed {
				err = dropDeferred(ctx, tx, sp.Name, "dropped: the schedule's expression or time zone changed while this tick waited")
			}
			if err == nil {
				err = releaseSource(ctx, tx, oldSrc)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("postgres: schedule upsert %s: %w", sp.Name, err)
		}
		sc, err := getSchedule(ctx, tx, sp.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

// dropDeferred records that a waiting (overlap = "queue") tick of name
// will not run.
func dropDeferred(ctx context.Context, tx pgx.Tx, name, why string) error {
	_, err := tx.Exec(ctx, `UPDATE schedule_decisions SET decision = $1, detail = $2 WHERE schedule = $3 AND decision = $4`,
		queue.DecisionSkippedOverlap, why, name, queue.DecisionDeferred)
	if err != nil {
		return fmt.Errorf("postgres: schedule %s: %w", name, err)
	}
	return nil
}

// releaseSource drops one reference to a sources row, deleting it at 0.
func releaseSource(ctx context.Context, tx pgx.Tx, id int64) error {
	if _, err := tx.Exec(ctx, `UPDATE sources SET jobs = jobs - 1 WHERE id = $1`, id); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM sources WHERE id = $1 AND jobs <= 0`, id)
	return err
}

// ScheduleGet implements Store.
func (s *Store) ScheduleGet(ctx context.Context, name string) (queue.Schedule, error) {
	var out queue.Schedule
	err := s.read(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = getSchedule(ctx, tx, name)
		return err
	})
	return out, err
}

// ScheduleList implements Store.
func (s *Store) ScheduleList(ctx context.Context, p *queue.ScheduleListParams) ([]queue.Schedule, error) {
	if p == nil {
		p = &queue.ScheduleListParams{}
	}
	var out []queue.Schedule
	err := s.read(ctx, func(tx pgx.Tx) error {
		q := `SELECT name FROM schedules`
		var args []any
		if p.NameGlob != "" {
			q += ` WHERE name LIKE $1 COLLATE "C"`
			args = append(args, likePattern(p.NameGlob))
		}
		rows, err := tx.Query(ctx, q+` ORDER BY name COLLATE "C"`, args...)
		if err != nil {
			return fmt.Errorf("postgres: schedule list: %w", err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("postgres: schedule list: %w", err)
		}
		out = make([]queue.Schedule, 0, len(names))
		for _, n := range names {
			sc, err := getSchedule(ctx, tx, n)
			if err != nil {
				return err
			}
			out = append(out, sc)
		}
		return nil
	})
	return out, err
}

func (s *Store) schedulePaused(ctx context.Context, name string, pause bool) (queue.Schedule, error) {
	var out queue.Schedule
	err := s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM schedules WHERE name = $1 FOR UPDATE`, name); err != nil {
			return fmt.Errorf("postgres: schedule %s: %w", name, err)
		}
		cur, err := getSchedule(ctx, tx, name)
		if err != nil {
			return err
		}
		if cur.Paused != pause {
			q, args := `UPDATE schedules SET paused = true, deferred_at = NULL, updated_at = $1 WHERE name = $2`, []any{now, name}
			if !pause {
				c, err := jobspec.ParseCron(cur.Spec.Schedule)
				if err != nil {
					return fmt.Errorf("postgres: schedule %s: %w", name, err)
				}
				next := c.Next(now, cur.Location())
				q, args = `UPDATE schedules SET paused = false, next_at = $1, updated_at = $2 WHERE name = $3`, []any{tz(next), now, name}
			}
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return fmt.Errorf("postgres: schedule %s: %w", name, err)
			}
			if err := dropDeferred(ctx, tx, name, "dropped: the schedule was paused while this tick waited"); err != nil {
				return err
			}
		}
		out, err = getSchedule(ctx, tx, name)
		return err
	})
	return out, err
}

// SchedulePause implements Store. A tick waiting for a running instance
// (overlap = "queue") is dropped.
func (s *Store) SchedulePause(ctx context.Context, name string) (queue.Schedule, error) {
	return s.schedulePaused(ctx, name, true)
}

// ScheduleResume implements Store.
func (s *Store) ScheduleResume(ctx context.Context, name string) (queue.Schedule, error) {
	return s.schedulePaused(ctx, name, false)
}

// ScheduleDelete implements Store.
func (s *Store) ScheduleDelete(ctx context.Context, name string) error {
	return s.tx(ctx, func(tx pgx.Tx, _ time.Time) error {
		var src int64
		err := tx.QueryRow(ctx, `DELETE FROM schedules WHERE name = $1 RETURNING source_id`, name).Scan(&src)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", queue.ErrScheduleNotFound, name)
		}
		if err == nil {
			err = releaseSource(ctx, tx, src)
		}
		if err == nil {
			_, err = tx.Exec(ctx, `DELETE FROM schedule_decisions WHERE schedule = $1`, name)
		}
		if err != nil {
			return fmt.Errorf("postgres: schedule delete %s: %w", name, err)
		}
		return nil
	})
}

// ScheduleDecisionList implements Store.
func (s *Store) ScheduleDecisionList(ctx context.Context, p *queue.ScheduleDecisionListParams) ([]queue.ScheduleDecision, error) {
	if s.closed.Load() {
		return nil, queue.ErrClosed
	}
	if p == nil {
		p = &queue.ScheduleDecisionListParams{}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT `+decisionCols+` FROM schedule_decisions WHERE ($1 = '' OR schedule = $1) ORDER BY at DESC, tick DESC LIMIT $2`, p.Schedule, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: schedule decisions: %w", err)
	}
	defer rows.Close()
	var out []queue.ScheduleDecision
	for rows.Next() {
		d, err := scanDecision(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: schedule decisions: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// ScheduleTick implements Store.
func (s *Store) ScheduleTick(ctx context.Context, p *queue.ScheduleTickParams) (queue.ScheduleTickResult, error) {
	var res queue.ScheduleTickResult
	if p == nil || p.WorkerID == "" {
		return res, errors.New("postgres: schedule tick: WorkerID is required")
	}
	if s.closed.Load() {
		return res, queue.ErrClosed
	}
	// Most calls find nothing due: answer them with one read.
	var minNext pgtype.Timestamptz
	var deferred int64
	var dbNow time.Time
	// Retried as a transaction is while the server cannot be reached.
	err := s.retry(ctx, func() (bool, error) {
		return false, s.pool.QueryRow(ctx, `SELECT (SELECT min(next_at) FROM schedules WHERE NOT paused),
		(SELECT count(*) FROM schedules WHERE NOT paused AND deferred_at IS NOT NULL), coalesce($1::timestamptz, now())`, s.nowArg()).Scan(&minNext, &deferred, &dbNow)
	})
	if err != nil {
		return res, fmt.Errorf("postgres: schedule tick: %w", err)
	}
	if !minNext.Valid {
		return res, nil
	}
	if deferred == 0 && minNext.Time.After(dbNow) {
		res.NextDue = ts(minNext)
		return res, nil
	}
	err = s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		res = queue.ScheduleTickResult{}
		type row struct {
			name, lastJob, srcPath string
			spec                   []byte
			srcID                  int64
			next, deferred         pgtype.Timestamptz
		}
		rows, err := tx.Query(ctx, `SELECT name, spec, last_job_id, source_path, source_id, next_at, deferred_at FROM schedules
			WHERE NOT paused AND (next_at <= $1 OR deferred_at IS NOT NULL) ORDER BY next_at, name FOR UPDATE SKIP LOCKED`, now)
		if err != nil {
			return fmt.Errorf("postgres: schedule tick: %w", err)
		}
		var due []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.name, &r.spec, &r.lastJob, &r.srcPath, &r.srcID, &r.next, &r.deferred); err != nil {
				rows.Close()
				return fmt.Errorf("postgres: schedule tick: %w", err)
			}
			due = append(due, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: schedule tick: %w", err)
		}
		for _, r := range due {
			st := queue.TickState{Next: ts(r.next), Deferred: ts(r.deferred)}
			if err := json.Unmarshal(r.spec, &st.Spec); err != nil {
				return fmt.Errorf("postgres: schedule %s: corrupt spec: %w", r.name, err)
			}
			if st.Cron, err = jobspec.ParseCron(st.Spec.Schedule); err != nil {
				return fmt.Errorf("postgres: schedule %s: %w", r.name, err)
			}
			if r.lastJob != "" {
				var state string
				err := tx.QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, r.lastJob).Scan(&state)
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return fmt.Errorf("postgres: schedule tick: %w", err)
				}
				if state == string(queue.StateQueued) || state == string(queue.StateRunning) {
					st.Busy = r.lastJob
				}
			}
			plan, next, deferred := queue.PlanTick(st, now)
			var lastTick time.Time
			lastJob := ""
			for _, d := range plan {
				rec := queue.ScheduleDecision{Schedule: r.name, Tick: d.Tick.UTC(), Decision: d.Decision, Count: d.Count, At: now, WorkerID: p.WorkerID, Detail: d.Detail}
				if d.Instance {
					rec.JobID = queue.NewID(now)
				}
				// The primary key (schedule, tick) decides each tick once;
				// only a waiting (deferred) tick may be decided again.
				tag, err := tx.Exec(ctx, `INSERT INTO schedule_decisions (`+decisionCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
					ON CONFLICT (schedule, tick) DO UPDATE SET decision = excluded.decision, count = excluded.count, job_id = excluded.job_id,
						at = excluded.at, worker_id = excluded.worker_id, detail = excluded.detail
					WHERE schedule_decisions.decision = 'deferred'`,
					rec.Schedule, rec.Tick, rec.Decision, rec.Count, rec.JobID, now, rec.WorkerID, rec.Detail)
				if err != nil {
					return fmt.Errorf("postgres: schedule tick: %w", err)
				}
				if tag.RowsAffected() == 0 {
					continue // decided before
				}
				if d.Instance {
					j, err := insertInstance(ctx, tx, queue.InstanceSpec(st.Spec, d.Tick), rec.JobID, r.srcID, r.srcPath, now)
					if err != nil {
						return err
					}
					res.Jobs = append(res.Jobs, j)
					lastTick, lastJob = d.Tick, j.ID
				}
				res.Decisions = append(res.Decisions, rec)
			}
			if _, err := tx.Exec(ctx, `UPDATE schedules SET next_at = $1, deferred_at = $2,
				last_tick = CASE WHEN $3 <> '' THEN $4 ELSE last_tick END, last_job_id = CASE WHEN $3 <> '' THEN $3 ELSE last_job_id END WHERE name = $5`,
				tz(next), tz(deferred), lastJob, tz(lastTick), r.name); err != nil {
				return fmt.Errorf("postgres: schedule tick: %w", err)
			}
		}
		var minNext pgtype.Timestamptz
		if err := tx.QueryRow(ctx, `SELECT min(next_at) FROM schedules WHERE NOT paused`).Scan(&minNext); err != nil {
			return fmt.Errorf("postgres: schedule tick: %w", err)
		}
		res.NextDue = ts(minNext)
		if len(res.Jobs) == 0 {
			return nil
		}
		return s.notify(ctx, tx)
	})
	return res, err
}

// insertInstance enqueues sp, the instance of a schedule
// (queue.InstanceSpec), sharing the schedule's source row.
func insertInstance(ctx context.Context, tx pgx.Tx, sp jobspec.Spec, id string, srcID int64, srcPath string, now time.Time) (queue.Job, error) {
	sp.Line = 0
	specJSON, err := json.Marshal(&sp)
	if err != nil {
		return queue.Job{}, fmt.Errorf("postgres: encode spec: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE sources SET jobs = jobs + 1 WHERE id = $1`, srcID); err != nil {
		return queue.Job{}, fmt.Errorf("postgres: schedule instance: %w", err)
	}
	due := dueAt(sp, now)
	if err := shareGroups(ctx, tx, []string{sp.Group}); err != nil {
		return queue.Job{}, err
	}
	_, err = tx.Exec(ctx, `INSERT INTO jobs (id, name, priority, created_at, updated_at, deps_pending, max_attempts, spec, source_id, source_path, group_name, not_before, state, scheduled, gated)
		VALUES ($1, $2, $3, $4, $4, 0, $5, $6, $7, $8, $9, $10, 'queued', $10::timestamptz IS NOT NULL, $9 <> '' AND EXISTS (SELECT 1 FROM job_groups WHERE name = $9))`, id, sp.Name, sp.Priority, now, sp.Retries+1, string(specJSON), srcID, srcPath, sp.Group, tz(due))
	if err != nil {
		return queue.Job{}, fmt.Errorf("postgres: schedule instance: %w", err)
	}
	return queue.Job{ID: id, Name: sp.Name, State: queue.StateQueued, Spec: sp, SourcePath: srcPath, MaxAttempts: sp.Retries + 1,
		CreatedAt: now, UpdatedAt: now, NotBefore: due}, nil
}

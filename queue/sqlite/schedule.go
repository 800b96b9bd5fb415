package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"paddock/jobspec"
	"paddock/queue"
)

// Schedules in SQLite: one row per schedule, whose next_ns is the
// scheduler's cursor (the first tick not decided yet), and one row per
// decided tick in schedule_decisions, whose primary key (schedule, tick_ns)
// is what makes an instance per tick unique. Every ScheduleTick runs in one
// IMMEDIATE transaction: two workers never decide the same tick.
const scheduleSchema = `
CREATE TABLE IF NOT EXISTS schedules (
	name         TEXT PRIMARY KEY,
	spec         TEXT NOT NULL,
	expr         TEXT NOT NULL,
	timezone     TEXT NOT NULL,
	source_id    INTEGER NOT NULL,
	source_path  TEXT NOT NULL DEFAULT '',
	paused       INTEGER NOT NULL DEFAULT 0,
	created_ns   INTEGER NOT NULL,
	updated_ns   INTEGER NOT NULL,
	next_ns      INTEGER NOT NULL,
	deferred_ns  INTEGER NOT NULL DEFAULT 0,
	last_tick_ns INTEGER NOT NULL DEFAULT 0,
	last_job_id  TEXT NOT NULL DEFAULT ''
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS schedules_due ON schedules(next_ns) WHERE paused = 0;
CREATE TABLE IF NOT EXISTS schedule_decisions (
	schedule  TEXT NOT NULL,
	tick_ns   INTEGER NOT NULL,
	decision  TEXT NOT NULL,
	count     INTEGER NOT NULL DEFAULT 1,
	job_id    TEXT NOT NULL DEFAULT '',
	at_ns     INTEGER NOT NULL,
	worker_id TEXT NOT NULL DEFAULT '',
	detail    TEXT NOT NULL DEFAULT '',
	PRIMARY KEY (schedule, tick_ns)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS schedule_decisions_at ON schedule_decisions(at_ns);
`

const scheduleCols = `s.name, s.spec, s.source_path, s.paused, s.created_ns, s.updated_ns, s.next_ns, s.last_tick_ns, s.last_job_id, coalesce(j.state, ''), coalesce(src.text, '')`

const scheduleFrom = ` FROM schedules s LEFT JOIN jobs j ON j.id = s.last_job_id AND s.last_job_id != '' LEFT JOIN sources src ON src.id = s.source_id`

const decisionCols = `schedule, tick_ns, decision, count, job_id, at_ns, worker_id, detail`

func scanSchedule(sc scanner) (queue.Schedule, error) {
	var (
		s                            queue.Schedule
		spec, state                  string
		paused                       int
		created, updated, next, last int64
	)
	if err := sc.Scan(&s.Name, &spec, &s.SourcePath, &paused, &created, &updated, &next, &last, &s.LastJobID, &state, &s.Source); err != nil {
		return s, err
	}
	if err := json.Unmarshal([]byte(spec), &s.Spec); err != nil {
		return s, fmt.Errorf("sqlite: schedule %s: corrupt spec: %w", s.Name, err)
	}
	s.Paused = paused != 0
	s.CreatedAt, s.UpdatedAt, s.LastRun = ts(created), ts(updated), ts(last)
	if !s.Paused {
		s.NextRun = ts(next).In(s.Location())
	}
	if !s.LastRun.IsZero() {
		s.LastRun = s.LastRun.In(s.Location())
	}
	s.LastJobState = queue.JobState(state)
	return s, nil
}

func scanDecision(sc scanner) (queue.ScheduleDecision, error) {
	var d queue.ScheduleDecision
	var tick, at int64
	if err := sc.Scan(&d.Schedule, &tick, &d.Decision, &d.Count, &d.JobID, &at, &d.WorkerID, &d.Detail); err != nil {
		return d, err
	}
	d.Tick, d.At = ts(tick), ts(at)
	return d, nil
}

func getSchedule(ctx context.Context, q querier, name string) (queue.Schedule, error) {
	s, err := scanSchedule(q.QueryRowContext(ctx, `SELECT `+scheduleCols+scheduleFrom+` WHERE s.name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return s, fmt.Errorf("%w: %q", queue.ErrScheduleNotFound, name)
	}
	if err != nil {
		return s, fmt.Errorf("sqlite: schedule %s: %w", name, err)
	}
	d, err := scanDecision(q.QueryRowContext(ctx, `SELECT `+decisionCols+` FROM schedule_decisions WHERE schedule = ? ORDER BY at_ns DESC, tick_ns DESC LIMIT 1`, name))
	switch {
	case err == nil:
		s.LastDecision = &d
	case !errors.Is(err, sql.ErrNoRows):
		return s, fmt.Errorf("sqlite: schedule %s: %w", name, err)
	}
	return s, nil
}

// ScheduleUpsert implements Store.
func (s *Store) ScheduleUpsert(ctx context.Context, p *queue.ScheduleUpsertParams) ([]queue.Schedule, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	var out []queue.Schedule
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.scheduleUpsertTx(ctx, tx, p, s.now())
		return err
	})
	return out, err
}

// scheduleUpsertTx stores validated scheduled specs in tx.
func (s *Store) scheduleUpsertTx(ctx context.Context, tx *sql.Tx, p *queue.ScheduleUpsertParams, now int64) ([]queue.Schedule, error) {
	res, err := tx.ExecContext(ctx, `INSERT INTO sources (path, text, jobs) VALUES (?, ?, ?)`, p.SourcePath, p.Source, len(p.Specs))
	if err != nil {
		return nil, fmt.Errorf("sqlite: schedule upsert: %w", err)
	}
	srcID, _ := res.LastInsertId()
	out := make([]queue.Schedule, 0, len(p.Specs))
	for _, sp := range p.Specs {
		c, err := jobspec.ParseCron(sp.Schedule)
		if err != nil { // validated before; kept for Go callers' safety
			return nil, fmt.Errorf("%w: %s", jobspec.ErrInvalid, err)
		}
		sp.Schedule = c.String()
		specJSON, err := json.Marshal(&sp)
		if err != nil {
			return nil, fmt.Errorf("sqlite: encode spec: %w", err)
		}
		next := c.Next(ts(now), sp.Location()).UnixNano()
		var oldExpr, oldTZ string
		var oldSrc int64
		err = tx.QueryRowContext(ctx, `SELECT expr, timezone, source_id FROM schedules WHERE name = ?`, sp.Name).Scan(&oldExpr, &oldTZ, &oldSrc)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, `INSERT INTO schedules (name, spec, expr, timezone, source_id, source_path, created_ns, updated_ns, next_ns) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				sp.Name, string(specJSON), sp.Schedule, sp.Timezone, srcID, p.SourcePath, now, now, next)
		case err == nil:
			q := `UPDATE schedules SET spec = ?, expr = ?, timezone = ?, source_id = ?, source_path = ?, updated_ns = ?`
			args := []any{string(specJSON), sp.Schedule, sp.Timezone, srcID, p.SourcePath, now}
			changed := oldExpr != sp.Schedule || oldTZ != sp.Timezone
			if changed {
				q += `, next_ns = ?, deferred_ns = 0`
				args = append(args, next)
			}
			_, err = tx.ExecContext(ctx, q+` WHERE name = ?`, append(args, sp.Name)...)
			if err == nil && changed {
				err = dropDeferred(ctx, tx, sp.Name, "dropped: the schedule's expression or time zone changed while this tick waited")
			}
			if err == nil {
				err = releaseSource(ctx, tx, oldSrc)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite: schedule upsert %s: %w", sp.Name, err)
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
func dropDeferred(ctx context.Context, tx *sql.Tx, name, why string) error {
	_, err := tx.ExecContext(ctx, `UPDATE schedule_decisions SET decision = ?, detail = ? WHERE schedule = ? AND decision = ?`,
		queue.DecisionSkippedOverlap, why, name, queue.DecisionDeferred)
	if err != nil {
		return fmt.Errorf("sqlite: schedule %s: %w", name, err)
	}
	return nil
}

// releaseSource drops one reference to a sources row, deleting it at 0.
func releaseSource(ctx context.Context, tx *sql.Tx, id int64) error {
	if _, err := tx.ExecContext(ctx, `UPDATE sources SET jobs = jobs - 1 WHERE id = ?`, id); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM sources WHERE id = ? AND jobs <= 0`, id)
	return err
}

// ScheduleGet implements Store.
func (s *Store) ScheduleGet(ctx context.Context, name string) (queue.Schedule, error) {
	if s.closed.Load() {
		return queue.Schedule{}, queue.ErrClosed
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return queue.Schedule{}, fmt.Errorf("sqlite: schedule get: %w", err)
	}
	defer tx.Rollback()
	return getSchedule(ctx, tx, name)
}

// ScheduleList implements Store.
func (s *Store) ScheduleList(ctx context.Context, p *queue.ScheduleListParams) ([]queue.Schedule, error) {
	if s.closed.Load() {
		return nil, queue.ErrClosed
	}
	if p == nil {
		p = &queue.ScheduleListParams{}
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: schedule list: %w", err)
	}
	defer tx.Rollback()
	q := `SELECT name FROM schedules`
	var args []any
	if p.NameGlob != "" {
		q += ` WHERE name GLOB ?`
		args = append(args, p.NameGlob)
	}
	rows, err := tx.QueryContext(ctx, q+` ORDER BY name`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: schedule list: %w", err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: schedule list: %w", err)
		}
		names = append(names, n)
	}
	rows.Close()
	out := make([]queue.Schedule, 0, len(names))
	for _, n := range names {
		sc, err := getSchedule(ctx, tx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}

func (s *Store) schedulePaused(ctx context.Context, name string, pause bool) (queue.Schedule, error) {
	var out queue.Schedule
	err := s.tx(ctx, func(tx *sql.Tx) error {
		cur, err := getSchedule(ctx, tx, name)
		if err != nil {
			return err
		}
		if cur.Paused != pause {
			now := s.now()
			q, args := `UPDATE schedules SET paused = 1, deferred_ns = 0, updated_ns = ? WHERE name = ?`, []any{now, name}
			if !pause {
				c, err := jobspec.ParseCron(cur.Spec.Schedule)
				if err != nil {
					return fmt.Errorf("sqlite: schedule %s: %w", name, err)
				}
				next := c.Next(ts(now), cur.Location()).UnixNano()
				q, args = `UPDATE schedules SET paused = 0, next_ns = ?, updated_ns = ? WHERE name = ?`, []any{next, now, name}
			}
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return fmt.Errorf("sqlite: schedule %s: %w", name, err)
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
	return s.tx(ctx, func(tx *sql.Tx) error {
		var src int64
		err := tx.QueryRowContext(ctx, `DELETE FROM schedules WHERE name = ? RETURNING source_id`, name).Scan(&src)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", queue.ErrScheduleNotFound, name)
		}
		if err == nil {
			err = releaseSource(ctx, tx, src)
		}
		if err == nil {
			_, err = tx.ExecContext(ctx, `DELETE FROM schedule_decisions WHERE schedule = ?`, name)
		}
		if err != nil {
			return fmt.Errorf("sqlite: schedule delete %s: %w", name, err)
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
	q := `SELECT ` + decisionCols + ` FROM schedule_decisions`
	var args []any
	if p.Schedule != "" {
		q += ` WHERE schedule = ?`
		args = append(args, p.Schedule)
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY at_ns DESC, tick_ns DESC LIMIT `+strconv.Itoa(limit), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: schedule decisions: %w", err)
	}
	defer rows.Close()
	var out []queue.ScheduleDecision
	for rows.Next() {
		d, err := scanDecision(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: schedule decisions: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

func pruneScheduleDecisions(ctx context.Context, tx *sql.Tx, cutoff int64) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM schedule_decisions WHERE at_ns <= ? AND decision != ?`, cutoff, queue.DecisionDeferred); err != nil {
		return fmt.Errorf("sqlite: prune: %w", err)
	}
	return nil
}

// ScheduleTick implements Store.
func (s *Store) ScheduleTick(ctx context.Context, p *queue.ScheduleTickParams) (queue.ScheduleTickResult, error) {
	var res queue.ScheduleTickResult
	if p == nil || p.WorkerID == "" {
		return res, errors.New("sqlite: schedule tick: WorkerID is required")
	}
	// Most calls find nothing due: answer them from a reader, without the
	// write lock.
	if s.closed.Load() {
		return res, queue.ErrClosed
	}
	var minNext sql.NullInt64
	var deferred int
	err := s.r.QueryRowContext(ctx, `SELECT (SELECT min(next_ns) FROM schedules WHERE paused = 0),
		(SELECT count(*) FROM schedules WHERE paused = 0 AND deferred_ns > 0)`).Scan(&minNext, &deferred)
	if err != nil {
		return res, fmt.Errorf("sqlite: schedule tick: %w", err)
	}
	if !minNext.Valid {
		return res, nil
	}
	if deferred == 0 && minNext.Int64 > s.now() {
		res.NextDue = ts(minNext.Int64)
		return res, nil
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		res = queue.ScheduleTickResult{}
		now := s.now()
		type row struct {
			name, spec, lastJob, srcPath string
			srcID, next, deferred        int64
		}
		rows, err := tx.QueryContext(ctx, `SELECT name, spec, last_job_id, source_path, source_id, next_ns, deferred_ns FROM schedules
			WHERE paused = 0 AND (next_ns <= ? OR deferred_ns > 0) ORDER BY next_ns, name`, now)
		if err != nil {
			return fmt.Errorf("sqlite: schedule tick: %w", err)
		}
		var due []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.name, &r.spec, &r.lastJob, &r.srcPath, &r.srcID, &r.next, &r.deferred); err != nil {
				rows.Close()
				return fmt.Errorf("sqlite: schedule tick: %w", err)
			}
			due = append(due, r)
		}
		rows.Close()
		for _, r := range due {
			st := queue.TickState{Next: ts(r.next), Deferred: ts(r.deferred)}
			if err := json.Unmarshal([]byte(r.spec), &st.Spec); err != nil {
				return fmt.Errorf("sqlite: schedule %s: corrupt spec: %w", r.name, err)
			}
			if st.Cron, err = jobspec.ParseCron(st.Spec.Schedule); err != nil {
				return fmt.Errorf("sqlite: schedule %s: %w", r.name, err)
			}
			if r.lastJob != "" {
				var state string
				err := tx.QueryRowContext(ctx, `SELECT state FROM jobs WHERE id = ?`, r.lastJob).Scan(&state)
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return fmt.Errorf("sqlite: schedule tick: %w", err)
				}
				if state == string(queue.StateQueued) || state == string(queue.StateRunning) {
					st.Busy = r.lastJob
				}
			}
			plan, next, deferred := queue.PlanTick(st, ts(now))
			lastTick, lastJob := int64(0), ""
			for _, d := range plan {
				rec := queue.ScheduleDecision{Schedule: r.name, Tick: d.Tick, Decision: d.Decision, Count: d.Count, At: ts(now), WorkerID: p.WorkerID, Detail: d.Detail}
				if d.Instance {
					rec.JobID = queue.NewID(ts(now))
				}
				// The primary key (schedule, tick_ns) decides each tick once;
				// only a waiting (deferred) tick may be decided again.
				res2, err := tx.ExecContext(ctx, `INSERT INTO schedule_decisions (`+decisionCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
					ON CONFLICT (schedule, tick_ns) DO UPDATE SET decision = excluded.decision, count = excluded.count, job_id = excluded.job_id,
						at_ns = excluded.at_ns, worker_id = excluded.worker_id, detail = excluded.detail
					WHERE schedule_decisions.decision = 'deferred'`,
					rec.Schedule, nsOf(rec.Tick), rec.Decision, rec.Count, rec.JobID, now, rec.WorkerID, rec.Detail)
				if err != nil {
					return fmt.Errorf("sqlite: schedule tick: %w", err)
				}
				if n, _ := res2.RowsAffected(); n == 0 {
					continue // decided before
				}
				if d.Instance {
					j, err := s.insertInstance(ctx, tx, queue.InstanceSpec(st.Spec, d.Tick), rec.JobID, r.srcID, r.srcPath, now)
					if err != nil {
						return err
					}
					res.Jobs = append(res.Jobs, j)
					lastTick, lastJob = nsOf(d.Tick), j.ID
				}
				res.Decisions = append(res.Decisions, rec)
			}
			q, args := `UPDATE schedules SET next_ns = ?, deferred_ns = ?`, []any{nsOf(next), nsOf(deferred)}
			if lastJob != "" {
				q += `, last_tick_ns = ?, last_job_id = ?`
				args = append(args, lastTick, lastJob)
			}
			if _, err := tx.ExecContext(ctx, q+` WHERE name = ?`, append(args, r.name)...); err != nil {
				return fmt.Errorf("sqlite: schedule tick: %w", err)
			}
		}
		var minNext sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT min(next_ns) FROM schedules WHERE paused = 0`).Scan(&minNext); err != nil {
			return fmt.Errorf("sqlite: schedule tick: %w", err)
		}
		if minNext.Valid {
			res.NextDue = ts(minNext.Int64)
		}
		return nil
	})
	return res, err
}

// insertInstance enqueues sp, the instance of a schedule
// (queue.InstanceSpec), sharing the schedule's source row.
func (s *Store) insertInstance(ctx context.Context, tx *sql.Tx, sp jobspec.Spec, id string, srcID int64, srcPath string, now int64) (queue.Job, error) {
	sp.Line = 0
	specJSON, err := json.Marshal(&sp)
	if err != nil {
		return queue.Job{}, fmt.Errorf("sqlite: encode spec: %w", err)
	}
	var rid int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(rid), 0) + 1 FROM jobs`).Scan(&rid); err != nil {
		return queue.Job{}, fmt.Errorf("sqlite: schedule instance: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sources SET jobs = jobs + 1 WHERE id = ?`, srcID); err != nil {
		return queue.Job{}, fmt.Errorf("sqlite: schedule instance: %w", err)
	}
	due := queue.DueAt(sp, ts(now))
	gated, err := gatedGroups(ctx, tx, []jobspec.Spec{sp})
	if err != nil {
		return queue.Job{}, err
	}
	_, err = tx.StmtContext(ctx, s.stJobIns1).ExecContext(ctx, rid, id, sp.Name, sp.Priority, now, now, 0, sp.Retries+1, string(specJSON), srcID, srcPath, "", sp.Group, nsOf(due),
		b2i(!due.IsZero()), b2i(gated[sp.Group]))
	if err != nil {
		return queue.Job{}, fmt.Errorf("sqlite: schedule instance: %w", err)
	}
	return queue.Job{ID: id, Name: sp.Name, State: queue.StateQueued, Spec: sp, SourcePath: srcPath, MaxAttempts: sp.Retries + 1,
		CreatedAt: ts(now), UpdatedAt: ts(now), NotBefore: due}, nil
}

// ScheduleRun implements Store.
func (s *Store) ScheduleRun(ctx context.Context, p *queue.ScheduleRunParams) (queue.ScheduleRunResult, error) {
	var res queue.ScheduleRunResult
	if p == nil || p.Name == "" {
		return res, fmt.Errorf("%w: empty schedule name", queue.ErrScheduleNotFound)
	}
	worker := p.WorkerID
	if worker == "" {
		worker = "manual"
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res = queue.ScheduleRunResult{}
		var spec, lastJob, srcPath string
		var srcID int64
		err := tx.QueryRowContext(ctx, `SELECT spec, last_job_id, source_path, source_id FROM schedules WHERE name = ?`, p.Name).Scan(&spec, &lastJob, &srcPath, &srcID)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", queue.ErrScheduleNotFound, p.Name)
		}
		if err != nil {
			return fmt.Errorf("sqlite: schedule run: %w", err)
		}
		var sched jobspec.Spec
		if err := json.Unmarshal([]byte(spec), &sched); err != nil {
			return fmt.Errorf("sqlite: schedule %s: corrupt spec: %w", p.Name, err)
		}
		busy := ""
		if lastJob != "" {
			var state string
			err := tx.QueryRowContext(ctx, `SELECT state FROM jobs WHERE id = ?`, lastJob).Scan(&state)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("sqlite: schedule run: %w", err)
			}
			if state == string(queue.StateQueued) || state == string(queue.StateRunning) {
				busy = lastJob
			}
		}
		now := s.now()
		d := queue.PlanManualRun(sched, busy, ts(now))
		tick := d.Tick
		rec := queue.ScheduleDecision{Schedule: p.Name, Tick: d.Tick, Decision: d.Decision, Count: d.Count, At: ts(now), WorkerID: worker, Detail: d.Detail}
		sp := queue.InstanceSpec(sched, tick)
		sp.RunAt = time.Time{} // now means now: no jitter
		if d.Instance {
			held, err := heldNames(ctx, tx, []string{sp.Name})
			if err != nil {
				return err
			}
			if h, ok := held[sp.Name]; ok {
				return queue.NameHeldError(sp.Name, h.State, h.ID)
			}
			rec.JobID = queue.NewID(ts(now))
		}
		res2, err := tx.ExecContext(ctx, `INSERT INTO schedule_decisions (`+decisionCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (schedule, tick_ns) DO NOTHING`,
			rec.Schedule, nsOf(rec.Tick), rec.Decision, rec.Count, rec.JobID, now, rec.WorkerID, rec.Detail)
		if err != nil {
			return fmt.Errorf("sqlite: schedule run: %w", err)
		}
		if n, _ := res2.RowsAffected(); n == 0 {
			return fmt.Errorf("%w: schedule %q has a decision for %s already; try again in a second", queue.ErrNameInUse, p.Name, tick.Format(time.RFC3339))
		}
		res.Decision = rec
		if !d.Instance {
			return nil
		}
		j, err := s.insertInstance(ctx, tx, sp, rec.JobID, srcID, srcPath, now)
		if err != nil {
			return err
		}
		res.Job = &j
		_, err = tx.ExecContext(ctx, `UPDATE schedules SET last_tick_ns = ?, last_job_id = ? WHERE name = ?`, nsOf(tick), j.ID, p.Name)
		if err != nil {
			return fmt.Errorf("sqlite: schedule run: %w", err)
		}
		return nil
	})
	return res, err
}

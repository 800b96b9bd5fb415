package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"paddock/jobspec"
	"paddock/queue"
)

// GroupLimitSet implements Store. A group left with no limit and no
// pause loses its row.
func (s *Store) GroupLimitSet(ctx context.Context, p *queue.GroupLimitSetParams) (queue.Group, error) {
	if err := p.Check(); err != nil {
		return queue.Group{}, err
	}
	err := s.tx(ctx, func(tx pgx.Tx, _ time.Time) error {
		limit, paused, err := lockGroup(ctx, tx, p.Name)
		if err != nil {
			return err
		}
		if p.Limit == 0 && limit == 0 {
			return fmt.Errorf("%w: group %q has no limit to remove", queue.ErrGroupNotFound, p.Name)
		}
		if err := syncGated(ctx, tx, p.Name, p.Limit > 0 || paused); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO job_groups (name, max_running) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET max_running = excluded.max_running`, p.Name, p.Limit); err != nil {
			return fmt.Errorf("postgres: group limit: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM job_groups WHERE name = $1 AND max_running = 0 AND NOT paused`, p.Name); err != nil {
			return fmt.Errorf("postgres: group limit: %w", err)
		}
		return nil
	})
	if err != nil {
		return queue.Group{}, err
	}
	gs, err := s.GroupList(ctx, &queue.GroupListParams{Names: []string{p.Name}})
	if err != nil {
		return queue.Group{}, err
	}
	return gs[0], nil
}

// GroupList implements Store: the stored groups and the counts of
// jobs_group, in one snapshot.
func (s *Store) GroupList(ctx context.Context, p *queue.GroupListParams) ([]queue.Group, error) {
	if p == nil {
		p = &queue.GroupListParams{}
	}
	var out []queue.Group
	err := s.read(ctx, func(tx pgx.Tx) error {
		byName := map[string]*queue.Group{}
		get := func(name string) *queue.Group {
			g := byName[name]
			if g == nil {
				g = &queue.Group{Name: name}
				byName[name] = g
			}
			return g
		}
		for _, n := range p.Names {
			get(n)
		}
		var names any // NULL: every group
		if len(p.Names) > 0 {
			names = p.Names
		}
		rows, err := tx.Query(ctx, `SELECT name, max_running, paused FROM job_groups WHERE $1::text[] IS NULL OR name = ANY($1::text[])`, names)
		if err != nil {
			return fmt.Errorf("postgres: groups: %w", err)
		}
		for rows.Next() {
			var name string
			var limit int
			var paused bool
			if err := rows.Scan(&name, &limit, &paused); err != nil {
				rows.Close()
				return fmt.Errorf("postgres: groups: %w", err)
			}
			g := get(name)
			g.Limit, g.Paused = limit, paused
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: groups: %w", err)
		}
		rows, err = tx.Query(ctx, `SELECT group_name, state, count(*) FROM jobs
			WHERE group_name <> '' AND state IN ('queued', 'running') AND ($1::text[] IS NULL OR group_name = ANY($1::text[]))
			GROUP BY group_name, state`, names)
		if err != nil {
			return fmt.Errorf("postgres: groups: %w", err)
		}
		for rows.Next() {
			var name, state string
			var n int
			if err := rows.Scan(&name, &state, &n); err != nil {
				rows.Close()
				return fmt.Errorf("postgres: groups: %w", err)
			}
			g := get(name)
			if queue.JobState(state) == queue.StateRunning {
				g.Running = n
			} else {
				g.Queued = n
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: groups: %w", err)
		}
		out = make([]queue.Group, 0, len(byName))
		for _, g := range byName {
			out = append(out, *g)
		}
		slices.SortFunc(out, func(a, b queue.Group) int { return strings.Compare(a.Name, b.Name) })
		return nil
	})
	return out, err
}

// QueueGet implements Store.
func (s *Store) QueueGet(ctx context.Context) (queue.QueueState, error) {
	var q queue.QueueState
	err := s.read(ctx, func(tx pgx.Tx) error {
		q = queue.QueueState{}
		var at pgtype.Timestamptz
		err := tx.QueryRow(ctx, `SELECT paused, paused_at FROM queue_state WHERE id = 1`).Scan(&q.Paused, &at)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("postgres: queue state: %w", err)
		}
		if q.Paused {
			q.PausedAt = ts(at)
		}
		return nil
	})
	return q, err
}

// QueuePause implements Store.
func (s *Store) QueuePause(ctx context.Context, p *queue.QueuePauseParams) error {
	return s.setPaused(ctx, p, true)
}

// QueueResume implements Store. A resume wakes waiting workers.
func (s *Store) QueueResume(ctx context.Context, p *queue.QueuePauseParams) error {
	return s.setPaused(ctx, p, false)
}

func (s *Store) setPaused(ctx context.Context, p *queue.QueuePauseParams, paused bool) error {
	if err := p.Check(); err != nil {
		return err
	}
	return s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		var err error
		switch {
		case p == nil || p.Group == "":
			// A pause keeps its first time; a resume clears it.
			_, err = tx.Exec(ctx, `INSERT INTO queue_state (id, paused, paused_at) VALUES (1, $1, CASE WHEN $1 THEN $2::timestamptz END)
				ON CONFLICT (id) DO UPDATE SET paused_at = CASE WHEN NOT excluded.paused THEN NULL WHEN queue_state.paused THEN queue_state.paused_at ELSE excluded.paused_at END,
					paused = excluded.paused`, paused, now)
		case paused:
			if _, _, err = lockGroup(ctx, tx, p.Group); err != nil {
				return err
			}
			if err = syncGated(ctx, tx, p.Group, true); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO job_groups (name, paused) VALUES ($1, true) ON CONFLICT (name) DO UPDATE SET paused = true`, p.Group)
		default:
			var limit int
			if limit, _, err = lockGroup(ctx, tx, p.Group); err != nil {
				return err
			}
			if err = syncGated(ctx, tx, p.Group, limit > 0); err != nil {
				return err
			}
			if _, err = tx.Exec(ctx, `UPDATE job_groups SET paused = false WHERE name = $1`, p.Group); err == nil {
				_, err = tx.Exec(ctx, `DELETE FROM job_groups WHERE name = $1 AND max_running = 0 AND NOT paused`, p.Group)
			}
		}
		if err != nil {
			return fmt.Errorf("postgres: pause: %w", err)
		}
		if paused {
			return nil
		}
		return s.notify(ctx, tx)
	})
}

// groupLockSQL and groupShareSQL take a transaction-scoped advisory lock
// per group name: exclusive ($1 a name) for a write of job_groups, shared
// ($1 an array of names) for a write that sets a job's gated flag from
// job_groups (enqueue, retry). A write of job_groups thus sees every job
// of the group committed before it, and a job written after it sees the
// group's row: no job of a limited group is ever left out of jobs_gated.
const (
	groupLockSQL  = `SELECT pg_advisory_xact_lock(hashtextextended('paddock.group:' || $1::text, 0))`
	groupShareSQL = `SELECT count(pg_advisory_xact_lock_shared(hashtextextended('paddock.group:' || g, 0))) FROM unnest($1::text[]) AS g WHERE g <> ''`
)

// lockGroup takes group name's exclusive lock (groupLockSQL) and returns
// its limit and pause (zero when it has no row).
func lockGroup(ctx context.Context, tx pgx.Tx, name string) (limit int, paused bool, err error) {
	if _, err := tx.Exec(ctx, groupLockSQL, name); err != nil {
		return 0, false, fmt.Errorf("postgres: group %s: %w", name, err)
	}
	err = tx.QueryRow(ctx, `SELECT max_running, paused FROM job_groups WHERE name = $1`, name).Scan(&limit, &paused)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, false, fmt.Errorf("postgres: group %s: %w", name, err)
	}
	return limit, paused, nil
}

// shareGroups takes the shared lock of each group of names (groupShareSQL).
func shareGroups(ctx context.Context, tx pgx.Tx, names []string) error {
	if _, err := tx.Exec(ctx, groupShareSQL, names); err != nil {
		return fmt.Errorf("postgres: groups: %w", err)
	}
	return nil
}

// syncGated sets the gated flag of the queued and running jobs of group
// name to gated (whether the group keeps a row in job_groups), touching
// only the rows whose flag changes. It runs before the write of the
// group's row: a claimer locks candidate jobs (SKIP LOCKED, never
// waiting) before a group's row, so a group write locks jobs before its
// row too and the two never wait on each other in a cycle.
func syncGated(ctx context.Context, tx pgx.Tx, name string, gated bool) error {
	_, err := tx.Exec(ctx, `UPDATE jobs SET gated = $2 WHERE group_name = $1 AND group_name <> '' AND state IN ('queued', 'running') AND gated <> $2`, name, gated)
	if err != nil {
		return fmt.Errorf("postgres: group %s: %w", name, err)
	}
	return nil
}

// JobSourceGet implements Store.
func (s *Store) JobSourceGet(ctx context.Context, id string) (string, error) {
	var src string
	err := s.read(ctx, func(tx pgx.Tx) error {
		var text pgtype.Text
		err := tx.QueryRow(ctx, `SELECT s.text FROM jobs j LEFT JOIN sources s ON s.id = j.source_id WHERE j.id = $1`, id).Scan(&text)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: no job with id %q", queue.ErrNotFound, id)
		}
		if err != nil {
			return fmt.Errorf("postgres: source: %w", err)
		}
		src = text.String // a pruned source is ""
		return nil
	})
	return src, err
}

// ScheduleRun implements Store. The schedule's row is locked, so that a
// tick of another host and this run are decided one after the other.
func (s *Store) ScheduleRun(ctx context.Context, p *queue.ScheduleRunParams) (queue.ScheduleRunResult, error) {
	var res queue.ScheduleRunResult
	if p == nil || p.Name == "" {
		return res, fmt.Errorf("%w: empty schedule name", queue.ErrScheduleNotFound)
	}
	worker := p.WorkerID
	if worker == "" {
		worker = "manual"
	}
	err := s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		res = queue.ScheduleRunResult{}
		var spec []byte
		var lastJob, srcPath string
		var srcID int64
		err := tx.QueryRow(ctx, `SELECT spec, last_job_id, source_path, source_id FROM schedules WHERE name = $1 FOR UPDATE`, p.Name).Scan(&spec, &lastJob, &srcPath, &srcID)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", queue.ErrScheduleNotFound, p.Name)
		}
		if err != nil {
			return fmt.Errorf("postgres: schedule run: %w", err)
		}
		var sched jobspec.Spec
		if err := json.Unmarshal(spec, &sched); err != nil {
			return fmt.Errorf("postgres: schedule %s: corrupt spec: %w", p.Name, err)
		}
		busy := ""
		if lastJob != "" {
			var state string
			err := tx.QueryRow(ctx, `SELECT state FROM jobs WHERE id = $1`, lastJob).Scan(&state)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("postgres: schedule run: %w", err)
			}
			if state == string(queue.StateQueued) || state == string(queue.StateRunning) {
				busy = lastJob
			}
		}
		d := queue.PlanManualRun(sched, busy, now)
		tick := d.Tick
		rec := queue.ScheduleDecision{Schedule: p.Name, Tick: d.Tick, Decision: d.Decision, Count: d.Count, At: now, WorkerID: worker, Detail: d.Detail}
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
			rec.JobID = queue.NewID(now)
		}
		tag, err := tx.Exec(ctx, `INSERT INTO schedule_decisions (`+decisionCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (schedule, tick) DO NOTHING`,
			rec.Schedule, rec.Tick, rec.Decision, rec.Count, rec.JobID, now, rec.WorkerID, rec.Detail)
		if err != nil {
			return fmt.Errorf("postgres: schedule run: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: schedule %q has a decision for %s already; try again in a second", queue.ErrNameInUse, p.Name, tick.Format(time.RFC3339))
		}
		res.Decision = rec
		if !d.Instance {
			return nil
		}
		j, err := insertInstance(ctx, tx, sp, rec.JobID, srcID, srcPath, now)
		if err != nil {
			return err
		}
		res.Job = &j
		if _, err := tx.Exec(ctx, `UPDATE schedules SET last_tick = $1, last_job_id = $2 WHERE name = $3`, tick, j.ID, p.Name); err != nil {
			return fmt.Errorf("postgres: schedule run: %w", err)
		}
		return s.notify(ctx, tx)
	})
	return res, err
}

package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"paddock/queue"
)

// groupCountsSQL counts the queued and running jobs of every group
// (p.Names empty) or of the groups of a json array, from jobs_group.
const (
	groupCountsSQL = `SELECT group_name, state, count(*) FROM jobs INDEXED BY jobs_group
		WHERE group_name != '' AND state IN ('queued','running') GROUP BY group_name, state`
	groupCountsOfSQL = `SELECT group_name, state, count(*) FROM jobs INDEXED BY jobs_group
		WHERE group_name != '' AND state IN ('queued','running') AND group_name IN (SELECT value FROM json_each(?)) GROUP BY group_name, state`
)

// GroupLimitSet implements Store.
func (s *Store) GroupLimitSet(ctx context.Context, p *queue.GroupLimitSetParams) (queue.Group, error) {
	if err := p.Check(); err != nil {
		return queue.Group{}, err
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if p.Limit == 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM job_groups WHERE name = ? AND max_running > 0`, p.Name).Scan(&n); err != nil {
				return fmt.Errorf("sqlite: group limit: %w", err)
			}
			if n == 0 {
				return fmt.Errorf("%w: group %q has no limit to remove", queue.ErrGroupNotFound, p.Name)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO job_groups (name, max_running) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET max_running = excluded.max_running`, p.Name, p.Limit); err != nil {
			return fmt.Errorf("sqlite: group limit: %w", err)
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM job_groups WHERE name = ? AND max_running = 0 AND paused = 0`, p.Name)
		if err != nil {
			return fmt.Errorf("sqlite: group limit: %w", err)
		}
		return syncGated(ctx, tx, p.Name)
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

// GroupList implements Store.
func (s *Store) GroupList(ctx context.Context, p *queue.GroupListParams) ([]queue.Group, error) {
	if s.closed.Load() {
		return nil, queue.ErrClosed
	}
	if p == nil {
		p = &queue.GroupListParams{}
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: groups: %w", err)
	}
	defer tx.Rollback()
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
	names, _ := json.Marshal(p.Names)
	q, args := `SELECT name, max_running, paused FROM job_groups`, []any{}
	cq, cargs := groupCountsSQL, []any{}
	if len(p.Names) > 0 {
		q += ` WHERE name IN (SELECT value FROM json_each(?))`
		args = append(args, string(names))
		cq, cargs = groupCountsOfSQL, append(cargs, string(names))
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: groups: %w", err)
	}
	for rows.Next() {
		var name string
		var limit, paused int
		if err := rows.Scan(&name, &limit, &paused); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: groups: %w", err)
		}
		g := get(name)
		g.Limit, g.Paused = limit, paused != 0
	}
	rows.Close()
	if rows, err = tx.QueryContext(ctx, cq, cargs...); err != nil {
		return nil, fmt.Errorf("sqlite: groups: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, state string
		var n int
		if err := rows.Scan(&name, &state, &n); err != nil {
			return nil, fmt.Errorf("sqlite: groups: %w", err)
		}
		g := get(name)
		if queue.JobState(state) == queue.StateRunning {
			g.Running = n
		} else {
			g.Queued = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: groups: %w", err)
	}
	out := make([]queue.Group, 0, len(byName))
	for _, g := range byName {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b queue.Group) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out, nil
}

// QueueGet implements Store.
func (s *Store) QueueGet(ctx context.Context) (queue.QueueState, error) {
	if s.closed.Load() {
		return queue.QueueState{}, queue.ErrClosed
	}
	var q queue.QueueState
	var paused int
	var at int64
	err := s.r.QueryRowContext(ctx, `SELECT paused, paused_ns FROM queue_state WHERE id = 1`).Scan(&paused, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return q, nil
	}
	if err != nil {
		return q, fmt.Errorf("sqlite: queue state: %w", err)
	}
	q.Paused = paused != 0
	if q.Paused {
		q.PausedAt = ts(at)
	}
	return q, nil
}

// QueuePause implements Store.
func (s *Store) QueuePause(ctx context.Context, p *queue.QueuePauseParams) error {
	return s.setPaused(ctx, p, true)
}

// QueueResume implements Store.
func (s *Store) QueueResume(ctx context.Context, p *queue.QueuePauseParams) error {
	return s.setPaused(ctx, p, false)
}

func (s *Store) setPaused(ctx context.Context, p *queue.QueuePauseParams, paused bool) error {
	if err := p.Check(); err != nil {
		return err
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		switch {
		case p == nil || p.Group == "":
			// A pause keeps its first time; a resume clears it.
			_, err = tx.ExecContext(ctx, `INSERT INTO queue_state (id, paused, paused_ns) VALUES (1, ?, ?)
				ON CONFLICT (id) DO UPDATE SET paused_ns = CASE WHEN excluded.paused = 0 THEN 0 WHEN paused != 0 THEN paused_ns ELSE excluded.paused_ns END, paused = excluded.paused`,
				paused, s.now())
		case paused:
			if _, err = tx.ExecContext(ctx, `INSERT INTO job_groups (name, paused) VALUES (?, 1) ON CONFLICT (name) DO UPDATE SET paused = 1`, p.Group); err == nil {
				err = syncGated(ctx, tx, p.Group)
			}
		default:
			if _, err = tx.ExecContext(ctx, `UPDATE job_groups SET paused = 0 WHERE name = ?`, p.Group); err != nil {
				break
			}
			if _, err = tx.ExecContext(ctx, `DELETE FROM job_groups WHERE name = ? AND max_running = 0 AND paused = 0`, p.Group); err == nil {
				err = syncGated(ctx, tx, p.Group)
			}
		}
		if err != nil {
			return fmt.Errorf("sqlite: pause: %w", err)
		}
		return nil
	})
}

// syncGated sets the gated flag of the queued and running jobs of group
// name to whether it has a row in job_groups (a limit or a pause), after
// a write of that row: rewrites only the rows whose flag changes.
func syncGated(ctx context.Context, tx *sql.Tx, name string) error {
	_, err := tx.ExecContext(ctx, `UPDATE jobs INDEXED BY jobs_group SET gated = 1 - gated
		WHERE group_name = ?1 AND group_name != '' AND state IN ('queued','running') AND gated != EXISTS (SELECT 1 FROM job_groups WHERE name = ?1)`, name)
	if err != nil {
		return fmt.Errorf("sqlite: group %s: %w", name, err)
	}
	return nil
}

// JobSourceGet implements Store.
func (s *Store) JobSourceGet(ctx context.Context, id string) (string, error) {
	if s.closed.Load() {
		return "", queue.ErrClosed
	}
	var src string
	err := s.r.QueryRowContext(ctx, `SELECT s.text FROM jobs AS j JOIN sources AS s ON s.id = j.source_id WHERE j.id = ?`, id).Scan(&src)
	if errors.Is(err, sql.ErrNoRows) {
		// The job may exist with its source pruned: no source is "".
		var n int
		if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM jobs WHERE id = ?`, id).Scan(&n); err == nil && n > 0 {
			return "", nil
		}
		return "", fmt.Errorf("%w: no job with id %q", queue.ErrNotFound, id)
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: source: %w", err)
	}
	return src, nil
}

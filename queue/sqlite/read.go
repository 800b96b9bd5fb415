package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"paddock/queue"
)

// JobGet implements Store.
func (s *Store) JobGet(ctx context.Context, ref string) (queue.Job, error) {
	if s.closed.Load() {
		return queue.Job{}, queue.ErrClosed
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return queue.Job{}, fmt.Errorf("sqlite: get: %w", err)
	}
	defer tx.Rollback()
	r, err := resolve(ctx, tx, ref)
	if err != nil {
		return queue.Job{}, err
	}
	if err := s.fill(ctx, tx, &r, true, false); err != nil {
		return queue.Job{}, err
	}
	return r.Job, nil
}

// JobList implements Store.
func (s *Store) JobList(ctx context.Context, p *queue.JobListParams) ([]queue.Job, error) {
	if s.closed.Load() {
		return nil, queue.ErrClosed
	}
	if p == nil {
		p = &queue.JobListParams{}
	}
	var where []string
	var args []any
	if len(p.IDs) > 0 {
		// One JSON array argument, not one placeholder per id: the
		// statement's text stays the same whatever the number of ids.
		ids, err := json.Marshal(p.IDs)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list: %w", err)
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
		if len(p.IDs) == 0 && !slices.ContainsFunc(p.States, func(st queue.JobState) bool { return !st.Finished() }) {
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
	// rid is assigned in enqueue order under the write lock: newest first
	// is a backward walk of the table, with no sort and no extra index.
	q += " ORDER BY rid DESC"
	if p.Limit > 0 {
		q += " LIMIT " + strconv.Itoa(p.Limit)
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	// Pointers: growing a slice of 100,000 whole rows copied them over and
	// over (a fifth of ls --limit 0's CPU).
	var rs []*jobRow
	for rows.Next() {
		r, err := scanJob(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		rs = append(rs, &r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", err)
	}
	if err := fillAll(ctx, tx, rs, p.WithAttempts, p.WithSource); err != nil {
		return nil, err
	}
	out := make([]queue.Job, 0, len(rs))
	for i := range rs {
		out = append(out, rs[i].Job)
	}
	return out, nil
}

// fillAll loads the attempts and sources of rs, one query each whatever
// the number of jobs (the rows travel as one JSON array argument).
func fillAll(ctx context.Context, q querier, rs []*jobRow, attempts, source bool) error {
	if len(rs) == 0 || !attempts && !source {
		return nil
	}
	at := make(map[int64]int, len(rs))
	rids := make([]int64, len(rs))
	for i, r := range rs {
		at[r.rid], rids[i] = i, r.rid
	}
	if attempts {
		b, _ := json.Marshal(rids)
		rows, err := q.QueryContext(ctx, attemptsOfSQL, string(b))
		if err != nil {
			return fmt.Errorf("sqlite: attempts: %w", err)
		}
		err = scanAttempts(rows, func(rid int64, a queue.Attempt) {
			r := rs[at[rid]]
			r.Attempts = append(r.Attempts, a)
		})
		if err != nil {
			return err
		}
		for i := range rs {
			slices.SortFunc(rs[i].Attempts, func(a, b queue.Attempt) int { return a.Number - b.Number })
		}
	}
	if source {
		srcIDs := make([]int64, 0, len(rs))
		for _, r := range rs {
			srcIDs = append(srcIDs, r.sourceID)
		}
		slices.Sort(srcIDs)
		b, _ := json.Marshal(slices.Compact(srcIDs))
		rows, err := q.QueryContext(ctx, `SELECT id, text FROM sources WHERE id IN (SELECT value FROM json_each(?))`, string(b))
		if err != nil {
			return fmt.Errorf("sqlite: source: %w", err)
		}
		defer rows.Close()
		texts := map[int64]string{}
		for rows.Next() {
			var id int64
			var text string
			if err := rows.Scan(&id, &text); err != nil {
				return fmt.Errorf("sqlite: source: %w", err)
			}
			texts[id] = text
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("sqlite: source: %w", err)
		}
		for i := range rs {
			rs[i].Source = texts[rs[i].sourceID]
		}
	}
	return nil
}

// JobCounts implements Store.
func (s *Store) JobCounts(ctx context.Context) (map[queue.JobState]int, error) {
	if s.closed.Load() {
		return nil, queue.ErrClosed
	}
	rows, err := s.r.QueryContext(ctx, countsSQL)
	if err != nil {
		return nil, fmt.Errorf("sqlite: counts: %w", err)
	}
	defer rows.Close()
	out := map[queue.JobState]int{}
	for _, st := range queue.JobStates() {
		out[st] = 0
	}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("sqlite: counts: %w", err)
		}
		out[queue.JobState(st)] = n
	}
	return out, rows.Err()
}

// JobPrune implements Store.
func (s *Store) JobPrune(ctx context.Context, p *queue.JobPruneParams) (int, error) {
	if p == nil || p.OlderThan < 0 {
		return 0, errors.New("sqlite: prune: OlderThan must be zero or more")
	}
	n := 0
	err := s.tx(ctx, func(tx *sql.Tx) error {
		cutoff := s.now() - int64(p.OlderThan)
		if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS prune (rid INTEGER PRIMARY KEY)`); err != nil {
			return fmt.Errorf("sqlite: prune: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM temp.prune`); err != nil {
			return fmt.Errorf("sqlite: prune: %w", err)
		}
		res, err := tx.ExecContext(ctx, pruneInsertSQL, cutoff)
		if err != nil {
			return fmt.Errorf("sqlite: prune: %w", err)
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
				return fmt.Errorf("sqlite: prune: %w", err)
			}
		}
		return pruneScheduleDecisions(ctx, tx, cutoff)
	})
	return n, err
}

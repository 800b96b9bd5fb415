package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"paddock/jobspec"
	"paddock/queue"
)

// JobEnqueue implements Store: JobEnqueueAll of one batch.
func (s *Store) JobEnqueue(ctx context.Context, p *queue.JobEnqueueParams) ([]queue.Job, error) {
	jobs, err := s.JobEnqueueAll(ctx, []*queue.JobEnqueueParams{p})
	if err != nil {
		return nil, err
	}
	return jobs[0], nil
}

// JobEnqueueAll implements Store. Names in Spec.After resolve first to a
// job of the same batch, then to a stored job or one of an earlier batch
// (by id, or the newest job with that name); a reference to nothing
// refuses the whole call. A dependency that already succeeded counts as
// met; one that already failed, was denied or was canceled makes the new
// job fail at once (with its dependents).
func (s *Store) JobEnqueueAll(ctx context.Context, ps []*queue.JobEnqueueParams) ([][]queue.Job, error) {
	batches, err := queue.PlanEnqueue(ps)
	if err != nil {
		return nil, err
	}
	specJSON := make([][][]byte, len(batches))
	big := false
	for i, b := range batches {
		if specJSON[i], err = encodeSpecs(b.Jobs.Specs); err != nil {
			return nil, err
		}
		big = big || len(b.Jobs.Specs) >= insertChunkBig
	}
	now := s.now()
	var bigIns *sql.Stmt
	if big {
		// Prepared before the transaction takes the only write connection.
		if bigIns, err = s.jobInsBig(ctx); err != nil {
			return nil, fmt.Errorf("sqlite: enqueue: %w", err)
		}
	}
	out := make([][]queue.Job, len(batches))
	err = s.tx(ctx, func(tx *sql.Tx) error {
		for i, b := range batches {
			jobs, err := s.enqueueTx(ctx, tx, b, specJSON[i], bigIns, now)
			if err != nil {
				return err
			}
			out[i] = jobs
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// enqueueTx stores batch b, whose specs encode to specJSON, in tx and
// returns its jobs (b.Schedules goes in as schedules).
func (s *Store) enqueueTx(ctx context.Context, tx *sql.Tx, b queue.EnqueueBatch, specJSON [][]byte, bigIns *sql.Stmt, now int64) ([]queue.Job, error) {
	p := b.Jobs
	jobs := make([]queue.Job, len(p.Specs))
	if len(b.Schedules.Specs) > 0 {
		if _, err := s.scheduleUpsertTx(ctx, tx, b.Schedules, now); err != nil {
			return nil, err
		}
	}
	if len(p.Specs) == 0 {
		return jobs, nil
	}
	deps, err := b.PlanDeps(queue.EnqueueLookup{
		Held: func(names []string) (map[string]queue.StoredJob, error) { return heldNames(ctx, tx, names) },
		Resolve: func(ref string) (queue.StoredJob, bool, error) {
			r, err := resolve(ctx, tx, ref)
			if errors.Is(err, queue.ErrNotFound) {
				return queue.StoredJob{}, false, nil
			}
			return queue.StoredJob{Row: r.rid, ID: r.ID, Name: r.Name, State: r.State}, err == nil, err
		},
	})
	if err != nil {
		return nil, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO sources (path, text, jobs) VALUES (?, ?, ?)`, p.SourcePath, p.Source, len(p.Specs))
	if err != nil {
		return nil, fmt.Errorf("sqlite: enqueue: %w", err)
	}
	srcID, _ := res.LastInsertId()
	// Row ids are assigned here (we hold the write lock) so that
	// dependencies can refer to them and rows go in chunks.
	var base int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(rid), 0) FROM jobs`).Scan(&base); err != nil {
		return nil, fmt.Errorf("sqlite: enqueue: %w", err)
	}
	rids := make([]int64, len(p.Specs))
	ids := make([]string, len(p.Specs))
	for i := range p.Specs {
		ids[i] = queue.NewID(ts(now))
		rids[i] = base + 1 + int64(i)
	}
	gated, err := gatedGroups(ctx, tx, p.Specs)
	if err != nil {
		return nil, err
	}
	args := make([]any, 0, len(p.Specs)*insertCols)
	for i, sp := range p.Specs {
		pending, dep := deps[i].Pending(), deps[i].IDs(ids)
		due := queue.DueAt(sp, ts(now))
		args = append(args, rids[i], ids[i], sp.Name, sp.Priority, now, now, pending, sp.Retries+1, specJSON[i], srcID, p.SourcePath, strings.Join(dep, " "), sp.Group, nsOf(due),
			b2i(!due.IsZero()), b2i(gated[sp.Group]))
		jobs[i] = queue.Job{ID: ids[i], Name: sp.Name, State: queue.StateQueued, Spec: sp, Source: p.Source, SourcePath: p.SourcePath,
			MaxAttempts: sp.Retries + 1, CreatedAt: ts(now), UpdatedAt: ts(now), DepsPending: pending, DependsOn: dep, NotBefore: due}
	}
	for len(args) > 0 {
		n := len(args) / insertCols
		var err error
		switch {
		case n >= insertChunkBig:
			n = insertChunkBig
			_, err = tx.StmtContext(ctx, bigIns).ExecContext(ctx, args[:n*insertCols]...)
		case n >= insertChunk:
			n = insertChunk
			_, err = tx.StmtContext(ctx, s.stJobIns).ExecContext(ctx, args[:n*insertCols]...)
		case n == 1:
			_, err = tx.StmtContext(ctx, s.stJobIns1).ExecContext(ctx, args...)
		default:
			_, err = tx.ExecContext(ctx, insertJobsSQL(n), args...)
		}
		if err != nil {
			return nil, fmt.Errorf("sqlite: enqueue: %w", err)
		}
		args = args[n*insertCols:]
	}
	var badDeps []queue.StoredJob
	for i := range p.Specs {
		for _, j := range deps[i].InBatch {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO deps (dep_rid, job_rid) VALUES (?, ?)`, rids[j], rids[i]); err != nil {
				return nil, fmt.Errorf("sqlite: enqueue: %w", err)
			}
		}
		for _, e := range deps[i].Stored {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO deps (dep_rid, job_rid) VALUES (?, ?)`, e.Row, rids[i]); err != nil {
				return nil, fmt.Errorf("sqlite: enqueue: %w", err)
			}
			if queue.FailsDependents(e.State) {
				badDeps = append(badDeps, e)
			}
		}
	}
	for _, e := range badDeps {
		if err := failDependents(ctx, tx, e.Row, queue.JobLabel(e.ID, e.Name), e.State, now); err != nil {
			return nil, err
		}
	}
	if len(badDeps) > 0 { // refresh the states we report
		for i := range jobs {
			var state, reason string
			var fin int64
			if err := tx.QueryRowContext(ctx, `SELECT state, reason, finished_ns FROM jobs WHERE rid = ?`, rids[i]).Scan(&state, &reason, &fin); err != nil {
				return nil, fmt.Errorf("sqlite: enqueue: %w", err)
			}
			jobs[i].State, jobs[i].Reason, jobs[i].FinishedAt = queue.JobState(state), reason, ts(fin)
		}
	}
	return jobs, nil
}

// encodeSpecs returns the JSON of each spec, in order. Large batches are
// encoded by two goroutines (a 10,000-job batch takes about 12 ms on one
// core here).
func encodeSpecs(specs []jobspec.Spec) ([][]byte, error) {
	out := make([][]byte, len(specs))
	encode := func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			b, err := json.Marshal(&specs[i])
			if err != nil {
				return fmt.Errorf("sqlite: encode spec %d: %w", i+1, err)
			}
			out[i] = b
		}
		return nil
	}
	if len(specs) < 512 {
		return out, encode(0, len(specs))
	}
	half := len(specs) / 2
	errc := make(chan error, 1)
	go func() { errc <- encode(half, len(specs)) }()
	err := encode(0, half)
	if err2 := <-errc; err == nil {
		err = err2
	}
	return out, err
}

// Rows per INSERT statement. Each statement of a multi-row INSERT keeps a
// statement journal of the pages it changes that existed before it; with
// 1,024 rows per statement instead of 64, that copying all but disappears
// (a 10,000-job enqueue spent 13% of its CPU there). The big statement is
// prepared on first use: preparing its 12,288 parameters costs every
// process that opens the store otherwise.
const (
	insertChunkBig = 1024
	insertChunk    = 64
	insertCols     = 16
)

// jobInsBig returns the prepared 1,024-row INSERT, preparing it on first
// use. Safe for concurrent use; never call it inside a write transaction
// (the writer pool has one connection, which the transaction holds).
func (s *Store) jobInsBig(ctx context.Context) (*sql.Stmt, error) {
	s.bigMu.Lock()
	defer s.bigMu.Unlock()
	if s.stJobInsBig == nil {
		st, err := s.w.PrepareContext(ctx, insertJobsSQL(insertChunkBig))
		if err != nil {
			return nil, err
		}
		s.stJobInsBig = st
	}
	return s.stJobInsBig, nil
}

func insertJobsSQL(rows int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO jobs (rid, id, name, priority, created_ns, updated_ns, deps_pending, max_attempts, spec, source_id, source_path, depends_on, group_name, not_before_ns, scheduled, gated, state) VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,'queued')`)
	}
	return b.String()
}

// gatedGroups returns the groups of specs that have a row in job_groups
// (a limit or a pause): their jobs go in gated. No query when no spec
// has a group.
func gatedGroups(ctx context.Context, tx *sql.Tx, specs []jobspec.Spec) (map[string]bool, error) {
	out := map[string]bool{}
	names := jobspec.Groups(specs)
	if len(names) == 0 {
		return out, nil
	}
	b, _ := json.Marshal(names)
	rows, err := tx.QueryContext(ctx, `SELECT name FROM job_groups WHERE name IN (SELECT value FROM json_each(?))`, string(b))
	if err != nil {
		return nil, fmt.Errorf("sqlite: enqueue: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("sqlite: enqueue: %w", err)
		}
		out[n] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: enqueue: %w", err)
	}
	return out, nil
}

// heldNames returns, for each name held by a queued or running job, that
// job.
func heldNames(ctx context.Context, tx *sql.Tx, names []string) (map[string]queue.StoredJob, error) {
	b, _ := json.Marshal(names)
	rows, err := tx.QueryContext(ctx, heldNamesSQL, string(b))
	if err != nil {
		return nil, fmt.Errorf("sqlite: enqueue: %w", err)
	}
	defer rows.Close()
	held := map[string]queue.StoredJob{}
	for rows.Next() {
		var j queue.StoredJob
		var st string
		if err := rows.Scan(&j.Name, &j.ID, &st); err != nil {
			return nil, fmt.Errorf("sqlite: enqueue: %w", err)
		}
		j.State = queue.JobState(st)
		held[j.Name] = j
	}
	return held, rows.Err()
}

// failDependents fails, transitively, every queued job waiting on rid.
func failDependents(ctx context.Context, tx execQuerier, rid int64, label string, state queue.JobState, now int64) error {
	type item struct {
		rid   int64
		label string
		how   string
	}
	root := label + " " + string(state)
	work := []item{{rid, label, string(state)}}
	for len(work) > 0 {
		it := work[len(work)-1]
		work = work[:len(work)-1]
		because := ""
		if it.rid != rid {
			because = root
		}
		reason := queue.DependencyFailedReason(it.label, it.how, because)
		rows, err := tx.QueryContext(ctx, failSQL, reason, now, now, it.rid)
		if err != nil {
			return fmt.Errorf("sqlite: fail dependents: %w", err)
		}
		for rows.Next() {
			var n item
			var id, name string
			if err := rows.Scan(&n.rid, &id, &name); err != nil {
				rows.Close()
				return fmt.Errorf("sqlite: fail dependents: %w", err)
			}
			n.label = queue.JobLabel(id, name)
			n.how = "failed"
			work = append(work, n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("sqlite: fail dependents: %w", err)
		}
	}
	return nil
}

// releaseDependents counts a success towards every job waiting on rid.
func releaseDependents(ctx context.Context, tx execQuerier, rid, now int64) error {
	_, err := tx.ExecContext(ctx, releaseSQL, now, rid)
	if err != nil {
		return fmt.Errorf("sqlite: release dependents: %w", err)
	}
	return nil
}

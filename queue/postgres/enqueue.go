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

// JobEnqueue implements Store: JobEnqueueAll of one batch.
func (s *Store) JobEnqueue(ctx context.Context, p *queue.JobEnqueueParams) ([]queue.Job, error) {
	jobs, err := s.JobEnqueueAll(ctx, []*queue.JobEnqueueParams{p})
	if err != nil {
		return nil, err
	}
	return jobs[0], nil
}

// JobEnqueueAll implements Store, as the SQLite store does. Dependencies
// are read FOR SHARE, so that a dependency finishing on another host at
// the same moment waits for this batch (and then releases or fails it)
// rather than missing it.
func (s *Store) JobEnqueueAll(ctx context.Context, ps []*queue.JobEnqueueParams) ([][]queue.Job, error) {
	batches, err := queue.PlanEnqueue(ps)
	if err != nil {
		return nil, err
	}
	var out [][]queue.Job
	err = s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		out = make([][]queue.Job, len(batches))
		for i, b := range batches {
			jobs, err := s.enqueueTx(ctx, tx, b, now)
			if err != nil {
				return err
			}
			out[i] = jobs
		}
		return s.notify(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Store) enqueueTx(ctx context.Context, tx pgx.Tx, b queue.EnqueueBatch, now time.Time) ([]queue.Job, error) {
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
			r, err := resolve(ctx, tx, ref, " FOR SHARE")
			if errors.Is(err, queue.ErrNotFound) {
				return queue.StoredJob{}, false, nil
			}
			return queue.StoredJob{Row: r.rid, ID: r.ID, Name: r.Name, State: r.State}, err == nil, err
		},
	})
	if err != nil {
		return nil, err
	}
	n := len(p.Specs)
	// The source row and the batch's row identities in one statement:
	// identities taken in batch order, so that the claim order among
	// equals follows the batch; COPY then writes them as given.
	var srcID int64
	rids := make([]int64, 0, n)
	rows, err := tx.Query(ctx, `WITH q AS MATERIALIZED (SELECT pg_get_serial_sequence('jobs', 'rid')::regclass AS seq),
		s AS (INSERT INTO sources (path, text, jobs) VALUES ($1, $2, $3) RETURNING id)
		SELECT s.id, nextval(q.seq) FROM s, q, generate_series(1, $3) ORDER BY 2`, p.SourcePath, p.Source, n)
	if err != nil {
		return nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	for rows.Next() {
		var rid int64
		if err := rows.Scan(&srcID, &rid); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: enqueue: %w", err)
		}
		rids = append(rids, rid)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	if len(rids) != n {
		return nil, fmt.Errorf("postgres: enqueue: %d row identities for %d jobs", len(rids), n)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = queue.NewID(now)
	}
	gated, err := gatedGroups(ctx, tx, p.Specs)
	if err != nil {
		return nil, err
	}
	src := &enqueueRows{specs: p.Specs, ids: ids, rids: rids, deps: deps, jobs: jobs, now: now, srcID: srcID, p: p, gated: gated, row: -1}
	if n < copyMinJobs {
		err = insertRows(ctx, tx, src)
	} else {
		// COPY: the rows reach the server in its binary format and are
		// written in multi-row batches, faster than an INSERT of the
		// same rows; each row is made (its spec encoded) as COPY sends
		// it, while the server writes the rows before it.
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"jobs"}, enqueueCols, src)
	}
	// A name taken meanwhile by another host fails either with the
	// unique index's 23505, which runs the transaction again.
	if err != nil {
		return nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	var depRid, jobRid []int64
	var badDeps []queue.StoredJob
	for i := range p.Specs {
		for _, j := range deps[i].InBatch {
			depRid, jobRid = append(depRid, rids[j]), append(jobRid, rids[i])
		}
		for _, e := range deps[i].Stored {
			depRid, jobRid = append(depRid, e.Row), append(jobRid, rids[i])
			if queue.FailsDependents(e.State) {
				badDeps = append(badDeps, e)
			}
		}
	}
	if len(depRid) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO deps (dep_rid, job_rid) SELECT * FROM unnest($1::bigint[], $2::bigint[]) ON CONFLICT DO NOTHING`, depRid, jobRid); err != nil {
			return nil, fmt.Errorf("postgres: enqueue: %w", err)
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
			var fin *time.Time
			if err := tx.QueryRow(ctx, `SELECT state, reason, finished_at FROM jobs WHERE rid = $1`, rids[i]).Scan(&state, &reason, &fin); err != nil {
				return nil, fmt.Errorf("postgres: enqueue: %w", err)
			}
			jobs[i].State, jobs[i].Reason = queue.JobState(state), reason
			if fin != nil {
				jobs[i].FinishedAt = fin.UTC()
			}
		}
	}
	return jobs, nil
}

// enqueueCols are the columns an enqueue writes, in the order of
// enqueueRows' values.
var enqueueCols = []string{"rid", "id", "name", "priority", "created_at", "updated_at", "deps_pending", "max_attempts", "spec",
	"source_id", "source_path", "depends_on", "group_name", "not_before", "state", "scheduled", "gated"}

// enqueueRows is the pgx.CopyFromSource of an enqueue's jobs rows, in
// batch order: it encodes each spec when COPY asks for its row, and
// fills jobs[i], the job the enqueue returns, as it goes. COPY calls it
// from a goroutine of its own and returns after its last call.
type enqueueRows struct {
	specs []jobspec.Spec
	ids   []string
	rids  []int64
	deps  []queue.JobDeps
	jobs  []queue.Job
	now   time.Time
	srcID int64
	p     *queue.JobEnqueueParams
	gated map[string]bool // groups with a row in job_groups (gatedGroups)
	row   int
	err   error
}

func (r *enqueueRows) Next() bool {
	r.row++
	return r.err == nil && r.row < len(r.specs)
}

func (r *enqueueRows) Values() ([]any, error) {
	w, err := r.make(r.row)
	if err != nil {
		return nil, err
	}
	sp := &r.specs[r.row]
	return []any{r.rids[r.row], r.ids[r.row], sp.Name, int32(sp.Priority), r.now, r.now, w.pending, int32(sp.Retries + 1), w.spec,
		r.srcID, r.p.SourcePath, w.deps, sp.Group, w.due, "queued", w.due.Valid, r.gated[sp.Group]}, nil
}

// enqueueRow is what a jobs row holds beyond the spec's own fields.
type enqueueRow struct {
	spec    []byte // the spec's JSON
	pending int32
	deps    []string // never nil: the column is NOT NULL
	due     pgtype.Timestamptz
}

// make returns the values of row i and fills jobs[i].
func (r *enqueueRows) make(i int) (enqueueRow, error) {
	sp := &r.specs[i]
	spec, err := json.Marshal(sp)
	if err != nil {
		r.err = fmt.Errorf("postgres: encode spec %d: %w", i+1, err)
		return enqueueRow{}, r.err
	}
	pending, dep := r.deps[i].Pending(), r.deps[i].IDs(r.ids)
	due := dueAt(*sp, r.now)
	w := enqueueRow{spec: spec, pending: int32(pending), deps: dep, due: pgtype.Timestamptz{Time: due, Valid: !due.IsZero()}}
	if w.deps == nil {
		w.deps = []string{}
	}
	r.jobs[i] = queue.Job{ID: r.ids[i], Name: sp.Name, State: queue.StateQueued, Spec: *sp, Source: r.p.Source, SourcePath: r.p.SourcePath,
		MaxAttempts: sp.Retries + 1, CreatedAt: r.now, UpdatedAt: r.now, DepsPending: pending, DependsOn: dep, NotBefore: due}
	return w, nil
}

func (r *enqueueRows) Err() error { return r.err }

// copyMinJobs is the smallest batch written by COPY: a smaller one is
// one INSERT (insertRows), a round trip less than COPY's two; COPY's
// cheaper rows win from some tens of jobs.
const copyMinJobs = 64

// insertRows writes the rows of src by one INSERT ... SELECT FROM unnest,
// in batch order.
func insertRows(ctx context.Context, tx pgx.Tx, src *enqueueRows) error {
	n := len(src.specs)
	var (
		names, specs, deps, groups = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		prios, pendings, maxes     = make([]int32, n), make([]int32, n), make([]int32, n)
		dues                       = make([]pgtype.Timestamptz, n)
		gated                      = make([]bool, n)
	)
	for i := range n {
		w, err := src.make(i)
		if err != nil {
			return err
		}
		sp := &src.specs[i]
		names[i], specs[i], deps[i], groups[i] = sp.Name, string(w.spec), strings.Join(w.deps, " "), sp.Group // ids hold no space
		prios[i], pendings[i], maxes[i], dues[i] = int32(sp.Priority), w.pending, int32(sp.Retries+1), w.due
		gated[i] = src.gated[sp.Group]
	}
	_, err := tx.Exec(ctx, `INSERT INTO jobs (rid, id, name, priority, created_at, updated_at, deps_pending, max_attempts, spec, source_id, source_path, depends_on, group_name, not_before, state, scheduled, gated)
		OVERRIDING SYSTEM VALUE
		SELECT u.rid, u.id, u.name, u.priority, $1, $1, u.pending, u.max_attempts, u.spec::jsonb, $2, $3, string_to_array(u.deps, ' '), u.grp, u.due, 'queued', u.due IS NOT NULL, u.gated
		FROM unnest($4::bigint[], $5::text[], $6::text[], $7::int[], $8::int[], $9::int[], $10::text[], $11::text[], $12::text[], $13::timestamptz[], $14::boolean[]) WITH ORDINALITY
			AS u(rid, id, name, priority, pending, max_attempts, spec, deps, grp, due, gated, ord)
		ORDER BY u.ord`,
		src.now, src.srcID, src.p.SourcePath, src.rids, src.ids, names, prios, pendings, maxes, specs, deps, groups, dues, gated)
	return err
}

// gatedGroups takes the shared lock of each group of specs (shareGroups)
// and returns those with a row in job_groups (a limit or a pause): their
// jobs go in gated. No query when no spec has a group.
func gatedGroups(ctx context.Context, tx pgx.Tx, specs []jobspec.Spec) (map[string]bool, error) {
	out := map[string]bool{}
	names := jobspec.Groups(specs)
	if len(names) == 0 {
		return out, nil
	}
	if err := shareGroups(ctx, tx, names); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `SELECT name FROM job_groups WHERE name = ANY($1::text[])`, names)
	if err != nil {
		return nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	for _, n := range got {
		out[n] = true
	}
	return out, nil
}

// dueAt is queue.DueAt at the resolution of timestamptz (a microsecond),
// in UTC: the Job.NotBefore the row reads back.
func dueAt(sp jobspec.Spec, now time.Time) time.Time {
	due := queue.DueAt(sp, now)
	if due.IsZero() {
		return due
	}
	return due.UTC().Truncate(time.Microsecond)
}

// heldNames returns, for each name held by a queued or running job, that
// job.
func heldNames(ctx context.Context, tx pgx.Tx, names []string) (map[string]queue.StoredJob, error) {
	rows, err := tx.Query(ctx, `SELECT name, id, state FROM jobs WHERE name = ANY($1) AND name <> '' AND state IN ('queued', 'running')`, names)
	if err != nil {
		return nil, fmt.Errorf("postgres: enqueue: %w", err)
	}
	defer rows.Close()
	held := map[string]queue.StoredJob{}
	for rows.Next() {
		var j queue.StoredJob
		var st string
		if err := rows.Scan(&j.Name, &j.ID, &st); err != nil {
			return nil, fmt.Errorf("postgres: enqueue: %w", err)
		}
		j.State = queue.JobState(st)
		held[j.Name] = j
	}
	return held, rows.Err()
}

// failDependents fails, transitively, every queued job waiting on rid.
func failDependents(ctx context.Context, tx pgx.Tx, rid int64, label string, state queue.JobState, now time.Time) error {
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
		rows, err := tx.Query(ctx, `UPDATE jobs SET state = 'failed', reason = $1, finished_at = $2, updated_at = $2
			WHERE state = 'queued' AND rid IN (SELECT job_rid FROM deps WHERE dep_rid = $3) RETURNING rid, id, name`, reason, now, it.rid)
		if err != nil {
			return fmt.Errorf("postgres: fail dependents: %w", err)
		}
		for rows.Next() {
			var n item
			var id, name string
			if err := rows.Scan(&n.rid, &id, &name); err != nil {
				rows.Close()
				return fmt.Errorf("postgres: fail dependents: %w", err)
			}
			n.label = queue.JobLabel(id, name)
			n.how = "failed"
			work = append(work, n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: fail dependents: %w", err)
		}
	}
	return nil
}

// releaseDependents counts a success towards every job waiting on rid
// and reports whether one of them became ready (its last dependency
// succeeded).
func releaseDependents(ctx context.Context, tx pgx.Tx, rid int64, now time.Time) (bool, error) {
	rows, err := tx.Query(ctx, `UPDATE jobs SET deps_pending = deps_pending - 1, updated_at = $1
		WHERE state = 'queued' AND deps_pending > 0 AND rid IN (SELECT job_rid FROM deps WHERE dep_rid = $2) RETURNING deps_pending`, now, rid)
	if err != nil {
		return false, fmt.Errorf("postgres: release dependents: %w", err)
	}
	pendings, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return false, fmt.Errorf("postgres: release dependents: %w", err)
	}
	return slices.Contains(pendings, 0), nil
}

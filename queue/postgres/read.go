package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"paddock/queue"
)

// JobGet implements Store.
func (s *Store) JobGet(ctx context.Context, ref string) (queue.Job, error) {
	var out queue.Job
	err := s.read(ctx, func(tx pgx.Tx) error {
		r, err := resolve(ctx, tx, ref, "")
		if err != nil {
			return err
		}
		rs := []jobRow{r}
		if err := fill(ctx, tx, rs, true, false); err != nil {
			return err
		}
		out = rs[0].Job
		return nil
	})
	return out, err
}

// likePattern turns a shell glob ("*" any run, "?" one character;
// case-sensitive) into a LIKE pattern with "\" as the escape.
func likePattern(glob string) string {
	var b strings.Builder
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteByte('%')
		case '?':
			b.WriteByte('_')
		case '%', '_', '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// JobList implements Store.
func (s *Store) JobList(ctx context.Context, p *queue.JobListParams) ([]queue.Job, error) {
	if p == nil {
		p = &queue.JobListParams{}
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(p.IDs) > 0 {
		where = append(where, "id = ANY("+arg(p.IDs)+"::text[])")
	}
	if len(p.States) > 0 {
		states := make([]string, len(p.States))
		for i, st := range p.States {
			states[i] = string(st)
		}
		where = append(where, "state = ANY("+arg(states)+"::text[])")
	}
	if p.NameGlob != "" {
		where = append(where, "name LIKE "+arg(likePattern(p.NameGlob))+` COLLATE "C"`)
	}
	if p.SourcePath != "" {
		where = append(where, "source_path = "+arg(p.SourcePath))
	}
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		where = append(where, "spec->'labels'->>"+arg(k)+" = "+arg(p.Labels[k]))
	}
	q := `SELECT ` + jobCols + ` FROM jobs`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, rid DESC"
	if p.Limit > 0 {
		q += " LIMIT " + strconv.Itoa(p.Limit)
	}
	var out []queue.Job
	err := s.read(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("postgres: list: %w", err)
		}
		var rs []jobRow
		for rows.Next() {
			r, err := scanJob(rows)
			if err != nil {
				rows.Close()
				return err
			}
			rs = append(rs, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: list: %w", err)
		}
		if err := fill(ctx, tx, rs, p.WithAttempts, p.WithSource); err != nil {
			return err
		}
		out = make([]queue.Job, len(rs))
		for i := range rs {
			out[i] = rs[i].Job
		}
		return nil
	})
	return out, err
}

// JobCounts implements Store.
func (s *Store) JobCounts(ctx context.Context) (map[queue.JobState]int, error) {
	out := map[queue.JobState]int{}
	err := s.read(ctx, func(tx pgx.Tx) error {
		for _, st := range queue.JobStates() {
			out[st] = 0
		}
		rows, err := tx.Query(ctx, `SELECT state, count(*) FROM jobs GROUP BY state`)
		if err != nil {
			return fmt.Errorf("postgres: counts: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var st string
			var n int64
			if err := rows.Scan(&st, &n); err != nil {
				return fmt.Errorf("postgres: counts: %w", err)
			}
			out[queue.JobState(st)] = int(n)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// JobPrune implements Store.
func (s *Store) JobPrune(ctx context.Context, p *queue.JobPruneParams) (int, error) {
	if p == nil || p.OlderThan < 0 {
		return 0, errors.New("postgres: prune: OlderThan must be zero or more")
	}
	n := 0
	err := s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		cutoff := now.Add(-p.OlderThan)
		var rids []int64
		rows, err := tx.Query(ctx, `SELECT rid FROM jobs WHERE finished_at IS NOT NULL AND finished_at <= $1 FOR UPDATE SKIP LOCKED`, cutoff)
		if err != nil {
			return fmt.Errorf("postgres: prune: %w", err)
		}
		rids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("postgres: prune: %w", err)
		}
		n = len(rids)
		for _, q := range []string{
			`DELETE FROM attempts WHERE job_rid = ANY($1)`,
			`DELETE FROM attempt_logs WHERE job_rid = ANY($1)`,
			`DELETE FROM deps WHERE job_rid = ANY($1) OR dep_rid = ANY($1)`,
			`UPDATE sources SET jobs = jobs - c.n FROM (SELECT source_id, count(*) AS n FROM jobs WHERE rid = ANY($1) GROUP BY source_id) c WHERE sources.id = c.source_id`,
			`DELETE FROM jobs WHERE rid = ANY($1)`,
			`DELETE FROM sources WHERE jobs <= 0 AND cardinality($1::bigint[]) > 0`,
		} {
			if _, err := tx.Exec(ctx, q, rids); err != nil {
				return fmt.Errorf("postgres: prune: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM schedule_decisions WHERE at <= $1 AND decision <> $2`, cutoff, queue.DecisionDeferred); err != nil {
			return fmt.Errorf("postgres: prune: %w", err)
		}
		return nil
	})
	return n, err
}

// PolicyGet implements Store.
func (s *Store) PolicyGet(ctx context.Context) (queue.Policy, error) {
	var p queue.Policy
	err := s.read(ctx, func(tx pgx.Tx) error {
		var at time.Time
		err := tx.QueryRow(ctx, `SELECT source, path, sha256, set_at FROM policy WHERE id = 1`).Scan(&p.Source, &p.Path, &p.SHA256, &at)
		if errors.Is(err, pgx.ErrNoRows) {
			return queue.ErrPolicyNotSet
		}
		if err != nil {
			return fmt.Errorf("postgres: policy: %w", err)
		}
		p.SetAt = at.UTC()
		return nil
	})
	if err != nil {
		return queue.Policy{}, err
	}
	return p, nil
}

// PolicySet implements Store.
func (s *Store) PolicySet(ctx context.Context, p *queue.PolicySetParams) (queue.Policy, error) {
	if p == nil || p.Source == "" {
		return queue.Policy{}, errors.New("postgres: policy: empty document")
	}
	sum := sha256.Sum256([]byte(p.Source))
	out := queue.Policy{Source: p.Source, Path: p.Path, SHA256: hex.EncodeToString(sum[:])}
	err := s.tx(ctx, func(tx pgx.Tx, now time.Time) error {
		out.SetAt = now
		_, err := tx.Exec(ctx, `INSERT INTO policy (id, source, path, sha256, set_at) VALUES (1, $1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET source = excluded.source, path = excluded.path, sha256 = excluded.sha256, set_at = excluded.set_at`,
			out.Source, out.Path, out.SHA256, now)
		if err != nil {
			return fmt.Errorf("postgres: policy: %w", err)
		}
		return nil
	})
	if err != nil {
		return queue.Policy{}, err
	}
	return out, nil
}

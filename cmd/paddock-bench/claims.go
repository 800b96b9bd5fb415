package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/postgres"
	"paddock/queue/sqlite"
)

// claimCase is one shape of scenario 9: how many jobs the claim may not
// take sit ahead of the claimable ones in claim order, and why.
type claimCase struct {
	name    string // row name, after "claim 1 job, 100,000 queued"
	blocked int    // jobs ahead the claim may not take
	// kind: "" (none ahead), "room" (the claimable jobs are of a group
	// whose limit has room), "full", "paused" or "due" (the jobs ahead
	// are of a full group, of a paused group, or not due for a day).
	kind string
}

var claimCases = []claimCase{
	{"", 0, ""},
	{", of a group limit with room", 0, "room"},
	{", 999 of a full group first", 999, "full"},
	{", 999 of a paused group first", 999, "paused"},
	{", 999 not yet due first", 999, "due"},
	{", 100,000 of a full group first", 100_000, "full"},
	{", 100,000 of a paused group first", 100_000, "paused"},
	{", 100,000 not yet due first", 100_000, "due"},
}

// claims is scenario 9: claim latency with 100,000 jobs queued, plain and
// with jobs the claim may not take ahead of every claimable one (999 and
// 100,000 of a full group, of a paused group, not yet due), on SQLite and,
// with --store, on a fresh PostgreSQL database. Each case of a run gets
// two priorities of its own above those of the cases before it: the
// claimable jobs at the lower, the blocked ones at the higher, so that
// only its own blocked jobs come first in claim order (a case ends by
// lifting its block: removing the limit or the pause; jobs not yet due
// stay below every later case).
func (b *bench) claims(ctx context.Context) error {
	dir, err := b.dir("claims")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "paddock.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return err
	}
	// Likewise SQLite's: the WAL a case's setup wrote is checkpointed
	// before its claims are timed, not by the first of them.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		st.Close()
		return err
	}
	err = b.claimsOn(ctx, "", st, func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
		return err
	})
	db.Close()
	st.Close()
	if err != nil || b.o.store == "" {
		return err
	}
	url, drop, err := b.pgDatabase(ctx)
	if err != nil {
		return err
	}
	defer drop()
	pg, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		return err
	}
	defer pg.Close()
	// Each case's setup inserts or rewrites up to 100,000 rows; the
	// autovacuum that follows would run during the claims timed next, on
	// a machine of 2 cores. Vacuum and analyze before timing instead.
	settle := func(ctx context.Context) error {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		_, err = c.Exec(ctx, `VACUUM (ANALYZE) jobs`)
		return err
	}
	return b.claimsOn(ctx, "postgres: ", pg, settle)
}

// claimsOn measures scenario 9 on st, naming rows with prefix; settle
// runs before each case's claims are timed.
func (b *bench) claimsOn(ctx context.Context, prefix string, st queue.Store, settle func(context.Context) error) error {
	batch := func(n, prio int, name, group string, delay time.Duration) []jobspec.Spec {
		s := make([]jobspec.Spec, n)
		for i := range s {
			s[i] = jobspec.Spec{Name: fmt.Sprintf("%s%d", name, i), Command: []string{"/usr/bin/env", "echo", "job"}, Mode: "workspace_write",
				Priority: prio, Group: group, Delay: delay, Labels: map[string]string{"batch": "bench"}}
		}
		return s
	}
	enqueue := func(specs []jobspec.Spec) error {
		for len(specs) > 0 {
			n := min(len(specs), 10_000)
			if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs[:n], Source: "bench"}); err != nil {
				return err
			}
			specs = specs[n:]
		}
		return nil
	}
	if err := enqueue(batch(100_000, 0, "fill", "", 0)); err != nil {
		return err
	}
	const ops = 200
	claimRun := func() ([]float64, error) {
		d := make([]float64, 0, ops)
		for range ops {
			t0 := time.Now()
			jobs, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "bench", Limit: 1, Lease: time.Hour})
			if err != nil {
				return nil, err
			}
			d = append(d, float64(time.Since(t0).Nanoseconds())/1e3)
			if len(jobs) != 1 {
				return nil, fmt.Errorf("claim returned %d jobs", len(jobs))
			}
		}
		slices.Sort(d)
		return d, nil
	}
	limit := func(name string, n int) error {
		_, err := st.GroupLimitSet(ctx, &queue.GroupLimitSetParams{Name: name, Limit: n})
		return err
	}
	p50 := make([][]float64, len(claimCases))
	p99 := make([][]float64, len(claimCases))
	for r := range b.o.runs {
		for k, c := range claimCases {
			i := r*len(claimCases) + k
			claimable, ahead := 2*i+1, 2*i+2
			tag := fmt.Sprintf("c%d-", i)
			group := ""
			if c.kind == "room" {
				group = tag + "room"
				if err := limit(group, queue.MaxGroupLimit); err != nil {
					return err
				}
			}
			if err := enqueue(batch(ops, claimable, tag+"ok", group, 0)); err != nil {
				return err
			}
			switch c.kind {
			case "full":
				// One more than blocked: the first claim takes the group's
				// one slot.
				if err := limit(tag+"full", 1); err != nil {
					return err
				}
				if err := enqueue(batch(c.blocked+1, ahead, tag+"full", tag+"full", 0)); err != nil {
					return err
				}
				if jobs, err := st.JobClaim(ctx, &queue.JobClaimParams{WorkerID: "bench", Limit: 1, Lease: time.Hour}); err != nil || len(jobs) != 1 || jobs[0].Spec.Group != tag+"full" {
					return fmt.Errorf("the full group's first claim: %d jobs, %v", len(jobs), err)
				}
			case "paused":
				if err := st.QueuePause(ctx, &queue.QueuePauseParams{Group: tag + "paused"}); err != nil {
					return err
				}
				if err := enqueue(batch(c.blocked, ahead, tag+"paused", tag+"paused", 0)); err != nil {
					return err
				}
			case "due":
				if err := enqueue(batch(c.blocked, ahead, tag+"due", "", 24*time.Hour)); err != nil {
					return err
				}
			}
			if err := settle(ctx); err != nil {
				return err
			}
			d, err := claimRun()
			if err != nil {
				return fmt.Errorf("claim 1 job%s: %w", c.name, err)
			}
			p50[k], p99[k] = append(p50[k], median(d)), append(p99[k], percentile(d, 99))
			// Lift the block: the jobs left sit below the next case's.
			switch c.kind {
			case "room":
				err = limit(group, 0)
			case "full":
				err = limit(tag+"full", 0)
			case "paused":
				err = st.QueueResume(ctx, &queue.QueuePauseParams{Group: tag + "paused"})
			}
			if err != nil {
				return err
			}
		}
	}
	for k, c := range claimCases {
		baseline, note := prefix+"claim 1 job, 100,000 queued, p50", ""
		if k == 0 {
			baseline, note = "", fmt.Sprintf("%d claims per run", ops)
		}
		b.add("claims", prefix+"claim 1 job, 100,000 queued"+c.name+", p50", "µs", p50[k], baseline, note)
		b.add("claims", prefix+"claim 1 job, 100,000 queued"+c.name+", p99", "µs", p99[k], "", "")
	}
	return nil
}

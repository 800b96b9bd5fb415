package main

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/postgres"
)

// notifyRate is the enqueue rate of scenario 8, in jobs per second.
const notifyRate = 1000

// notifySeconds is how long each run of scenario 8 enqueues.
const notifySeconds = 5

// notifyListeners is how many listening workers scenario 8 runs: each a
// store of its own with its LISTEN connection (queue.Notifier), as a
// worker host holds.
const notifyListeners = 4

// notifyProducers caps the enqueueing goroutines (and the producer
// store's connections) of scenario 8.
const notifyProducers = 16

// notifyLoad is scenario 8 (with --store): enqueues at notifyRate jobs/s
// for notifySeconds, as single jobs and as batches of 10 and of 100, on a
// fresh database with notifyListeners listening workers, and, in the same
// run, the same load on a poll-only store (no NOTIFY, no LISTEN: the
// baseline). Rows: the rate reached, the NOTIFYs sent (one per
// committing enqueue), the wake-ups each listening worker got (its
// queue.Notifier channel, which coalesces), each enqueue's latency
// to its commit (p50, p99), and the server's commits per second
// (pg_stat_database.xact_commit).
func (b *bench) notifyLoad(ctx context.Context) error {
	if b.o.store == "" {
		b.note("notify", "postgres rows", "skipped: give --store postgres://USER@HOST/DB (a user with CREATEDB)")
		return nil
	}
	for _, batch := range []int{1, 10, 100} {
		what := fmt.Sprintf("%d jobs/s as single jobs", notifyRate)
		if batch > 1 {
			what = fmt.Sprintf("%d jobs/s in batches of %d", notifyRate, batch)
		}
		var rate, sent, recv, p50, p99, commits, pollRate, pollP50, pollP99, pollCommits []float64
		for range b.o.runs {
			for _, pollOnly := range []bool{true, false} {
				r, err := b.notifyRun(ctx, batch, pollOnly)
				if err != nil {
					return err
				}
				if pollOnly {
					pollRate, pollP50, pollP99, pollCommits = append(pollRate, r.rate), append(pollP50, r.p50), append(pollP99, r.p99), append(pollCommits, r.commits)
					continue
				}
				rate, sent, recv = append(rate, r.rate), append(sent, r.sent), append(recv, r.received)
				p50, p99, commits = append(p50, r.p50), append(p99, r.p99), append(commits, r.commits)
			}
		}
		base := what + ", poll-only: enqueue to commit, p50"
		b.add("notify", what+", poll-only: jobs enqueued", "jobs/s", pollRate, "", fmt.Sprintf("%d producers; no NOTIFY, no LISTEN", min(notifyProducers, notifyRate/batch)))
		b.add("notify", what+": jobs enqueued", "jobs/s", rate, what+", poll-only: jobs enqueued", fmt.Sprintf("%d listening workers", notifyListeners))
		b.add("notify", what+": NOTIFYs sent", "per s", sent, "", "one per committing enqueue")
		b.add("notify", what+": wake-ups per listening worker", "per s", recv, "", "NOTIFYs received; a worker's wake-ups coalesce while one is pending")
		b.add("notify", base, "ms", pollP50, "", "")
		b.add("notify", what+": enqueue to commit, p50", "ms", p50, base, "")
		b.add("notify", what+", poll-only: enqueue to commit, p99", "ms", pollP99, "", "")
		b.add("notify", what+": enqueue to commit, p99", "ms", p99, what+", poll-only: enqueue to commit, p99", "")
		b.add("notify", what+", poll-only: server commits", "per s", pollCommits, "", "pg_stat_database.xact_commit")
		b.add("notify", what+": server commits", "per s", commits, what+", poll-only: server commits", "pg_stat_database.xact_commit")
	}
	return nil
}

// notifyResult is one run of scenario 8.
type notifyResult struct {
	rate     float64 // jobs enqueued per second
	sent     float64 // NOTIFYs sent per second: committing enqueues
	received float64 // wake-ups per listening worker per second (their mean)
	p50, p99 float64 // enqueue call to commit, ms
	commits  float64 // the database's commits per second
}

// notifyRun enqueues notifyRate jobs/s in batches of batch for
// notifySeconds on a fresh database, open loop (each enqueue is due at
// its own time, however long the others take), with notifyListeners
// listening stores; pollOnly makes every store poll-only.
func (b *bench) notifyRun(ctx context.Context, batch int, pollOnly bool) (notifyResult, error) {
	var res notifyResult
	dbURL, drop, err := b.pgDatabase(ctx)
	if err != nil {
		return res, err
	}
	defer drop()
	adminURL := dbURL
	if pollOnly {
		u, err := url.Parse(dbURL)
		if err != nil {
			return res, err
		}
		q := u.Query()
		q.Set(postgres.PollOnlyParam, "1")
		u.RawQuery = q.Encode()
		dbURL = u.String()
	}
	producers := min(notifyProducers, notifyRate/batch)
	st, err := postgres.Open(ctx, dbURL, postgres.Options{MaxConns: int32(producers)})
	if err != nil {
		return res, err
	}
	defer st.Close()
	// The listening workers: a store each, its LISTEN connection counting
	// what it receives.
	received := make([]int, notifyListeners)
	var listening sync.WaitGroup
	var stops []func()
	for i := range notifyListeners {
		ls, err := postgres.Open(ctx, dbURL, postgres.Options{MaxConns: 1})
		if err != nil {
			return res, err
		}
		defer ls.Close()
		c, stop := ls.Notifications()
		done := make(chan struct{})
		stops = append(stops, func() { close(done); stop() })
		listening.Go(func() {
			for {
				select {
				case <-c:
					received[i]++
				case <-done:
					return
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // the listeners' LISTEN is in place
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return res, err
	}
	defer admin.Close(context.Background())
	commits := func() (int64, error) {
		var n int64
		// pg_stat_database is read from the statistics snapshot, which
		// is cleared here so that it is fresh.
		if _, err := admin.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			return 0, err
		}
		err := admin.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
		return n, err
	}
	c0, err := commits()
	if err != nil {
		return res, err
	}
	ops := notifyRate * notifySeconds / batch
	lat := make([]float64, ops)
	errs := make([]error, producers)
	interval := time.Second * time.Duration(batch) / notifyRate
	start := time.Now()
	var wg sync.WaitGroup
	for g := range producers {
		wg.Go(func() {
			for op := g; op < ops; op += producers {
				time.Sleep(time.Until(start.Add(time.Duration(op) * interval)))
				specs := make([]jobspec.Spec, batch)
				for i := range specs {
					specs[i] = jobspec.Spec{Name: fmt.Sprintf("n%d-%d", op, i), Command: []string{"/usr/bin/env", "echo", "job"}, Mode: "workspace_write", Retries: 2}
				}
				t0 := time.Now()
				if _, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: "bench"}); err != nil {
					errs[g] = err
					return
				}
				lat[op] = float64(time.Since(t0).Microseconds()) / 1e3
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	for _, err := range errs {
		if err != nil {
			return res, err
		}
	}
	// A server backend publishes its commit counts when it exits (else
	// up to seconds later): close the producers' connections first.
	st.Close()
	time.Sleep(300 * time.Millisecond)
	c1, err := commits()
	if err != nil {
		return res, err
	}
	time.Sleep(300 * time.Millisecond) // the last notifications arrive
	for _, stop := range stops {
		stop()
	}
	listening.Wait()
	total := 0
	for _, n := range received {
		total += n
	}
	slices.Sort(lat)
	res = notifyResult{rate: float64(ops*batch) / secs, p50: median(lat), p99: percentile(lat, 99), commits: float64(c1-c0) / secs}
	if !pollOnly {
		res.sent = float64(ops) / secs
		res.received = float64(total) / float64(notifyListeners) / secs
	}
	return res, nil
}

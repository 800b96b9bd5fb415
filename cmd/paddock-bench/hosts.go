package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"paddock/runner"
)

// pgDatabase creates a fresh database on the server of --store (whose
// user needs CREATEDB) and returns its URL and a function dropping it.
func (b *bench) pgDatabase(ctx context.Context) (string, func(), error) {
	if err := runner.CheckStoreURL(b.o.store); err != nil {
		return "", nil, fmt.Errorf("--store: %w", err)
	}
	u, err := url.Parse(b.o.store)
	if err != nil {
		return "", nil, fmt.Errorf("--store: %w", err)
	}
	admin, err := pgx.Connect(ctx, b.o.store)
	if err != nil {
		return "", nil, fmt.Errorf("--store: %w", err)
	}
	defer admin.Close(ctx)
	b.seq++
	name := fmt.Sprintf("paddock_bench_%d_%d", time.Now().Unix(), b.seq)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("--store: create database: %w", err)
	}
	u.Path = "/" + name
	drop := func() {
		c, err := pgx.Connect(context.Background(), b.o.store)
		if err != nil {
			b.logf("drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			b.logf("drop database %s: %v", name, err)
		}
	}
	return u.String(), drop, nil
}

// hosts is scenario 7: the throughput of 1, 2 and 4 worker processes
// (concurrency 1 each) draining one batch of confined /bin/true jobs,
// sharing one SQLite state directory (one host) or, with --store, one
// PostgreSQL database, each from a state directory of its own (as
// several hosts would). The ratio is to one worker of the same store: 4
// workers reach 4× only with 4 free cores. With PostgreSQL it also counts
// the NOTIFYs a listener receives from the submit to the last worker's
// exit in the 4-worker runs.
func (b *bench) hosts(ctx context.Context) error {
	stores := []string{"sqlite"}
	if b.o.store != "" {
		stores = append(stores, "postgres")
	} else {
		b.note("hosts", "postgres rows", "skipped: give --store postgres://USER@HOST/DB (a user with CREATEDB)")
	}
	for _, store := range stores {
		for _, k := range []int{1, 2, 4} {
			var rates, notifyRates, perJob []float64
			for range b.o.runs {
				rate, notifies, secs, err := b.hostsRun(ctx, store, k)
				if err != nil {
					return err
				}
				rates = append(rates, rate)
				if store == "postgres" && k == 4 {
					notifyRates = append(notifyRates, float64(notifies)/secs)
					perJob = append(perJob, float64(notifies)/float64(b.o.jobs))
				}
			}
			base := ""
			if k > 1 {
				base = fmt.Sprintf("%s, 1 worker(s)", store)
			}
			b.add("hosts", fmt.Sprintf("%s, %d worker(s)", store, k), "jobs/s", rates, base, fmt.Sprintf("%d confined /bin/true jobs, workers at concurrency 1; ratio = scaling", b.o.jobs))
			if len(notifyRates) > 0 {
				b.add("hosts", "postgres, 4 workers: NOTIFYs received", "per s", notifyRates, "", "from the submit to the drain's end: one per transaction that makes jobs ready (the submit), none per finish")
				b.add("hosts", "postgres, 4 workers: NOTIFYs per job", "ratio", perJob, "", "")
			}
		}
	}
	return nil
}

// hostsRun runs one batch through k workers on store ("sqlite" or
// "postgres") and returns jobs per second from the workers' start to the
// last one's exit, the NOTIFYs a listener received (postgres) and the
// seconds it took.
func (b *bench) hostsRun(ctx context.Context, store string, k int) (rate float64, notifies int, secs float64, err error) {
	ins := make([]*install, k)
	var jobs string
	for i := range ins {
		if ins[i], jobs, err = b.throughputInstall(ctx, "hosts"); err != nil {
			return 0, 0, 0, err
		}
	}
	var global []string
	if store == "postgres" {
		url, drop, err := b.pgDatabase(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		defer drop()
		global = []string{"--store", url}
	} else {
		for i := range ins {
			ins[i] = ins[0] // one host: one state directory
		}
	}
	var listen *pgx.Conn
	if store == "postgres" {
		if listen, err = pgx.Connect(ctx, global[1]); err != nil {
			return 0, 0, 0, err
		}
		defer listen.Close(context.Background())
		if _, err := listen.Exec(ctx, "LISTEN paddock_queue"); err != nil {
			return 0, 0, 0, err
		}
	}
	lctx, stopListen := context.WithCancel(ctx)
	var counted sync.WaitGroup
	if listen != nil {
		counted.Go(func() {
			for {
				if _, err := listen.WaitForNotification(lctx); err != nil {
					return
				}
				notifies++
			}
		})
	}
	if err := ins[0].run(ctx, append(global, "submit", jobs)...); err != nil {
		stopListen()
		return 0, 0, 0, err
	}
	start := time.Now()
	workers := make([]*exec.Cmd, k)
	errs := make([]bytes.Buffer, k)
	for i := range workers {
		workers[i] = ins[i].cmd(ctx, append(global, "worker", "--drain", "--concurrency", strconv.Itoa(1), "--log-level", "warn")...)
		workers[i].Stderr = &errs[i]
		if err := workers[i].Start(); err != nil {
			stopListen()
			return 0, 0, 0, err
		}
	}
	for i, w := range workers {
		if werr := w.Wait(); werr != nil && err == nil {
			err = fmt.Errorf("worker %d --drain: %w: %s", i, werr, lastLines(errs[i].String(), 5))
		}
	}
	secs = time.Since(start).Seconds()
	stopListen()
	counted.Wait()
	if err != nil {
		return 0, 0, 0, err
	}
	return float64(b.o.jobs) / secs, notifies, secs, nil
}

package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"paddock/jobspec"
	"paddock/queue"
)

func BenchmarkParse10k(b *testing.B) {
	data := batchTOML(10_000, "j")
	for b.Loop() {
		if _, err := jobspec.Parse("bench.toml", data, "/srv"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTOMLDecode10k(b *testing.B) {
	data := batchTOML(10_000, "j")
	for b.Loop() {
		var m any // as jobspec decodes: the parsed map, not a copy
		if _, err := toml.Decode(string(data), &m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEnqueueOnly10k(b *testing.B) {
	data := batchTOML(10_000, "j")
	specs, err := jobspec.Parse("bench.toml", data, "/srv")
	if err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		st := openBench(b)
		b.StartTimer()
		c0 := cpuTime()
		if _, err := st.JobEnqueue(b.Context(), &queue.JobEnqueueParams{Specs: specs, Source: string(data)}); err != nil {
			b.Fatal(err)
		}
		cpu += cpuTime() - c0
		n++
		b.StopTimer()
		st.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu.Milliseconds())/float64(n), "cpu-ms/op")
}

// BenchmarkBareClaim is the floor the issue quotes ("a bare claim takes
// about 25 µs"): one table, one partial index, 100,000 rows, a claim is
// BEGIN IMMEDIATE; UPDATE ... LIMIT 1 RETURNING; COMMIT. Run beside
// BenchmarkClaim100k to read its figure against the machine's load.
func BenchmarkBareClaim(b *testing.B) {
	ctx := b.Context()
	db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "bare.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	_, err = db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, state INTEGER NOT NULL, pri INTEGER NOT NULL, payload TEXT NOT NULL);
		CREATE INDEX t_ready ON t(pri DESC, id) WHERE state = 0;
		WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i < 200000)
		INSERT INTO t (state, pri, payload) SELECT 0, i % 4, printf('%0300d', i) FROM n;`)
	if err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		t0 := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		var id int64
		var payload string
		if err := tx.QueryRowContext(ctx, `UPDATE t SET state = 1 WHERE id = (SELECT id FROM t WHERE state = 0 ORDER BY pri DESC, id LIMIT 1) RETURNING id, payload`).Scan(&id, &payload); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
}

// BenchmarkBareInsert10k is the other floor the issue quotes ("the bare
// inserts take about 30 ms"): 10,000 rows of ~300 bytes, one prepared
// INSERT each, one transaction, into a fresh table with no secondary index.
func BenchmarkBareInsert10k(b *testing.B) {
	ctx := b.Context()
	payload := strings.Repeat("x", 300)
	for b.Loop() {
		b.StopTimer()
		db, err := sql.Open("sqlite", filepath.Join(b.TempDir(), "bare.db")+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
		if err != nil {
			b.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		if _, err := db.ExecContext(ctx, `CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT NOT NULL, payload TEXT NOT NULL)`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		st, err := tx.PrepareContext(ctx, `INSERT INTO t (name, payload) VALUES (?, ?)`)
		if err != nil {
			b.Fatal(err)
		}
		for i := range 10_000 {
			if _, err := st.ExecContext(ctx, "j"+strconv.Itoa(i), payload); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		db.Close()
		b.StartTimer()
	}
}

// Package sqlite is the embedded store of package queue: one SQLite file
// in WAL mode, through modernc.org/sqlite (pure Go, no cgo). [Open] opens
// it; [Store] implements queue.Store and passes queue/storetest.
//
// The driver executes primitives; the rules (the next state after an
// attempt, how a refusal is worded, how an enqueue is planned, how a
// schedule tick is decided) are package queue's.
//
// # Concurrency and durability
//
// A Store is safe for many goroutines, and many processes may open one
// file on one machine (not over a network file system). Every write runs
// in a BEGIN IMMEDIATE transaction: SQLite's write lock serializes claims,
// so no job is handed out twice, and each (schedule, tick) is decided once
// (the decision log's primary key). Commits use synchronous=NORMAL: a
// committed job survives kill -9 of any process; the last commits may be
// lost on power failure. Leases are judged on this store's clock.
//
// # Noticing changes from other processes
//
// Every commit writes the "-wal" file beside the database, so a worker can
// watch that file (inotify) and claim when it changes instead of polling
// fast; a slow poll (a few seconds) remains a good fallback.
//
// # Query plans
//
// A claim is one UPDATE ... WHERE rid IN (ready jobs) RETURNING. It reads
// the partial index jobs_ready2 (priority DESC, created_ns, rid,
// not_before_ns, group_name) of queued jobs without pending dependencies,
// not waiting for a due time (scheduled = 0) and outside groups with a
// limit or a pause (gated = 0), in order, and stops at the limit: ready
// jobs are found without a scan or a sort. Jobs not yet due wait in
// jobs_scheduled (by due time; each claim moves those now due); jobs of
// limited or paused groups in jobs_gated (by group, then claim order),
// which a claim seeks only for the limited groups with room. No claim
// reads the jobs of a full or paused group, or those not yet due.
// Dependencies are counted (deps_pending) and released or failed through
// the deps table's primary key when a job finishes, so a claim never
// checks dependencies. There is no index on state alone (each would cost
// every claim and finish two page writes); counts by state read partial
// indexes only. TestQueryPlans guards these plans and
// TestPagesWrittenPerOperation the pages each operation writes.
// docs/performance.md gives today's figures and how to measure them.
package sqlite

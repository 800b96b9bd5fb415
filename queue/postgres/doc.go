// Package postgres is the PostgreSQL store of package queue, for workers
// on several hosts sharing one queue, through github.com/jackc/pgx/v5
// (pure Go, no cgo). [Open] connects, checks the schema version and
// migrates; [Store] implements queue.Store and passes queue/storetest,
// as the embedded store (queue/sqlite) does. The rules (next states,
// messages, enqueue planning, schedule decisions) are package queue's.
//
// # Many hosts
//
//   - Claims are one statement while no group has a limit: the ready
//     rows are picked in claim order and locked FOR UPDATE SKIP LOCKED,
//     their lease taken and their attempt opened, so no job is handed to
//     two claimers and claimers do not wait for each other.
//   - Group limits hold across hosts: with a limit set, a claim locks the
//     rows of the limited and paused groups FOR UPDATE (in name order),
//     counts their running jobs after the locks, and selects as above
//     (queue.ClaimGate), all in one transaction; claimers then take a
//     group's slots one at a time, and the attempts start at the clock
//     read after the locks.
//   - Every write transaction is pinned to READ COMMITTED, whatever the
//     server's default_transaction_isolation (under SERIALIZABLE, claims
//     would abort each other); serialization failures (40001), deadlocks
//     (40P01) and unique violations of a racing twin (23505) run the
//     transaction again, at most 8 times, with a short random backoff.
//   - A call whose server cannot be reached (a restart, a fail-over)
//     runs again with backoff for up to Options.RetryFor, unless its
//     COMMIT may have reached the server, and then fails with
//     queue.ErrUnreachable; [Store.WatchOutages] tells when calls begin
//     to retry, each retried try, and the first success after them.
//   - Leases, heartbeats, backoff and schedules are judged on the
//     server's clock (now()), never a worker's, so a host with a skewed
//     clock can neither steal a live lease nor keep a dead one.
//   - Expired leases are taken back by one guarded UPDATE ... RETURNING
//     (only jobs still running with an expired lease, locked SKIP LOCKED):
//     a job finished in the meantime is never touched, and the old
//     owner's late heartbeat or report finds the lease gone
//     (queue.ErrLeaseLost).
//   - A job's dependencies are read FOR SHARE at enqueue and retry, so a
//     dependency finishing on another host at that moment releases or
//     fails the new job once it commits instead of missing it.
//   - Two live (queued or running) jobs never share a name: a partial
//     unique index backs the check every host makes.
//   - Each (schedule, tick) is decided once: the due schedules are locked
//     FOR UPDATE SKIP LOCKED and the decision log's primary key is
//     (schedule, tick).
//
// # Schema versions
//
// The schema is versioned (table paddock_schema); each version is one
// migration, run in order under an advisory lock by the first process
// that opens an older database. An older paddock refuses a newer schema
// ([ErrSchemaNewer]).
package postgres

// Package runner runs jobs: it loads the config ([LoadConfig]), decides
// each job with the hook chain, confines it behind the [Fence], spawns
// it, classifies how it ended ([Executor]), and owns a job's lifecycle:
// [Heartbeat] keeps the leases of running attempts, [RunOne] runs and
// records one attempt, [Worker] claims jobs and runs them on its slots,
// [RunJob] runs one job in the foreground (`paddock run`). It appends
// what happens to the [EventLog], whose reader ([WatchEvents]) wakes
// waits, and [StateDir] is the one owner of the state directory's names.
//
// The package never picks a store driver: it works on any queue.Store.
// It records nothing but through the store and the event log.
//
// # Concurrency
//
// An [Executor], a [Fence], a [Heartbeat] and an [EventLog] are safe for
// concurrent use. A [Worker] runs once (Run); Abort may be called from
// any goroutine.
package runner

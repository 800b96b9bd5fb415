// Package queue is paddock's job format and durable job queue.
//
// It parses job files (TOML, strictly validated: [Parse], [ParseFile]),
// keeps jobs in a [Store] that survives crashes and serves many worker
// processes at once ([OpenSQLite], one SQLite file in WAL mode, pure Go), and
// takes job files dropped into a directory ([Inbox]). The job-file fields and
// their defaults are documented in README.md beside this file.
//
// The package never runs a job, evaluates a hook or touches a sandbox: the
// runner claims jobs, does the work and reports each attempt with
// [Store.AttemptFinish]. It does not interpret Spec.Schedule (stored for the
// scheduler) and does not expand "~" or environment variables in paths.
//
// # Concurrency
//
// A [Store] is safe for concurrent use by many goroutines; the SQLite store
// is also safe for many processes sharing one file on one machine (not over
// a network file system). [Parse] is pure and safe for concurrent use. An
// [Inbox] is safe for concurrent use and serializes scans across processes
// with a lock file.
//
// # Job states
//
// Every job is in one [JobState]:
//
//	          JobEnqueue
//	              │
//	              ▼        JobCancel (never starts)
//	┌─────────► queued ───────────────────────────────► canceled
//	│             │ │   dependency failed/denied/canceled
//	│             │ └─────────────────────────────────► failed
//	│   JobClaim  │
//	│  (lease)    ▼
//	│          running ── AttemptFinish(succeeded) ───► succeeded
//	│             │ │ │
//	│             │ │ └─ AttemptFinish(denied) ───────► denied
//	│             │ └─── AttemptFinish(canceled), or any
//	│             │      failure after JobCancel ─────► canceled
//	│             │
//	│             ├── failure, attempts spent ────────► failed
//	│             │   (failed, runner_failed, timeout,
//	│             │    or lease expired: interrupted)
//	└─────────────┘
//	failure with attempts left: queued again with NotBefore = now + Backoff
//	(an expired lease: queued again at once)
//
//	failed, denied, canceled ── JobRetry ──► queued (a fresh Retries+1 budget)
//	succeeded, failed, denied, canceled ── JobPrune (after the retention) ──► deleted
//
// A job that ends failed, denied or canceled fails every queued job that
// waits on it (Spec.After), transitively, with a Reason naming it, so that
// nothing waits forever. A job waiting on a job that already ended that way
// fails as soon as it is enqueued.
//
// # Ids and names
//
// Ids are 16 lower-case Crockford base32 characters: 48 bits of Unix
// milliseconds then 32 random bits ([NewID]), so they sort by creation time.
// Names are optional, at most [MaxNameLen] bytes of letters, digits, '.',
// '_' and '-', starting with a letter or digit, and never shaped like an id.
// A name need not be unique over time: a ref (JobGet, JobCancel, JobRetry,
// Spec.After) that is not an id resolves to the newest job with that name.
// Enqueue refuses a name held by a queued or running job ([ErrNameInUse]),
// so resubmitting a file works once its previous run has finished, and two
// live jobs never share a name.
//
// # Retries and backoff
//
// A job gets Spec.Retries+1 attempts. After a failed attempt n (outcome
// failed, runner_failed, timeout or interrupted) with attempts left, the job
// is queued again and not claimed before now + [Backoff](Spec.Backoff, n, r):
// d = min(base·2^(n-1), [BackoffMax]), delay uniformly in [d/2, d) ("equal
// jitter"); base defaults to [BackoffDefault] (1s). Denied and canceled
// attempts are never retried. A lease that expires re-queues the job at
// once (the worker vanished; the job may not be at fault), still counting
// the attempt.
//
// # Leases
//
// [Store.JobClaim] gives each job to exactly one worker with a lease
// (default [LeaseDefault]). The worker renews it with [Store.LeaseExtend]
// (every third of the lease is a good pace), which also tells it which jobs
// to stop (cancel requested, or lease lost). Some process should call
// [Store.LeaseRecoverExpired] about once per lease period; it records the
// lost attempt as "interrupted".
//
// # Noticing changes from other processes
//
// Every commit writes the "-wal" file beside the database, so a worker can
// watch that file (inotify) and claim when it changes instead of polling
// fast; a slow poll (a few seconds) remains a good fallback.
//
// # Performance
//
// Measured on the development VM (2 shared vCPUs, AMD "Turin-like", Go
// 1.26, modernc.org/sqlite v1.62), busy with other builds, so figures are
// medians of several runs:
//
//	go test -run '^$' -bench 'EnqueueBatch10k|Claim100k|Parse10k' -count 5 ./queue
//	go test -run '^$' -bench EnqueueFlat -benchtime 1x -count 3 ./queue
//
//	BenchmarkEnqueueBatch10k   10,000-job TOML text → Parse → one committed JobEnqueue
//	                           median ≈ 240 ms under load (≈ 85 ms of it is
//	                           BurntSushi/toml decoding; target 200 ms)
//	BenchmarkParse10k          the parse alone: median ≈ 100 ms
//	BenchmarkClaim100k         one-job claim with 100,000 queued: p50 ≈ 85 µs (target 100 µs)
//	BenchmarkEnqueueFlat       100,000 single-job enqueues: last 1,000 / first 1,000 ≈ 0.94 (limit 1.5)
//
// The claim reads the partial index jobs_ready (priority DESC, created_ns,
// rid, not_before_ns) WHERE state = 'queued' AND deps_pending = 0, in order,
// and stops at the limit: ready jobs are found without a scan or a sort.
// Dependencies are counted (deps_pending) and released or failed through
// the deps table's primary key when a job finishes, so a claim never checks
// dependencies. TestQueryPlans guards these plans.
package queue

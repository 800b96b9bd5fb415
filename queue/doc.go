// Package queue is paddock's durable job queue.
//
// It defines the [Store] contract (jobs parsed by package jobspec, kept so
// that they survive crashes, served to many worker processes at once) and
// the rules every store follows ([AttemptEnded], [PlanEnqueue],
// [PlanTick] and their kin): what a job's next state is and how every
// message is worded. A driver executes primitives and calls them; the
// embedded driver is package queue/sqlite, the one for workers on several
// hosts package queue/postgres, and every driver passes the contract
// suite in queue/storetest.
//
// The package never runs a job, evaluates a hook or touches a sandbox: the
// runner claims jobs, does the work and reports each attempt with
// [Store.AttemptFinish].
//
// # Concurrency
//
// A [Store] is safe for concurrent use by many goroutines (and a driver
// says which processes may share it). The rules are pure functions, safe
// for concurrent use.
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
// Names are optional, at most jobspec.MaxNameLen bytes of letters, digits, '.',
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
// # Groups, pauses and due times
//
// A job is claimed only when it is ready: queued, its dependencies
// succeeded, its NotBefore passed on the store's clock (retry backoff,
// Spec.RunAt, Spec.Delay: [DueAt]), the queue not paused, and its group
// (Spec.Group) neither paused nor full. A group's limit
// ([Store.GroupLimitSet]) and the pauses ([Store.QueuePause]) are stored
// in the queue, so every worker on every host honours them, and a claim
// checks them atomically with taking the job ([ClaimGate] is the rule a
// driver follows). [Waiting] words why a queued job is not claimed.
//
// # Schedules
//
// A spec with Spec.Schedule is a schedule, not a job: [Store.JobEnqueue]
// stores it as one (upserting by name, in the batch's transaction) and
// [Store.ScheduleTick], which every worker calls, enqueues one instance per
// tick: an ordinary job named "<schedule>-<tick YYYYMMDDTHHMMSSZ, UTC>",
// labelled schedule=<name> and schedule_tick=<tick RFC 3339>. Expressions
// are parsed by jobspec.ParseCron (github.com/netresearch/go-cron) and next
// times computed by jobspec.Cron.Next in Spec.Timezone (UTC by default):
//
//   - Daylight-saving time: a wall-clock time that does not exist runs
//     once, at the first instant after the gap; one that happens twice runs
//     once, at its first occurrence, when the hour field is one value, and
//     at both occurrences when it matches several hours (an interval
//     schedule such as "*/15 * * * *"). @every D ticks at multiples of D
//     since the Unix epoch, whatever the zone.
//   - Jitter (Spec.Jitter): each instance is due [TickJitter] after its
//     tick, the same on every worker.
//   - Run now: [Store.ScheduleRun] enqueues an instance at once, recorded
//     as [DecisionManual], subject to the overlap policy ([PlanManualRun]).
//   - Exactly once: ScheduleTick decides each (schedule, tick) once, in one
//     transaction; the decision log's primary key is (schedule, tick), so
//     several workers on one store never make two instances of a tick.
//   - Overlap (Spec.Overlap): a tick whose previous instance is still
//     queued or running is skipped (jobspec.OverlapSkip, the default), waits for
//     it (jobspec.OverlapQueue, at most one waiting tick), or runs anyway
//     (jobspec.OverlapAllow).
//   - Missed runs: only the newest due tick can get an instance; older due
//     ticks (no worker was running) are recorded as [DecisionMissed], one
//     record per outage. The newest is on time when at most
//     [ScheduleOnTime] late. After missed ticks, or when late,
//     jobspec.MissedRunOnce (the default) runs it once as [DecisionCaughtUp] if
//     it is at most Spec.MissedGrace (jobspec.MissedGraceDefault) late;
//     jobspec.MissedSkip records it as missed. Never a burst.
//   - Paused schedules decide nothing; resuming starts from the next tick
//     after now (the paused ticks are not "missed").
//
// Every decision is recorded ([Store.ScheduleDecisionList]); JobPrune
// deletes decisions older than the retention.
package queue

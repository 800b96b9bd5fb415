package queue

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math"
	"time"

	"paddock/jobspec"
)

// JobState is where a job stands. The transitions are drawn in the package
// documentation.
type JobState string

const (
	// StateQueued: waiting to be claimed. A queued job is ready when its
	// NotBefore has passed and every job in its Spec.After has succeeded.
	// JobClaim moves it to running, JobCancel to canceled, and the failure of
	// a dependency to failed.
	StateQueued JobState = "queued"
	// StateRunning: claimed by a worker, which holds a lease on it.
	// AttemptFinish moves it to a finished state or back to queued (retry);
	// LeaseRecoverExpired moves it back to queued (or to failed) when the
	// lease runs out. JobCancel only flags it (Job.CancelRequested).
	StateRunning JobState = "running"
	// StateSucceeded: the last attempt exited 0. Finished; kept until
	// JobPrune removes it.
	StateSucceeded JobState = "succeeded"
	// StateFailed: attempts are spent, or a dependency ended without
	// succeeding (Job.Reason names it). Finished; JobRetry re-queues it.
	StateFailed JobState = "failed"
	// StateDenied: a hook or the write fence refused the job. Never retried
	// automatically; JobRetry re-queues it.
	StateDenied JobState = "denied"
	// StateCanceled: canceled by a user. Never retried automatically;
	// JobRetry re-queues it.
	StateCanceled JobState = "canceled"
)

// JobStates returns every state, in lifecycle order.
func JobStates() []JobState {
	return []JobState{StateQueued, StateRunning, StateSucceeded, StateFailed, StateDenied, StateCanceled}
}

// Finished reports whether s is a final state (succeeded, failed, denied,
// canceled).
func (s JobState) Finished() bool {
	switch s {
	case StateSucceeded, StateFailed, StateDenied, StateCanceled:
		return true
	}
	return false
}

// Attempt outcomes, as recorded in Attempt.Outcome.
const (
	OutcomeSucceeded    = "succeeded"     // exited 0
	OutcomeFailed       = "failed"        // ran and exited non-zero or was signalled; retried
	OutcomeRunnerFailed = "runner_failed" // the command never ran (bwrap or spawn failed); retried
	OutcomeDenied       = "denied"        // a hook or the fence refused; never retried
	OutcomeCanceled     = "canceled"      // stopped because of JobCancel; never retried
	OutcomeTimeout      = "timeout"       // killed at Spec.Timeout; retried
	OutcomeInterrupted  = "interrupted"   // the worker vanished (lease expired) or stopped the job; set by LeaseRecoverExpired and LeaseRelease; retried
)

// Outcomes returns every valid Attempt.Outcome.
func Outcomes() []string {
	return []string{OutcomeSucceeded, OutcomeFailed, OutcomeRunnerFailed, OutcomeDenied, OutcomeCanceled, OutcomeTimeout, OutcomeInterrupted}
}

// Attempt is one run of a job. Every attempt is kept until the job is pruned.
type Attempt struct {
	Number       int             // 1-based, in claim order; JobRetry continues the count
	WorkerID     string          // the worker that claimed it
	StartedAt    time.Time       // set by the store at claim
	EndedAt      time.Time       // zero while running; set by AttemptFinish (the store's clock when zero)
	Outcome      string          // one of Outcomes(); "" while running
	ExitCode     *int            // nil when the command never ran or was signalled
	Signal       string          // e.g. "SIGKILL"; "" when it exited
	Reason       string          // human text, e.g. "exit status 1"
	ConfinedArgv []string        // the argv exactly as spawned
	Trail        json.RawMessage // hook decision trail; opaque to the queue (must be valid JSON or empty)
	StdoutPath   string
	StderrPath   string
	// PolicySHA256 is the hex sha256 of the queue's policy the attempt was
	// claimed under (JobClaimParams.PolicySHA256); "" when the queue had
	// none set (the built-in defaults applied). Set by the store at claim.
	PolicySHA256 string
}

// Job is a stored job.
type Job struct {
	ID         string // short, sortable by creation time (see NewID)
	Name       string // Spec.Name; "" for an unnamed job
	State      JobState
	Spec       jobspec.Spec
	Source     string // the submitted TOML text verbatim (the whole file, shared by its batch); filled by JobList only with WithSource; JobSourceGet returns it (the other methods leave it empty: a 10,000-job file or a 5 MB one is too big to read per job)
	SourcePath string // the file it came from ("" for stdin or Go callers)
	// Reason says why the job is in its state: the last attempt's reason, the
	// dependency that failed, "canceled", or the pending retry.
	Reason string
	// Attempts, oldest first. JobList fills it only with WithAttempts.
	Attempts     []Attempt
	AttemptCount int       // len(Attempts) when loaded; always set
	MaxAttempts  int       // attempts allowed before failing: Spec.Retries+1 (JobRetry raises it)
	CreatedAt    time.Time // enqueue time
	UpdatedAt    time.Time // last state change
	FinishedAt   time.Time // zero until finished
	// StartedAt is when the newest attempt started (its Attempt.StartedAt,
	// set at claim); zero when the job never ran. Always set, with or
	// without Attempts.
	StartedAt time.Time
	// NotBefore: not claimed before this (retry backoff, run_at, delay);
	// zero = any time. Set at enqueue to queue.DueAt of the spec.
	NotBefore       time.Time
	LeaseOwner      string    // worker holding the lease; "" unless running
	LeaseExpiresAt  time.Time // zero unless running
	CancelRequested bool      // JobCancel was called while running; the worker should stop it
	// DepsPending is how many jobs in Spec.After have not succeeded yet.
	DepsPending int
	// DependsOn are the ids Spec.After resolved to at enqueue.
	DependsOn []string
}

// Store is a durable job queue. Every implementation must pass
// storetest.Exercise. All methods are safe for concurrent use by many
// goroutines and, for the embedded store, by many processes on one machine.
//
// A ref is a job id or a job name; a name resolves to the newest job
// carrying it.
//
// # Errors
//
//   - ErrNotFound: no job has that id or name.
//   - *ValidationError (errors.Is ErrInvalid): JobEnqueue refused the batch.
//   - ErrNameInUse: a queued or running job already holds the name. From
//     JobEnqueue and JobEnqueueAll it comes as a *ValidationError whose
//     FieldError for that job has Err set to ErrNameInUse: errors.Is holds
//     for both ErrInvalid and ErrNameInUse.
//   - ErrLeaseLost: AttemptFinish from a worker that no longer holds the lease.
//   - ErrWrongState: the operation does not apply in the job's state.
//   - ErrNotImplemented: the store lacks an optional feature.
//   - ErrScheduleNotFound: no schedule has that name.
//   - ErrPolicyNotSet: PolicyGet on a queue with no policy.
//   - ErrPolicyChanged: JobClaim with another policy digest than the queue's.
type Store interface {
	// JobEnqueue stores a batch in one transaction: every spec or none.
	JobEnqueue(ctx context.Context, p *JobEnqueueParams) ([]Job, error)
	// JobEnqueueAll stores several batches (the files of one submission)
	// in one transaction: every spec of every batch, or none. A batch's
	// `after` may name a job of an earlier batch, not of a later one (its
	// *ValidationError says which batch defines it); a job name given in
	// two batches is a *ValidationError. It returns each batch's jobs, in
	// order; the errors are JobEnqueue's, of the first batch refused.
	JobEnqueueAll(ctx context.Context, ps []*JobEnqueueParams) ([][]Job, error)
	// JobClaim claims up to p.Limit ready jobs, highest Priority first, then
	// oldest, starting attempt N+1 of each under a lease for p.WorkerID. No
	// job is ever handed to two claimers. Returns an empty slice when none is
	// ready. A job is ready when it is queued, its dependencies succeeded,
	// its NotBefore has passed on the store's clock, the queue is not
	// paused, and its group (Spec.Group) is neither paused nor full: at
	// most Group.Limit of a group's jobs run at once, across every
	// claimer, checked atomically with the claim ([ClaimGate] is the rule).
	JobClaim(ctx context.Context, p *JobClaimParams) ([]Job, error)
	// LeaseExtend renews the leases p.WorkerID holds on p.JobIDs and returns
	// the ids the worker must stop: those whose cancel was requested and
	// those whose lease it no longer holds (expired and recovered, or
	// finished elsewhere).
	LeaseExtend(ctx context.Context, p *LeaseExtendParams) (stop []string, err error)
	// AttemptFinish records the result of the running attempt and decides
	// the job's next state: succeeded; denied; canceled (outcome canceled,
	// or any failure after a cancel request); queued again with NotBefore
	// set by Backoff while attempts remain; otherwise failed. A job that
	// ends without succeeding fails its queued dependents, transitively.
	AttemptFinish(ctx context.Context, p *AttemptFinishParams) (Job, error)
	// JobCancel cancels a queued job (it never starts, dependents fail) or
	// flags a running one (CancelRequested; the worker stops it and reports
	// OutcomeCanceled; an attempt that succeeds anyway leaves the job
	// succeeded). Canceling a canceled job is a no-op; any other finished
	// job returns ErrWrongState.
	JobCancel(ctx context.Context, ref string) (Job, error)
	// JobRetry re-queues a failed, denied or canceled job with a fresh
	// budget of Spec.Retries+1 attempts (its history is kept), due at
	// [RetryDueAt] (its run_at, if any). ErrWrongState
	// for other states or when a dependency has not succeeded and cannot
	// (failed, denied, canceled: retry that one first); ErrNameInUse when a
	// newer job with its name is queued or running (the message names that
	// job's state and id as JobEnqueue's does). Dependents failed because
	// of it are not revived.
	JobRetry(ctx context.Context, ref string) (Job, error)
	// LeaseRecoverExpired closes the attempt of every running job whose
	// lease has expired with OutcomeInterrupted and puts the job back to
	// queued (ready at once), or to failed when attempts are spent, or to
	// canceled when a cancel was requested. Returns the jobs it moved.
	// Workers should call it about every lease period.
	LeaseRecoverExpired(ctx context.Context) ([]Job, error)
	// LeaseRelease gives back, at once, the jobs of p.JobIDs that run
	// under p.WorkerID's lease: for a worker that stopped those jobs
	// itself (its shutdown grace ran out, or a second signal), so nobody
	// waits for their leases to expire. Their attempts are closed as
	// OutcomeInterrupted with p.Reason, and they go back to queued (ready
	// at once), or to canceled when a cancel was requested. Unlike an
	// expired lease (LeaseRecoverExpired: the worker died, perhaps of the
	// job), a stop does not count against retries: MaxAttempts is raised
	// by one, so a job on its last attempt is queued again rather than
	// failed. Jobs not running under that lease are left as they are.
	// Returns the jobs it moved.
	LeaseRelease(ctx context.Context, p *LeaseReleaseParams) ([]Job, error)
	// JobGet returns one job, with Attempts but without Source (reading a
	// large job file costs more than the rest of the job). ErrNotFound.
	JobGet(ctx context.Context, ref string) (Job, error)
	// JobSourceGet returns the source text (Job.Source) of job id (an
	// id, not a name); "" for a job enqueued without one. ErrNotFound.
	JobSourceGet(ctx context.Context, id string) (string, error)
	// JobList returns jobs matching every filter, newest first (in
	// enqueue order: the order of CreatedAt, ties broken by enqueue). The
	// newest p.Limit jobs without filters cost the same however many jobs
	// the queue holds (no sort of the queue), and a list runs the same
	// number of queries whatever the number of jobs it returns
	// (WithAttempts and WithSource included).
	JobList(ctx context.Context, p *JobListParams) ([]Job, error)
	// JobCounts returns the number of jobs in each state (every state is a key).
	JobCounts(ctx context.Context) (map[JobState]int, error)
	// JobPrune deletes finished jobs that finished more than p.OlderThan ago,
	// with their attempts, and returns how many it deleted. It also deletes
	// schedule decisions recorded more than p.OlderThan ago (except a
	// waiting DecisionDeferred).
	JobPrune(ctx context.Context, p *JobPruneParams) (int, error)
	// ScheduleUpsert creates or updates (by name) the schedules in
	// p.Specs, in one transaction, and returns them. Every spec needs
	// Schedule and Name. An update keeps the schedule's paused state, and
	// its next run unless the expression or the time zone changed (then the
	// next run is the first tick after now). JobEnqueue does the same for
	// the scheduled specs of its batch, in its transaction.
	ScheduleUpsert(ctx context.Context, p *ScheduleUpsertParams) ([]Schedule, error)
	// ScheduleGet returns one schedule by name. ErrScheduleNotFound.
	ScheduleGet(ctx context.Context, name string) (Schedule, error)
	// ScheduleList returns the schedules matching p, by name.
	ScheduleList(ctx context.Context, p *ScheduleListParams) ([]Schedule, error)
	// SchedulePause stops a schedule's ticks: none is decided or recorded
	// while it is paused. Pausing a paused schedule is a no-op.
	// ErrScheduleNotFound.
	SchedulePause(ctx context.Context, name string) (Schedule, error)
	// ScheduleResume restarts a paused schedule from the first tick after
	// now (the ticks of the pause are not missed runs: none is caught up).
	// Resuming a running schedule is a no-op. ErrScheduleNotFound.
	ScheduleResume(ctx context.Context, name string) (Schedule, error)
	// ScheduleDelete removes a schedule and its decision log; its
	// instances stay, as ordinary jobs. ErrScheduleNotFound.
	ScheduleDelete(ctx context.Context, name string) error
	// ScheduleTick decides every due tick of every schedule that is not
	// paused, at the store's clock, in one transaction: it enqueues
	// instances and records decisions (see the Decision* constants and the
	// package documentation, "Schedules"). Each (schedule, tick) is decided
	// exactly once, however many workers call it at once.
	ScheduleTick(ctx context.Context, p *ScheduleTickParams) (ScheduleTickResult, error)
	// ScheduleDecisionList returns recorded decisions, newest first.
	ScheduleDecisionList(ctx context.Context, p *ScheduleDecisionListParams) ([]ScheduleDecision, error)
	// ScheduleRun enqueues one instance of the schedule now, as a tick
	// would, recorded as DecisionManual, subject to the schedule's
	// overlap: with overlap skip or queue and an instance still queued or
	// running, nothing is enqueued and DecisionSkippedOverlap is recorded
	// (no tick is deferred). The instance's tick is the store's clock
	// truncated to the second (a refusal is recorded at the exact time);
	// it does not move NextRun. Works on a paused schedule.
	// ErrScheduleNotFound; ErrNameInUse when an instance of that second
	// exists already.
	ScheduleRun(ctx context.Context, p *ScheduleRunParams) (ScheduleRunResult, error)
	// GroupLimitSet stores a group's limit (p.Limit 0 removes it) and
	// returns the group as GroupList would. Claims from then on honour it;
	// jobs already running go on, even beyond a lowered limit. An error
	// wrapping ErrInvalid for a bad name or limit
	// (GroupLimitSetParams.Check).
	GroupLimitSet(ctx context.Context, p *GroupLimitSetParams) (Group, error)
	// GroupList returns, by name, every group that has a limit, is paused,
	// or has queued or running jobs (or exactly p.Names when given), with
	// their Running and Queued counts. Its cost grows with the number of
	// groups and of their queued jobs counted from an index, not with the
	// jobs' specs.
	GroupList(ctx context.Context, p *GroupListParams) ([]Group, error)
	// QueueGet returns the queue-wide state (paused or not).
	QueueGet(ctx context.Context) (QueueState, error)
	// QueuePause stops claims from the whole queue (p.Group "") or from
	// one group; running jobs go on. Pausing a paused one is a no-op.
	QueuePause(ctx context.Context, p *QueuePauseParams) error
	// QueueResume undoes QueuePause for the same target; resuming one
	// that is not paused is a no-op.
	QueueResume(ctx context.Context, p *QueuePauseParams) error
	// PolicyGet returns the queue's policy document. ErrPolicyNotSet when
	// none was ever set (the built-in defaults apply).
	PolicyGet(ctx context.Context) (Policy, error)
	// PolicySet replaces the queue's policy document and returns it, with
	// SHA256 and SetAt filled by the store. From then on, JobClaim refuses
	// claimers that name the previous digest (ErrPolicyChanged).
	PolicySet(ctx context.Context, p *PolicySetParams) (Policy, error)
	// Close releases the store. Calls after Close fail.
	Close() error
}

// LogStore is an optional part of a [Store]: one that keeps each
// attempt's output (capped by the worker at log_max_bytes) where every
// host sharing the queue can read it, as the PostgreSQL store does. A
// store without it leaves the logs in files on the worker's host
// (Attempt.StdoutPath and StderrPath). Check with a type assertion.
// Methods are safe for concurrent use.
type LogStore interface {
	// AttemptLogPut stores the output of attempt p.Number of job p.JobID,
	// replacing what was stored for it. The attempt must still run under
	// p.WorkerID's lease: ErrLeaseLost otherwise (a worker that lost its
	// lease never writes over the next attempt's logs).
	AttemptLogPut(ctx context.Context, p *AttemptLogPutParams) error
	// AttemptLogGet returns the stored output of attempt number of the
	// job with id jobID. ErrNotFound when none was stored.
	AttemptLogGet(ctx context.Context, jobID string, number int) (AttemptLog, error)
}

// Notifier is an optional part of a [Store] shared by several processes
// or hosts: it tells one process that another committed jobs ready to
// claim (enqueued, released by a dependency, given back, retried), so
// that idle workers claim at once instead of at their next poll. It is a hint: callers keep polling, and a process that cannot
// listen (connection down, a poll-only store) simply gets no values.
// Check with a type assertion.
type Notifier interface {
	// Notifications returns a channel that receives a value (never
	// blocking the sender, at most one pending) after such a commit, and
	// a function that stops the notifications and releases what they
	// hold. Safe for concurrent use; each call has its own channel.
	Notifications() (<-chan struct{}, func())
}

// OutageReporter is an optional part of a [Store] that reaches a server
// (PostgreSQL), whose calls retry with backoff while the server cannot be
// reached, for a while, before they fail with [ErrUnreachable]. It tells
// a process when its calls begin to retry and when one succeeds again,
// so that the process says so once rather than once per failed call.
// Check with a type assertion.
type OutageReporter interface {
	// WatchOutages calls fn with the store's outage events, in order,
	// from the goroutine of the call that observed each (fn must return
	// quickly and must not call the store), until the returned function
	// is called. Safe for concurrent use.
	WatchOutages(fn func(OutageEvent)) (stop func())
}

// OutageEventKind says what an [OutageEvent] reports.
type OutageEventKind string

const (
	// OutageStarted: a call found the server unreachable while it was
	// reachable; the call retries. Sent once per outage.
	OutageStarted OutageEventKind = "started"
	// OutageRetry: a call found the server unreachable and will try
	// again; one per failed try, the first included.
	OutageRetry OutageEventKind = "retry"
	// OutageEnded: a call succeeded after OutageStarted. Sent once per
	// outage.
	OutageEnded OutageEventKind = "ended"
)

// OutageEvent is one report of an [OutageReporter].
type OutageEvent struct {
	Kind OutageEventKind
	// Since is when the outage's first failed try ended (this host's
	// clock).
	Since time.Time
	// Err is the failed try's error (OutageStarted, OutageRetry); nil for
	// OutageEnded.
	Err error
	// RetryFor is how long each call retries before it fails with
	// ErrUnreachable (callers may then call again).
	RetryFor time.Duration
	// Retries counts the failed tries retried since Since, this one
	// included (OutageEnded: all of them).
	Retries int
}

// AttemptLogPutParams is one attempt's output ([LogStore.AttemptLogPut]).
type AttemptLogPutParams struct {
	JobID    string
	Number   int    // the attempt, 1-based
	WorkerID string // must hold the job's lease
	Log      AttemptLog
}

// AttemptLog is an attempt's output as the worker capped it.
type AttemptLog struct {
	Stdout, Stderr []byte
}

// JobEnqueueParams is a batch to enqueue.
type JobEnqueueParams struct {
	// Specs from Parse; validated again by the store. A spec with a
	// Schedule is stored as a schedule (ScheduleUpsert), in the same
	// transaction as the jobs; JobEnqueue returns the jobs of the other
	// specs only, in order.
	Specs      []jobspec.Spec
	Source     string // the submitted TOML verbatim, kept with every job of the batch
	SourcePath string // where it came from; "" for stdin
	// SourceName names the batch in error messages, e.g. the path as the
	// user typed it; it is not stored. "" uses SourcePath ([StdinName] when
	// that is "" too).
	SourceName string
}

// SourceLabel is how messages name the batch's file: SourceName, else
// SourcePath, else [jobspec.StdinName].
func (p *JobEnqueueParams) SourceLabel() string {
	return cmp.Or(p.SourceName, p.SourcePath, jobspec.StdinName)
}

// LeaseReleaseParams names the jobs a worker gives back ([Store.LeaseRelease]).
type LeaseReleaseParams struct {
	WorkerID string   // required; the owner of the leases
	JobIDs   []string // the jobs to give back
	Reason   string   // why their attempts ended; "" means "the worker stopped"
}

// JobClaimParams asks for work.
type JobClaimParams struct {
	WorkerID string        // required; owner of the leases
	Limit    int           // at most this many jobs; <= 0 means 1
	Lease    time.Duration // lease length; <= 0 means LeaseDefault
	// JobIDs, when not empty, restricts the claim to these jobs (still only
	// those that are ready: queued, dependencies met, past NotBefore). Used
	// by `paddock run` to claim the job it just enqueued.
	JobIDs []string
	// PolicySHA256 is the digest of the policy the claimer enforces (see
	// Policy.SHA256; "" for a queue with no policy set). The claim fails
	// with ErrPolicyChanged, claiming nothing, unless it equals the stored
	// policy's, so that no job runs under a policy other than the queue's.
	// It is recorded as the attempt's PolicySHA256.
	PolicySHA256 string
}

// Policy is the queue's policy document, as the operator set it. The
// queue stores it and never interprets it: parsing and enforcement are the
// runner's (runner.ParsePolicy).
type Policy struct {
	Source string    // the TOML text, verbatim
	Path   string    // the absolute path it was read from; relative paths in it resolve against its directory
	SHA256 string    // hex sha256 of Source; set by the store
	SetAt  time.Time // when it was set; set by the store
}

// PolicySetParams is a policy to store ([Store.PolicySet]).
type PolicySetParams struct {
	Source string // required: the TOML text
	Path   string // absolute path of the file it came from
}

// LeaseExtendParams renews leases.
type LeaseExtendParams struct {
	WorkerID string
	JobIDs   []string
	Lease    time.Duration // new expiry is now+Lease; <= 0 means LeaseDefault
}

// AttemptFinishParams reports how the running attempt of JobID ended.
type AttemptFinishParams struct {
	JobID    string
	WorkerID string // must hold the lease, or ErrLeaseLost
	// Attempt: Outcome is required (one of Outcomes() except interrupted);
	// Number, WorkerID and StartedAt are taken from the store; EndedAt
	// defaults to the store's clock.
	Attempt Attempt
}

// JobListParams filters JobList. The zero value lists every job.
type JobListParams struct {
	IDs          []string          // any of these job ids (not names); empty = any; unknown ids match nothing
	States       []JobState        // any of these; empty = all
	Labels       map[string]string // every label must match exactly
	NameGlob     string            // shell glob on the name ("*" and "?"; case-sensitive); "" = any
	SourcePath   string            // exact JobEnqueueParams.SourcePath; "" = any (not indexed: meant for rare lookups)
	Limit        int               // at most this many; <= 0 = no limit
	WithAttempts bool              // fill Job.Attempts
	WithSource   bool              // fill Job.Source
}

// JobPruneParams selects finished jobs to delete.
type JobPruneParams struct {
	OlderThan time.Duration // finished at least this long ago; 0 = every finished job; negative is an error
}

// Defaults.
const (
	// LeaseDefault is the lease length when a claim or extension gives none.
	LeaseDefault = 30 * time.Second
	// BackoffDefault is the backoff base when Spec.Backoff is 0.
	BackoffDefault = time.Second
	// BackoffMax caps one retry delay.
	BackoffMax = time.Hour
)

// Backoff returns the delay before the retry that follows failed attempt n
// (1-based) with base (BackoffDefault when <= 0), given a jitter sample
// r in [0,1):
//
//	d = min(base * 2^(n-1), BackoffMax)
//	delay = d/2 + r*d/2          // "equal jitter": between d/2 and d
//
// So with the default base the first retry waits 0.5-1s, the second 1-2s,
// the third 2-4s.
func Backoff(base time.Duration, n int, r float64) time.Duration {
	if base <= 0 {
		base = BackoffDefault
	}
	if n < 1 {
		n = 1
	}
	if r < 0 || r >= 1 || math.IsNaN(r) {
		r = 0
	}
	d := float64(base) * math.Pow(2, float64(n-1))
	if d > float64(BackoffMax) {
		d = float64(BackoffMax)
	}
	return time.Duration(d/2 + r*d/2)
}

// Sentinel errors. Check them with errors.Is.
var (
	// ErrNotFound: no job has that id or name.
	ErrNotFound = errors.New("queue: job not found")
	// ErrInvalid: a job file or spec failed validation; the error is a
	// *ValidationError listing every problem.
	ErrInvalid = errors.New("queue: invalid job")
	// ErrNameInUse: a queued or running job already holds the name.
	ErrNameInUse = errors.New("queue: name in use by a queued or running job")
	// ErrLeaseLost: the worker no longer holds the job's lease (it expired
	// and was recovered, or the job was finished or claimed elsewhere).
	ErrLeaseLost = errors.New("queue: lease lost")
	// ErrWrongState: the operation does not apply to the job in its state.
	ErrWrongState = errors.New("queue: wrong state")
	// ErrNotImplemented: the store does not support this feature. The
	// contract suite accepts it where a feature is optional.
	ErrNotImplemented = errors.New("queue: not implemented")
	// ErrGroupNotFound: GroupLimitSet removing the limit (Limit 0) of a
	// group that has none.
	ErrGroupNotFound = errors.New("queue: group has no limit")
	// ErrScheduleNotFound: no schedule has that name.
	ErrScheduleNotFound = errors.New("queue: schedule not found")
	// ErrPolicyNotSet: the queue has no policy document (PolicyGet).
	ErrPolicyNotSet = errors.New("queue: no policy set")
	// ErrNoSuchDependency is wrapped by the error of an enqueue whose
	// `after` names no job of the submission nor of the queue.
	ErrNoSuchDependency = errors.New("queue: after names no job")
	// ErrPolicyChanged: JobClaim named a policy digest that is not the
	// queue's: the queue's policy was set after the claimer loaded it.
	ErrPolicyChanged = errors.New("queue: the queue's policy is not the claimer's")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("queue: store closed")
	// ErrUnreachable: the store's server could not be reached (stopped,
	// restarting, failing over, the network down) for as long as the
	// call retried; nothing of the call was done. Only stores with a
	// server return it ([OutageReporter]); the caller may call again.
	ErrUnreachable = errors.New("queue: the store's server cannot be reached")
)

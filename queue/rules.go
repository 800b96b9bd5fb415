package queue

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"paddock/jobspec"
)

// The rules every store follows, whatever it keeps jobs in: a driver
// executes primitives (insert, update, walk the dependencies) and asks
// these functions what the next state is and how it is worded, so that
// every store says the same thing (storetest pins the words).

// Reasons a store records in Job.Reason.
const (
	// ReasonCanceledBeforeStart: JobCancel of a queued job.
	ReasonCanceledBeforeStart = "canceled before it started"
	// ReasonCancelRequested: JobCancel of a running job; its worker
	// stops it at the next heartbeat.
	ReasonCancelRequested = "cancel requested"
	// ReasonRetryRequested: JobRetry queued the job again.
	ReasonRetryRequested = "retry requested"
	// ReasonWorkerStopped is LeaseReleaseParams.Reason's default.
	ReasonWorkerStopped = "the worker stopped"
)

// Transition is a job's next state as a rule decides it.
type Transition struct {
	State  JobState
	Reason string // Job.Reason in the new state
	// Delay is how long after now the job may be claimed again (Job.NotBefore
	// = now + Delay); 0 for any state but a retry's queued.
	Delay time.Duration
	// RaiseMaxAttempts: the attempt does not count against retries
	// (Job.MaxAttempts goes up by one).
	RaiseMaxAttempts bool
}

// AttemptEnded decides the next state of running job j, whose attempt
// number j.AttemptCount ended with outcome (one of Outcomes(), not
// interrupted: see [AttemptInterrupted]) for reason why; jitter is the
// backoff sample in [0,1) ([Backoff]). In order: succeeded; canceled
// (outcome canceled, or any failure after a cancel request); denied;
// queued again after the backoff while attempts remain; else failed.
func AttemptEnded(j Job, outcome, why string, jitter float64) Transition {
	if why == "" {
		why = outcome
	}
	n, max := j.AttemptCount, j.MaxAttempts
	switch {
	case outcome == OutcomeSucceeded:
		return Transition{State: StateSucceeded, Reason: why}
	case outcome == OutcomeCanceled || j.CancelRequested:
		return Transition{State: StateCanceled, Reason: "canceled (attempt " + strconv.Itoa(n) + ": " + why + ")"}
	case outcome == OutcomeDenied:
		return Transition{State: StateDenied, Reason: why}
	case n < max:
		d := Backoff(j.Spec.Backoff, n, jitter)
		return Transition{State: StateQueued, Delay: d,
			Reason: fmt.Sprintf("attempt %d of %d %s: %s; retrying after %s", n, max, outcome, why, d.Round(time.Millisecond))}
	default:
		return Transition{State: StateFailed, Reason: fmt.Sprintf("attempt %d of %d %s: %s", n, max, outcome, why)}
	}
}

// AttemptInterrupted decides the next state of running job j whose
// attempt the store closes as [OutcomeInterrupted] for reason why. counted
// is true for an expired lease (LeaseRecoverExpired: the attempt counts)
// and false for a worker that stopped the job itself (LeaseRelease: it
// does not, and the job is queued again even on its last attempt). A
// cancel request makes it canceled; spent attempts make it failed;
// otherwise it is queued again, ready at once.
func AttemptInterrupted(j Job, why string, counted bool) Transition {
	n, max := j.AttemptCount, j.MaxAttempts
	switch {
	case j.CancelRequested:
		return Transition{State: StateCanceled, Reason: "canceled (attempt interrupted: " + why + ")"}
	case !counted:
		return Transition{State: StateQueued, RaiseMaxAttempts: true,
			Reason: fmt.Sprintf("attempt %d interrupted: %s; queued again (a worker's stop does not count against retries)", n, why)}
	case n >= max:
		return Transition{State: StateFailed, Reason: fmt.Sprintf("attempt %d of %d interrupted: %s", n, max, why)}
	default:
		return Transition{State: StateQueued, Reason: fmt.Sprintf("attempt %d of %d interrupted: %s; queued again", n, max, why)}
	}
}

// LeaseExpiredReason is the reason of an attempt closed because owner's
// lease ran out at expiredAt.
func LeaseExpiredReason(owner string, expiredAt time.Time) string {
	return fmt.Sprintf("lease of worker %q expired at %s (the worker stopped heartbeating)", owner, expiredAt.Format(time.RFC3339))
}

// JobLabel names a job in messages: `"name" (id)`, or the id of an
// unnamed job.
func JobLabel(id, name string) string {
	if name != "" {
		return strconv.Quote(name) + " (" + id + ")"
	}
	return id
}

// DependencyFailedReason is the reason of a queued job failed because a
// job it waits on ended without succeeding: dep is that job's label
// ([JobLabel]), how its state ("failed", "denied", "canceled"). When the
// failure came down a chain, root is the label and state of the job that
// started it ("\"build\" (ID) denied"); "" when dep is that job.
func DependencyFailedReason(dep, how, root string) string {
	reason := "dependency " + dep + " " + how
	if root != "" {
		reason += " (because " + root + ")"
	}
	return reason
}

// FailsDependents reports whether a job ending in state fails the queued
// jobs that wait on it (failed, denied, canceled).
func FailsDependents(state JobState) bool {
	return state == StateFailed || state == StateDenied || state == StateCanceled
}

// NameHeld says that name is held by the job id in state (queued or
// running) and when it is free again: the words of enqueue's refusal (a
// FieldError's Message) and of retry's ([NameHeldError]).
func NameHeld(name string, state JobState, id string) string {
	return fmt.Sprintf("%q is held by %s job %s; the name is free again once that job is final (wait for it, or cancel it)", name, state, id)
}

// NameHeldError is JobRetry's refusal of a job whose name a newer queued
// or running job holds: errors.Is(err, ErrNameInUse) holds, and it prints
// the holder as enqueue's refusal does.
func NameHeldError(name string, state JobState, id string) error {
	return &nameHeldError{msg: NameHeld(name, state, id)}
}

type nameHeldError struct{ msg string }

func (e *nameHeldError) Error() string { return "queue: " + e.msg }
func (e *nameHeldError) Unwrap() error { return ErrNameInUse }

// WrongState is ErrWrongState for operation op on job j.
func WrongState(j Job, op string) error {
	return fmt.Errorf("%w: cannot %s job %s: its state is %s", ErrWrongState, op, j.ID, j.State)
}

// CancelEffect is what JobCancel does to a job.
type CancelEffect int

const (
	// CancelNone: the job is canceled already; nothing changes.
	CancelNone CancelEffect = iota
	// CancelNow: a queued job becomes canceled
	// ([ReasonCanceledBeforeStart]) and fails its dependents.
	CancelNow
	// CancelFlag: a running job gets CancelRequested
	// ([ReasonCancelRequested]); its worker stops it.
	CancelFlag
)

// CancelOf says what JobCancel does to j; a [WrongState] error for a job
// that succeeded, failed or was denied.
func CancelOf(j Job) (CancelEffect, error) {
	switch j.State {
	case StateQueued:
		return CancelNow, nil
	case StateRunning:
		return CancelFlag, nil
	case StateCanceled:
		return CancelNone, nil
	}
	return CancelNone, WrongState(j, "cancel")
}

// RetryCheck refuses JobRetry of a job that is not failed, denied or
// canceled (a [WrongState] error).
func RetryCheck(j Job) error {
	switch j.State {
	case StateFailed, StateDenied, StateCanceled:
		return nil
	}
	return WrongState(j, "retry")
}

// RetryBlocked is JobRetry's refusal of job j because its dependency dep
// (id, name) is in state, a final state other than succeeded: the
// dependency must be retried first. nil when state is not final.
func RetryBlocked(j Job, depID, depName string, state JobState) error {
	if !state.Finished() {
		return nil
	}
	return fmt.Errorf("%w: cannot retry job %s: dependency %s is %s; retry it first", ErrWrongState, j.ID, JobLabel(depID, depName), state)
}

// WithDefaults returns a copy of p with Limit at least 1 and Lease
// LeaseDefault when it was <= 0. An error when WorkerID is empty.
func (p *JobClaimParams) WithDefaults() (JobClaimParams, error) {
	if p == nil || p.WorkerID == "" {
		return JobClaimParams{}, errors.New("queue: claim: WorkerID is required")
	}
	c := *p
	c.Limit = max(c.Limit, 1)
	if c.Lease <= 0 {
		c.Lease = LeaseDefault
	}
	return c, nil
}

// WithDefaults returns a copy of p with Lease LeaseDefault when it was
// <= 0. An error when WorkerID is empty.
func (p *LeaseExtendParams) WithDefaults() (LeaseExtendParams, error) {
	if p == nil || p.WorkerID == "" {
		return LeaseExtendParams{}, errors.New("queue: lease extend: WorkerID is required")
	}
	c := *p
	if c.Lease <= 0 {
		c.Lease = LeaseDefault
	}
	return c, nil
}

// WithDefaults returns a copy of p with Reason [ReasonWorkerStopped] when
// it was "". An error when WorkerID is empty.
func (p *LeaseReleaseParams) WithDefaults() (LeaseReleaseParams, error) {
	if p == nil || p.WorkerID == "" {
		return LeaseReleaseParams{}, errors.New("queue: lease release: WorkerID is required")
	}
	c := *p
	if c.Reason == "" {
		c.Reason = ReasonWorkerStopped
	}
	return c, nil
}

// Check refuses an attempt a store must not record: an outcome that is
// not one of Outcomes(), or a Trail that is not valid JSON.
func (p *AttemptFinishParams) Check() error {
	if p == nil {
		return errors.New("queue: attempt finish: nil params")
	}
	if !slices.Contains(Outcomes(), p.Attempt.Outcome) {
		return fmt.Errorf("queue: attempt finish: unknown outcome %q: expected one of %s", p.Attempt.Outcome, strings.Join(Outcomes(), ", "))
	}
	if len(p.Attempt.Trail) > 0 && !json.Valid(p.Attempt.Trail) {
		return errors.New("queue: attempt finish: Trail is not valid JSON")
	}
	return nil
}

// Check refuses a ScheduleUpsert batch: empty, a spec without a
// schedule, or one jobspec.Validate refuses.
func (p *ScheduleUpsertParams) Check() error {
	if p == nil || len(p.Specs) == 0 {
		return fmt.Errorf("%w: empty batch", jobspec.ErrInvalid)
	}
	for _, sp := range p.Specs {
		if sp.Schedule == "" {
			return &jobspec.ValidationError{Errors: []jobspec.FieldError{{File: p.SourceLabel(), Line: sp.Line, Job: "job " + strconv.Quote(sp.Name), Key: "schedule", Message: "missing: ScheduleUpsert takes scheduled specs only"}}}
		}
	}
	return jobspec.Validate(p.SourceLabel(), p.Specs)
}

// CheckPolicyDigest is a claim's policy rule, for every store: it fails
// with [ErrPolicyChanged] unless want, the digest the claimer enforces,
// is have, the stored policy's ("" for none: the defaults). The message
// names both.
func CheckPolicyDigest(have, want string) error {
	if have != want {
		return fmt.Errorf("%w: the queue's policy is %s, the claimer's %s", ErrPolicyChanged, policyDigestName(have), policyDigestName(want))
	}
	return nil
}

// policyDigestName is a policy digest for a message.
func policyDigestName(d string) string {
	if d == "" {
		return "the defaults (none set)"
	}
	return "sha256 " + d
}

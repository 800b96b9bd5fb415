package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"paddock/queue"
)

// One job's lifecycle, shared by [Worker] and `paddock run` ([RunJob]):
// its lease kept by a [Heartbeat], one attempt run and recorded by
// [RunOne].

// Heartbeat keeps the leases of one worker's running attempts: every
// lease/3 it extends them all in one store call, and stops (closes the
// stop channel of) every attempt the store says to stop: its cancel was
// requested, or its lease was lost. Safe for concurrent use.
type Heartbeat struct {
	store  queue.Store
	worker string
	lease  time.Duration

	mu   sync.Mutex
	jobs map[string]chan struct{} // job id -> the running attempt's stop channel
}

// NewHeartbeat returns a heartbeat for workerID's leases of length lease
// (> 0). It beats once Run is called.
func NewHeartbeat(store queue.Store, workerID string, lease time.Duration) *Heartbeat {
	return &Heartbeat{store: store, worker: workerID, lease: lease, jobs: map[string]chan struct{}{}}
}

// Add starts keeping the lease of the running attempt of job id and
// returns the channel closed when the attempt must stop. An attempt is
// stopped once: a retry of the job (same id) is a new Add, with a new
// channel.
func (h *Heartbeat) Add(id string) <-chan struct{} {
	c := make(chan struct{})
	h.mu.Lock()
	h.jobs[id] = c
	h.mu.Unlock()
	return c
}

// Remove stops keeping id's lease: its attempt was recorded or given back.
func (h *Heartbeat) Remove(id string) {
	h.mu.Lock()
	delete(h.jobs, id)
	h.mu.Unlock()
}

// Len is the number of attempts whose leases h keeps.
func (h *Heartbeat) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.jobs)
}

// Stop stops id's running attempt now (closes its channel), unless it is
// stopped already; it reports whether this call stopped it.
func (h *Heartbeat) Stop(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.jobs[id]
	if !ok || isClosed(c) {
		return false
	}
	close(c)
	return true
}

// Run beats every lease/3 until ctx ends. It calls stopped(id) for each
// attempt it stops, and failed(err) when the store refuses a beat (the
// next one tries again); either may be nil.
func (h *Heartbeat) Run(ctx context.Context, stopped func(id string), failed func(error)) {
	t := time.NewTicker(h.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		ids := make([]string, 0, len(h.jobs))
		for id := range h.jobs {
			ids = append(ids, id)
		}
		h.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		stop, err := h.store.LeaseExtend(ctx, &queue.LeaseExtendParams{WorkerID: h.worker, JobIDs: ids, Lease: h.lease})
		if err != nil {
			if failed != nil && !errors.Is(err, context.Canceled) {
				failed(err)
			}
			continue
		}
		for _, id := range stop {
			if h.Stop(id) && stopped != nil {
				stopped(id)
			}
		}
	}
}

// isClosed reports whether c is closed. Only its owner closes it.
func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// RunOneParams are the inputs of [RunOne].
type RunOneParams struct {
	Store    queue.Store
	Executor *Executor
	// Events receives "started", then "finished" or "recovered". nil
	// discards them.
	Events   *EventLog
	WorkerID string
	// Job is as JobClaim returned it: AttemptCount is this attempt.
	Job queue.Job
	// Cancel, Stdout, Stderr, SpawnGate, Exiting and Ended are passed to
	// [Executor.Execute] (see [ExecParams]).
	Cancel         <-chan struct{}
	Stdout, Stderr io.Writer
	SpawnGate      func(ctx context.Context, cancel <-chan struct{}) error
	Exiting, Ended func()
	// Executed, when not nil, is called once Execute has returned, before
	// anything is recorded.
	Executed func()
	// BeforeRecord, when not nil, is called before a finished attempt is
	// recorded (not before an interrupted one is given back): the worker
	// lets its next claim go first there.
	BeforeRecord func()
	// Log receives the lifecycle's lines; nil discards them.
	Log *slog.Logger
	// Waiting, when not nil, is told (besides Log) that the attempt waits
	// before it starts, and why ([ExecParams].Waiting).
	Waiting func(why string)
}

// RunOneResult is what [RunOne] did.
type RunOneResult struct {
	// Attempt is the attempt as Execute returned it.
	Attempt queue.Attempt
	// Job is the job as the store left it: its state after the attempt
	// (queued again for a retry). The zero Job when nothing was recorded.
	Job queue.Job
	// Released: the attempt was interrupted (ctx ended) and the job given
	// back to the queue (LeaseRelease) rather than recorded as finished.
	Released bool
	// Err is why the attempt could not be recorded (the store failed, or
	// the lease was lost); an interrupted attempt that could not be given
	// back is left to lease recovery, with Err set.
	Err error
}

// RunOne runs one claimed attempt of p.Job and records it. An attempt
// that ctx interrupted (a hard stop) is given back to the queue at once
// (LeaseRelease: a stop does not count against retries) rather than left
// for lease recovery. Records are made with a context of their own: the
// attempt is over, whatever ctx says.
func RunOne(ctx context.Context, p RunOneParams) RunOneResult {
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	j, attempt := p.Job, p.Job.AttemptCount
	log = log.With("job", j.ID, "name", j.Name, "attempt", attempt)
	log.Info("claimed")
	_ = p.Events.Append(Event{Time: time.Now(), Type: "started", JobID: j.ID, JobName: j.Name, Attempt: attempt, State: string(queue.StateRunning), WorkerID: p.WorkerID})
	waiting := func(why string) {
		log.Info("waiting", "why", why)
		if p.Waiting != nil {
			p.Waiting(why)
		}
	}
	att := p.Executor.Execute(ctx, ExecParams{Job: j, Attempt: attempt, Cancel: p.Cancel, Stdout: p.Stdout, Stderr: p.Stderr,
		SpawnGate: p.SpawnGate, Exiting: p.Exiting, Ended: p.Ended, Waiting: waiting})
	att.WorkerID = p.WorkerID
	if p.Executed != nil {
		p.Executed()
	}
	res := RunOneResult{Attempt: att}
	if att.Outcome == queue.OutcomeInterrupted {
		// The worker stopped the job itself (its processes are gone):
		// give it back now rather than when its lease expires, which
		// another worker's recovery pass would only notice later.
		rel, err := p.Store.LeaseRelease(context.Background(), &queue.LeaseReleaseParams{WorkerID: p.WorkerID, JobIDs: []string{j.ID}, Reason: att.Reason})
		if err == nil && len(rel) == 0 {
			err = fmt.Errorf("runner: job %s: %w", j.ID, queue.ErrLeaseLost)
		}
		if err != nil {
			log.Warn("attempt interrupted; left for lease recovery", "reason", att.Reason, "err", err)
			res.Err = err
			return res
		}
		log.Warn("attempt interrupted; job given back", "reason", att.Reason, "state", rel[0].State)
		_ = p.Events.Append(Event{Time: time.Now(), Type: "recovered", JobID: j.ID, JobName: j.Name, State: string(rel[0].State), Reason: rel[0].Reason, WorkerID: p.WorkerID})
		res.Job, res.Released = rel[0], true
		return res
	}
	if p.BeforeRecord != nil {
		p.BeforeRecord()
	}
	storeLogs(p, att, log)
	rec, err := p.Store.AttemptFinish(context.Background(), &queue.AttemptFinishParams{JobID: j.ID, WorkerID: p.WorkerID, Attempt: att})
	if err != nil {
		log.Error("record attempt", "err", err)
		res.Err = err
		return res
	}
	log.Info("finished", "outcome", att.Outcome, "state", rec.State, "reason", att.Reason)
	_ = p.Events.Append(Event{Time: time.Now(), Type: "finished", JobID: j.ID, JobName: j.Name, Attempt: attempt,
		State: string(rec.State), Outcome: att.Outcome, ExitCode: att.ExitCode, Reason: att.Reason, WorkerID: p.WorkerID})
	res.Job = rec
	return res
}

// logSlack is how far past log_max_bytes a capped log may go: the
// marker line between its head and its tail.
const logSlack = 4096

// storeLogs copies the attempt's capped output into the store when it
// keeps logs where every host can read them (queue.LogStore), before the
// attempt is recorded and while the lease is held. A failure is logged
// and leaves the logs in their files on this host.
func storeLogs(p RunOneParams, att queue.Attempt, log *slog.Logger) {
	ls, ok := p.Store.(queue.LogStore)
	if !ok || (att.StdoutPath == "" && att.StderrPath == "") {
		return
	}
	limit := p.Executor.Config.LogMaxBytes + logSlack
	var l queue.AttemptLog
	var err error
	if l.Stdout, err = readLog(att.StdoutPath, limit); err == nil {
		l.Stderr, err = readLog(att.StderrPath, limit)
	}
	if err == nil {
		err = ls.AttemptLogPut(context.Background(), &queue.AttemptLogPutParams{JobID: p.Job.ID, Number: p.Job.AttemptCount, WorkerID: p.WorkerID, Log: l})
	}
	if err != nil {
		log.Warn("attempt output not stored in the queue; it stays in this host's files", "err", err)
	}
}

// readLog reads at most limit bytes of the log at path; "" or a missing
// file (a stream the job never wrote) reads as empty.
func readLog(path string, limit int64) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// RunJobParams are the inputs of [RunJob].
type RunJobParams struct {
	Store    queue.Store
	Executor *Executor
	Events   *EventLog // nil discards events
	// WorkerID names this process in leases; unique per process start.
	WorkerID string
	// JobID is the job to run, enqueued already.
	JobID string
	// Stdout and Stderr, when not nil, receive a live copy of each
	// attempt's output.
	Stdout, Stderr io.Writer
	// Cancel, when closed (Ctrl-C), cancels the job: a running attempt is
	// stopped and recorded as canceled, a job waiting for its next
	// attempt is canceled, a job another worker runs is asked to cancel
	// (and still followed to its end).
	Cancel <-chan struct{}
	// Note, when not nil, is told what happens, for the user: event is
	// "following" (another worker claimed the attempt first),
	// "backoff" (waiting before the next attempt), "waiting" (for
	// another job writing the same directories), "cancel_requested"
	// (`paddock cancel` seen at a heartbeat) or "attempt_finished" (one
	// that will be retried).
	Note func(event, text string, attempt int)
}

// followPoll is how often RunJob looks at a job another worker runs.
const followPoll = 200 * time.Millisecond

// RunJob runs one enqueued job in the foreground until it is final and
// returns it: it claims that job only, runs and records each attempt
// ([RunOne]) under a [Heartbeat], waits out the backoff between
// attempts, and follows an attempt that a worker sharing the store
// claimed first. An error means the store failed; the job's own failure
// is its final state.
func RunJob(p RunJobParams) (queue.Job, error) {
	note := p.Note
	if note == nil {
		note = func(string, string, int) {}
	}
	lease := p.Executor.Config.Lease.Duration
	hb := NewHeartbeat(p.Store, p.WorkerID, lease)
	hbCtx, stopHB := context.WithCancel(context.Background())
	defer stopHB()
	var attempt atomic.Int64 // the attempt running, for the note
	go hb.Run(hbCtx, func(string) { note("cancel_requested", "cancel requested; stopping the job", int(attempt.Load())) }, nil)
	canceled := func() bool {
		select {
		case <-p.Cancel:
			return true
		default:
			return false
		}
	}
	ctx := context.Background() // records and claims outlive Ctrl-C
	lastWhy := ""
	for {
		claimed, err := p.Store.JobClaim(ctx, &queue.JobClaimParams{WorkerID: p.WorkerID, Limit: 1, Lease: lease, JobIDs: []string{p.JobID},
			PolicySHA256: p.Executor.Policy.SHA256})
		if err != nil {
			return queue.Job{}, err
		}
		if len(claimed) == 0 {
			j, err := p.Store.JobGet(ctx, p.JobID)
			if err != nil || j.State.Finished() {
				return j, err
			}
			if j.State == queue.StateRunning {
				note("following", fmt.Sprintf("attempt %d is running on worker %s; its output is in `paddock logs %s`", j.AttemptCount, j.LeaseOwner, p.JobID), j.AttemptCount)
				return followToFinal(p)
			}
			wait := max(time.Until(j.NotBefore), 100*time.Millisecond)
			// A pause or a full group holds it back: say so once, and
			// look again twice a second.
			why := ""
			if q, err := p.Store.QueueGet(ctx); err == nil {
				groups := map[string]queue.Group{}
				if gs, err := p.Store.GroupList(ctx, &queue.GroupListParams{Names: []string{j.Spec.Group}}); err == nil && j.Spec.Group != "" {
					for _, g := range gs {
						groups[g.Name] = g
					}
				}
				why = queue.Waiting(j, q, groups, time.Now())
			}
			switch {
			case why != "" && !j.NotBefore.After(time.Now()):
				wait = 500 * time.Millisecond
				if why != lastWhy {
					note("waiting", "waiting: "+why, j.AttemptCount)
				}
			case j.AttemptCount == 0 && j.NotBefore.After(time.Now()):
				note("waiting", fmt.Sprintf("waiting %s until the job is due (%s)", wait.Round(time.Millisecond), j.NotBefore.UTC().Format(time.RFC3339)), j.AttemptCount)
			default:
				note("backoff", fmt.Sprintf("waiting %s before the next attempt (%s)", wait.Round(time.Millisecond), j.Reason), j.AttemptCount)
			}
			lastWhy = why
			select {
			case <-p.Cancel:
				if _, err := p.Store.JobCancel(ctx, p.JobID); err != nil {
					return queue.Job{}, err
				}
				return p.Store.JobGet(ctx, p.JobID)
			case <-time.After(wait):
			}
			continue
		}
		j := claimed[0]
		attempt.Store(int64(j.AttemptCount))
		stop := hb.Add(j.ID)
		done := make(chan struct{})
		go func() { // Ctrl-C stops the attempt: it ends canceled
			select {
			case <-p.Cancel:
				hb.Stop(j.ID)
			case <-done:
			}
		}()
		attemptNo := j.AttemptCount
		res := RunOne(ctx, RunOneParams{Store: p.Store, Executor: p.Executor, Events: p.Events, WorkerID: p.WorkerID, Job: j,
			Cancel: stop, Stdout: p.Stdout, Stderr: p.Stderr, Waiting: func(why string) { note("waiting", "waiting: "+why, attemptNo) }})
		close(done)
		hb.Remove(j.ID)
		if res.Err != nil {
			return queue.Job{}, res.Err
		}
		if res.Job.State.Finished() {
			return res.Job, nil
		}
		if !canceled() {
			note("attempt_finished", fmt.Sprintf("attempt %d %s: %s", j.AttemptCount, res.Attempt.Outcome, res.Attempt.Reason), j.AttemptCount)
		}
	}
}

// followToFinal polls the job until it is final. p.Cancel asks for a
// cancel once and keeps following, so the job's end is still reported.
func followToFinal(p RunJobParams) (queue.Job, error) {
	asked := false
	for {
		j, err := p.Store.JobGet(context.Background(), p.JobID)
		if err != nil || j.State.Finished() {
			return j, err
		}
		select {
		case <-p.Cancel:
			if !asked {
				asked = true
				if _, err := p.Store.JobCancel(context.Background(), p.JobID); err != nil {
					return j, err
				}
			}
		default:
		}
		time.Sleep(followPoll)
	}
}

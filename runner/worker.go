package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"paddock/inbox"
	"paddock/queue"
)

// pollInterval is how often an idle worker looks at the store even without
// a wake-up (jobs whose backoff ran out, jobs enqueued from another host).
// One indexed query per second is not busy polling.
const pollInterval = time.Second

// pruneInterval is how often a worker deletes finished jobs older than the
// config's retention.
const pruneInterval = time.Hour

// WorkerOptions configure a [Worker].
type WorkerOptions struct {
	Store    queue.Store
	Executor *Executor
	// Inbox, when not nil, is scanned whenever the worker wakes.
	Inbox *inbox.Inbox
	// ID names the worker in leases, attempts and events. Defaults to
	// NewWorkerID(""), unique per process start.
	ID string
	// Concurrency is how many jobs run at once: at most this many jobs
	// ever have processes alive. A slot frees in two steps. When a
	// confined job's command exits (bwrap's exit-code record), the next
	// job is claimed and its hooks decide while the sandbox is torn down
	// (about a millisecond); its process starts only once every process
	// of the previous job is gone (the sandbox's init has exited:
	// ExecParams.Ended). The attempt is recorded after that claim, while
	// the next job runs. So for about a millisecond the store may show
	// one more job as running than Concurrency, and the next attempt's
	// start may precede the previous one's end; processes never overlap.
	// Defaults to Executor.Config.Concurrency.
	Concurrency int
	// Drain makes Run return once nothing is queued or running, and no
	// job file waits in the inbox to settle.
	Drain  bool
	Logger *slog.Logger
	Events *EventLog
	// Metrics, when not nil, receives the worker's claims, attempts,
	// recoveries and store errors (the executor's hook decisions are
	// Executor.Metrics).
	Metrics *Metrics
}

// Summary is what one Run did.
type Summary struct {
	// Finished counts the jobs this worker finished, by final state.
	Finished map[queue.JobState]int
	// Failed lists ids of jobs this worker finished in a state other than
	// succeeded (failed, denied, canceled).
	Failed []string
	// Rejected lists the inbox files this worker refused, where they are
	// now (under inbox/rejected/, each with a .error file beside it).
	Rejected []string
}

// Worker claims jobs and runs them through an [Executor], heartbeating the
// leases of running jobs and recording every attempt. Use one Worker per
// process; Run must not be called twice.
type Worker struct {
	o       WorkerOptions
	abort   chan struct{}
	abortMu sync.Once

	hb       *Heartbeat // the leases of claimed jobs, until recorded
	mu       sync.Mutex
	running  int           // claimed jobs whose command has not exited: the claim slots in use
	procs    chan struct{} // one token per job process alive: at most Concurrency
	pass     chan struct{} // closed at the end of the loop's next claim pass
	loopDone bool          // the loop claims no more; pass stays closed
	summary  Summary

	inboxDirty atomic.Bool // a file landed in the inbox since the last scan
}

// NewWorker returns a worker; it starts nothing until Run.
func NewWorker(o WorkerOptions) *Worker {
	if o.ID == "" {
		o.ID = NewWorkerID("")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = o.Executor.Config.Concurrency
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Worker{o: o, abort: make(chan struct{}), hb: NewHeartbeat(o.Store, o.ID, o.Executor.Config.Lease.Duration),
		procs: make(chan struct{}, o.Concurrency),
		pass:  make(chan struct{}), summary: Summary{Finished: map[queue.JobState]int{}}}
}

// Concurrency is how many jobs w runs at once: WorkerOptions.Concurrency,
// or the config's when that was 0.
func (w *Worker) Concurrency() int { return w.o.Concurrency }

// Abort stops running jobs at once (SIGKILL) and makes Run return; their
// attempts are recorded as interrupted and the jobs given back to the
// queue (LeaseRelease; left to lease recovery if that fails). Safe to call from any
// goroutine, more than once.
func (w *Worker) Abort() { w.abortMu.Do(func() { close(w.abort) }) }

// Run claims and runs jobs until ctx is canceled (then it stops claiming,
// lets running jobs finish within the shutdown grace, stops the rest and
// returns), Abort is called, or, with Drain, nothing is queued or running.
// It returns an error only when the store fails; job failures are in the
// Summary.
func (w *Worker) Run(ctx context.Context) (Summary, error) {
	log := w.o.Logger.With("worker", w.o.ID)
	// hard ends running jobs; it is canceled by Abort or after the
	// shutdown grace.
	hard, stopHard := context.WithCancel(context.Background())
	defer stopHard()
	go func() {
		select {
		case <-w.abort:
		case <-hard.Done():
		}
		stopHard()
	}()

	if r, ok := w.o.Store.(queue.OutageReporter); ok {
		defer r.WatchOutages(w.watchOutages(log))()
	}
	if err := w.recoverLeases(ctx, log); err != nil {
		if ctx.Err() != nil {
			return w.summary, nil // stopped before it began: nothing claimed
		}
		return w.summary, fmt.Errorf("recover leases: %w", err)
	}

	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if stop := w.watch(log, poke); stop != nil {
		defer stop()
	}
	// A store shared by several hosts tells when another committed jobs
	// (queue.Notifier); the poll stays the fallback.
	var notified <-chan struct{}
	if n, ok := w.o.Store.(queue.Notifier); ok {
		c, stop := n.Notifications()
		defer stop()
		notified = c
	}

	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.hb.Run(hard, func(id string) { log.Info("cancel requested; stopping job", "job", id) },
			func(err error) { w.o.Metrics.storeError("heartbeat"); logStoreErr(log, "heartbeat", err) })
	}()
	defer func() { <-hbDone }()
	defer stopHard()

	var wg sync.WaitGroup
	done := make(chan struct{}, w.o.Concurrency)
	wakeLoop := func() {
		select { // a wake-up signal, never a reason to block
		case done <- struct{}{}:
		default:
		}
	}
	lastRecover := time.Now()
	var lastPrune, lastTick, lastScan, nextDue time.Time
	var policyErr error    // the queue's policy changed under the worker: it stops claiming
	drainWaitSaid := false // a drain said once that queued jobs cannot start yet
	for {
		if time.Since(lastPrune) > pruneInterval {
			lastPrune = time.Now()
			w.prune(ctx, log)
		}
		if ctx.Err() != nil || hard.Err() != nil {
			break
		}
		// The inbox is scanned when a file lands in it, and once per poll
		// interval (a file is taken only after it settled), not on every
		// pass: a scan takes a lock file and reads the directory.
		if w.o.Inbox != nil && (w.inboxDirty.Swap(false) || time.Since(lastScan) >= pollInterval) {
			lastScan = time.Now()
			results, err := w.o.Inbox.Scan(ctx)
			if err != nil {
				log.Warn("inbox scan", "err", err)
			}
			for _, r := range results {
				if r.Err != nil {
					log.Warn("inbox: file refused", "file", r.File, "moved_to", r.Path, "err", r.Err)
					w.mu.Lock()
					w.summary.Rejected = append(w.summary.Rejected, r.Path)
					w.mu.Unlock()
					continue
				}
				log.Info("inbox: file enqueued", "file", r.File, "jobs", len(r.Jobs))
			}
		}
		if time.Since(lastRecover) > w.o.Executor.Config.Lease.Duration/2 {
			lastRecover = time.Now()
			if err := w.recoverLeases(ctx, log); err != nil && ctx.Err() == nil {
				logStoreErr(log, "recover leases", err)
			}
		}
		// The scheduler (runner/schedule.go) runs when a schedule is due,
		// and otherwise once per poll interval to see new schedules: a
		// pass per finished job would cost a store query each.
		if now := time.Now(); now.Sub(lastTick) >= pollInterval || (!nextDue.IsZero() && !now.Before(nextDue)) {
			lastTick = now
			nextDue = w.tickSchedules(ctx, log)
		}
		free := w.o.Concurrency - w.runningCount()
		claimed := 0
		if free > 0 {
			// Not cancelable: a claim takes a millisecond, and a context
			// that can be canceled costs the SQLite driver a goroutine and
			// a progress handler per statement.
			claimStart := time.Now()
			jobs, err := w.o.Store.JobClaim(context.WithoutCancel(ctx), &queue.JobClaimParams{WorkerID: w.o.ID, Limit: free, Lease: w.o.Executor.Config.Lease.Duration,
				PolicySHA256: w.o.Executor.Policy.SHA256})
			w.o.Metrics.claim(time.Since(claimStart), len(jobs), err)
			if errors.Is(err, queue.ErrPolicyChanged) {
				policyErr = fmt.Errorf("%w: %w (restart the worker to run under the new policy)", ErrPolicyMismatch, err)
				log.Error("the queue's policy changed: claiming no more jobs", "err", err)
				break
			}
			if err != nil && ctx.Err() == nil {
				logStoreErr(log, "claim", err)
			}
			claimed = len(jobs)
			for _, j := range jobs {
				cancel := w.hb.Add(j.ID)
				w.mu.Lock()
				w.running++
				w.mu.Unlock()
				wg.Add(1)
				go func(j queue.Job) {
					defer wg.Done()
					// The claim pass ends once its job is scheduled:
					// a record woken earlier would take this
					// goroutine's place on the processor.
					w.passDone(false)
					w.runOne(hard, log, j, cancel, wakeLoop)
				}(j)
			}
			if claimed == 0 {
				w.passDone(false)
			}
		}
		// A drain also waits for the inbox's files to settle: they are
		// the queue's next jobs.
		if w.o.Drain && claimed == 0 && w.inflightCount() == 0 && (w.o.Inbox == nil || w.o.Inbox.Pending() == 0) {
			counts, err := w.o.Store.JobCounts(ctx)
			if err == nil && counts[queue.StateQueued] == 0 && counts[queue.StateRunning] == 0 {
				break
			}
			if err == nil && counts[queue.StateRunning] == 0 {
				if why := drainBlocked(ctx, w.o.Store, counts[queue.StateQueued]); why != "" {
					policyErr = fmt.Errorf("%w: %s", ErrDrainPaused, why)
					log.Error("cannot drain", "err", policyErr)
					break
				}
				if !drainWaitSaid {
					// Not an error: they become claimable (a delay, a
					// dependency, a full group), and the drain waits.
					drainWaitSaid = true
					log.Info("draining: waiting for queued jobs that cannot start yet (delayed, waiting on dependencies, or a full group); paddock ls says why", "queued", counts[queue.StateQueued])
				}
			}
		}
		if claimed > 0 && claimed == free {
			continue // there may be more ready; a slot frees on done
		}
		select {
		case <-ctx.Done():
		case <-hard.Done():
		case <-done:
		case <-wake:
		case <-notified:
		case <-scheduleTimer(nextDue):
		case <-time.After(pollInterval):
		}
	}

	// Graceful stop: no more claims; running jobs get the shutdown grace
	// (attempts that ended are recorded at once).
	w.passDone(true)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	if w.inflightCount() > 0 && hard.Err() == nil {
		log.Info("stopping: waiting for running jobs", "running", w.runningCount(), "grace", w.o.Executor.Config.ShutdownGrace.Duration)
		select {
		case <-finished:
		case <-hard.Done():
		case <-time.After(w.o.Executor.Config.ShutdownGrace.Duration):
			log.Warn("shutdown grace over: stopping running jobs; they are given back to the queue")
		}
	}
	stopHard()
	<-finished
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.summary, policyErr
}

// ErrDrainPaused: Run with Drain found queued jobs that no claim can take
// because the queue, or every group they wait in, is paused; it returns
// instead of waiting for a resume that may never come.
var ErrDrainPaused = errors.New("runner: the queue cannot drain while paused")

// drainBlocked says why the queued jobs (none running) cannot be
// claimed: the queue is paused, or each of them is in a paused group.
// "" when some could be claimed (or the store cannot say).
func drainBlocked(ctx context.Context, st queue.Store, queued int) string {
	q, err := st.QueueGet(ctx)
	if err != nil {
		return ""
	}
	if q.Paused {
		return fmt.Sprintf("the queue is paused (since %s) with %d job(s) queued: run `paddock resume`", q.PausedAt.UTC().Format(time.RFC3339), queued)
	}
	groups, err := st.GroupList(ctx, &queue.GroupListParams{})
	if err != nil {
		return ""
	}
	held, names := 0, []string{}
	for _, g := range groups {
		if g.Paused && g.Queued > 0 {
			held += g.Queued
			names = append(names, g.Name)
		}
	}
	if held > 0 && held == queued {
		resume := make([]string, len(names))
		for i, n := range names {
			resume[i] = "`paddock resume --group " + n + "`"
		}
		return fmt.Sprintf("every queued job is in a paused group (%s): run %s", strings.Join(names, ", "), strings.Join(resume, ", "))
	}
	return ""
}

// recoverLeases takes back the jobs of workers whose leases expired, and
// logs and records each one.
func (w *Worker) recoverLeases(ctx context.Context, log *slog.Logger) error {
	recovered, err := w.o.Store.LeaseRecoverExpired(ctx)
	w.o.Metrics.recovered(len(recovered))
	if err != nil {
		w.o.Metrics.storeError("recover")
	}
	for _, j := range recovered {
		log.Info("recovered expired lease", "job", j.ID, "state", j.State)
		_ = w.o.Events.Append(Event{Time: time.Now(), Type: "recovered", JobID: j.ID, JobName: j.Name, State: string(j.State), Reason: j.Reason, WorkerID: w.o.ID})
	}
	return err
}

// inflightCount is the number of claimed jobs not yet recorded.
func (w *Worker) inflightCount() int { return w.hb.Len() }

// runningCount is the number of claimed jobs whose attempt has not ended:
// the slots in use.
func (w *Worker) runningCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running
}

// passDone ends a pass of the claim loop: whoever waits for it (a job that
// freed its slot and lets the claim go first) goes on. A pass ends when a
// claim finds nothing, or when a job it claimed starts running. With last,
// the loop claims no more and later waits return at once.
func (w *Worker) passDone(last bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.loopDone {
		return
	}
	close(w.pass)
	if last {
		w.loopDone = true
		return
	}
	w.pass = make(chan struct{})
}

// errCanceledAtGate is the worker's SpawnGate error for a job canceled
// while it waited for a process slot.
var errCanceledAtGate = errors.New("canceled before it started")

// runOne executes and records one claimed job ([RunOne]). When the job's
// processes have ended (ExecParams.Ended; at the latest when Execute
// returns) it frees the job's slot and wakes the loop, waits for the
// loop's claim (the store has one writer: the next job's claim should not
// queue behind this record), then records the attempt and wakes the loop
// again (the record may have released dependent jobs, and drain waits
// for it).
func (w *Worker) runOne(hard context.Context, log *slog.Logger, j queue.Job, cancel <-chan struct{}, wakeLoop func()) {
	// endAttempt frees the slot, once, and returns the claim pass that was
	// current then: the one whose claim the record lets go first.
	freed := false
	var pass <-chan struct{}
	endAttempt := func() <-chan struct{} {
		w.mu.Lock()
		defer w.mu.Unlock()
		if !freed {
			freed = true
			w.running--
			pass = w.pass
		}
		return pass
	}
	defer func() {
		endAttempt()
		w.hb.Remove(j.ID)
		wakeLoop()
	}()
	// Two steps free the slot. When the job's command has exited
	// (Exiting), the next job may be claimed and decided while the
	// sandbox is torn down; its process starts only once every process
	// of this job is gone (Ended releases the process token that
	// SpawnGate takes). So at most Concurrency jobs ever have processes.
	var procMu sync.Mutex
	holding := false
	releaseProc := func() {
		procMu.Lock()
		defer procMu.Unlock()
		if holding {
			holding = false
			<-w.procs
		}
	}
	defer releaseProc()
	gate := func(ctx context.Context, canceled <-chan struct{}) error {
		select {
		case w.procs <- struct{}{}:
			procMu.Lock()
			holding = true
			procMu.Unlock()
			return nil
		case <-canceled:
			return errCanceledAtGate
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	res := RunOne(hard, RunOneParams{
		Store: w.o.Store, Executor: w.o.Executor, Events: w.o.Events, WorkerID: w.o.ID, Job: j, Cancel: cancel, Log: log,
		SpawnGate: gate,
		Exiting:   func() { endAttempt(); wakeLoop() },
		Ended:     func() { releaseProc(); endAttempt(); wakeLoop() },
		Executed: func() {
			releaseProc()
			pass = endAttempt()
			wakeLoop()
		},
		// The pass ends right after the loop's claim, or at once when the
		// loop has stopped; hard is a last resort.
		BeforeRecord: func() {
			select {
			case <-pass:
			case <-hard.Done():
			}
		},
	})
	w.o.Metrics.finishedAttempt(res.Attempt.Outcome)
	if res.Err != nil {
		op := "record"
		if res.Attempt.Outcome == queue.OutcomeInterrupted {
			op = "release"
		}
		w.o.Metrics.storeError(op)
	}
	if res.Err == nil {
		// A job given back is canceled when a cancel was requested; a
		// stop does not count against retries.
		w.count(j.ID, res.Job.State)
	}
}

// count adds a job that this worker moved to state to the summary, when
// that state is final (a queued job will be retried).
func (w *Worker) count(id string, state queue.JobState) {
	if state == queue.StateQueued {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.summary.Finished[state]++
	if state != queue.StateSucceeded {
		w.summary.Failed = append(w.summary.Failed, id)
	}
}

// watch wakes the worker when the wake file is touched or a file lands in
// the inbox. It returns a stop function, or nil when inotify is unavailable
// (the worker then relies on its one-second poll).
func (w *Worker) watch(log *slog.Logger, poke func()) func() {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn("no file watcher; polling only", "err", err)
		return nil
	}
	notify := StateDir{Root: w.o.Executor.StateDir}.Notify()
	if err := os.MkdirAll(notify, 0o700); err == nil {
		_ = fw.Add(notify)
	}
	if w.o.Inbox != nil {
		_ = fw.Add(w.o.Inbox.Dir())
	}
	go func() {
		for {
			select {
			case ev, ok := <-fw.Events:
				if !ok {
					return
				}
				switch dir := filepath.Dir(ev.Name); {
				case dir == notify:
					poke()
				case w.o.Inbox != nil && dir == filepath.Clean(w.o.Inbox.Dir()):
					w.inboxDirty.Store(true)
					poke()
				}
			case _, ok := <-fw.Errors:
				if !ok {
					return
				}
			}
		}
	}()
	return func() { fw.Close() }
}

// Wake touches the wake file ([StateDir.WakeFile]) so idle workers claim
// at once. Errors are ignored by callers: a missed wake-up costs one poll
// interval.
func Wake(stateDir string) error {
	sd := StateDir{Root: stateDir}
	if err := os.MkdirAll(sd.Notify(), 0o700); err != nil {
		return err
	}
	return os.WriteFile(sd.WakeFile(), nil, 0o600)
}

// prune deletes finished jobs older than the retention, then the log and
// default workspace directories of jobs that no longer exist. Failures are
// logged: pruning never stops a worker.
func (w *Worker) prune(ctx context.Context, log *slog.Logger) {
	keep := w.o.Executor.Config.Retention
	if keep == nil || keep.Duration <= 0 {
		return
	}
	n, err := w.o.Store.JobPrune(ctx, &queue.JobPruneParams{OlderThan: keep.Duration})
	if err != nil {
		if !errors.Is(err, queue.ErrUnreachable) {
			log.Warn("prune", "err", err)
		}
		return
	}
	if n == 0 {
		return
	}
	// Logs are logs/<id>.<attempt>.std{out,err}; default workspaces are
	// workspaces/<id>. Either goes once its job is gone.
	removed := 0
	gone := map[string]bool{}
	isGone := func(id string) bool {
		if g, ok := gone[id]; ok {
			return g
		}
		_, err := w.o.Store.JobGet(ctx, id)
		gone[id] = errors.Is(err, queue.ErrNotFound)
		return gone[id]
	}
	sd := StateDir{Root: w.o.Executor.StateDir}
	for _, dir := range []string{sd.Logs(), sd.Workspaces()} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			id, _, _ := strings.Cut(e.Name(), ".")
			if id == "" || !isGone(id) {
				continue
			}
			if os.RemoveAll(filepath.Join(dir, e.Name())) == nil {
				removed++
			}
		}
	}
	log.Info("pruned finished jobs", "jobs", n, "files", removed, "retention", keep.Duration)
}

package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"paddock/hooks"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/sandbox"
)

// stderrTailBytes is how much of the end of stderr the classifier sees
// whole (bwrap's own error line, the denial hint); a denial line before
// it still counts ([cappedLog.DenialLine]).
const stderrTailBytes = 8 << 10

// Executor runs single attempts: it decides with the hook chain, confines
// with the sandbox, spawns, captures logs, enforces the timeout and
// classifies. It records nothing in the store itself; [Worker] and
// `paddock run` do. Safe for concurrent use.
type Executor struct {
	// Config is the defaulted config (mode, timeouts, log caps, env).
	Config Config
	// StateDir holds logs/ and workspaces/.
	StateDir string
	// Chain decides every job. Required (a chain of zero hooks allows all).
	Chain *hooks.Chain
	// Metrics, when not nil, times each hook chain decision.
	Metrics *Metrics
	// Probe is the start-up probe result; ProbeErr is non-nil when bwrap is
	// unusable, and every confined job then fails closed with it.
	Probe    sandbox.ProbeReport
	ProbeErr error
	// ProbeCache, when not "", is the probe cache file
	// ([sandbox.ProbeCached]). It is removed when bwrap fails to build a
	// confined job's sandbox, so that the next start probes the host
	// again instead of trusting a report the host no longer matches.
	// Defaults to "" (nothing removed).
	ProbeCache string
	// Fence is what jobs may not write (see [Fence]). The CLI passes
	// FenceFor with its defaults (the state directories and config a plain
	// `paddock` would use, its binary, bwrap on $PATH). Defaults to
	// FenceFor(StateDir, Config), built once at the first job.
	Fence *Fence
	// Launcher is every confined job's first program when the host has
	// the Landlock layer (package sandbox/launch), handed to bwrap by
	// descriptor: it is never closed by the Executor, and shared by
	// concurrent jobs. Defaults to [sandbox.OpenLauncher]'s for the
	// host's grade (the launcher image, or this process's own
	// executable, whose program must then call launch.Dispatch first in
	// main), opened at the first confined job and, at the partial grade,
	// again once the executable was replaced on disk.
	Launcher *os.File
	// Policy is the queue's policy: its ceilings refuse a job before
	// the hooks see it and again after they decided, and its digest is
	// the one every claim names. Defaults to the zero Policy, which
	// enforces [DefaultPolicy]'s ceilings.
	Policy Policy
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time

	fenceOnce    sync.Once
	defaultFence Fence

	launcherMu sync.Mutex
	launcher   *os.File

	// watchers holds the protect watches of the jobs running, on one
	// inotify instance kept for the Executor's life (close-on-exec).
	watchers sandbox.ProtectWatchers

	devNodesOnce sync.Once
	devNodesDir  string
	devNSOnce    sync.Once
	devNS        bool
}

// deviceNodes is how a worker's confined jobs get devices that are not
// the host's nodes: none (dir ""), bwrap started in a namespace made for
// the job ([sandbox.StartWithDeviceNodes]: the argv binds none; with
// tree, at the full grade, a whole /dev made there and bound as one
// mount), or, where that namespace cannot be made, the substitutes bound
// by the argv (ns false).
type deviceNodes struct {
	dir  string
	ns   bool
	tree bool
}

// argvDir is the [sandbox.ConfineParams].DeviceNodes for jobs: dir when
// the argv must bind the substitutes itself.
func (d deviceNodes) argvDir() string {
	if d.ns {
		return ""
	}
	return d.dir
}

// devTree is the [sandbox.ConfineParams].DevTree for jobs: dir when the
// namespace holds a whole /dev there.
func (d deviceNodes) devTree() string {
	if d.tree {
		return d.dir
	}
	return ""
}

// deviceNodes returns the substitute device nodes for a confined job
// ([Fence.DeviceNodes]); dir "" when the fence has none (a worker that is
// not root: its jobs own none of the host's nodes). They are checked,
// and made or repaired, before each job ([sandbox.PrepareDeviceNodes]:
// a dozen stat(2) calls). Whether bwrap can start over them
// ([sandbox.CheckDeviceNamespace]) is found once; where it cannot (no
// CAP_SYS_ADMIN) the argv binds them; where it can, a job at grade g
// full gets a whole /dev made there (tree).
func (e *Executor) deviceNodes(g sandbox.Grade) (deviceNodes, error) {
	e.devNodesOnce.Do(func() { e.devNodesDir = e.fence().DeviceNodes() })
	d := deviceNodes{dir: e.devNodesDir}
	if d.dir == "" {
		return d, nil
	}
	if err := sandbox.PrepareDeviceNodes(d.dir); err != nil {
		return d, err
	}
	e.devNSOnce.Do(func() { e.devNS = sandbox.CheckDeviceNamespace(d.dir) == nil })
	d.ns = e.devNS
	d.tree = d.ns && g == sandbox.GradeFull
	return d, nil
}

// launcherFile returns e.Launcher, or [sandbox.OpenLauncher]'s for grade
// g: opened at the first confined job, and, at the partial grade, where
// the file is bound, again once it has been unlinked (paddock upgraded
// while the worker runs), which bwrap could no longer bind. The file it
// replaces stays open: a spawn may be handing it to bwrap.
func (e *Executor) launcherFile(g sandbox.Grade) (*os.File, error) {
	if e.Launcher != nil {
		return e.Launcher, nil
	}
	e.launcherMu.Lock()
	defer e.launcherMu.Unlock()
	if e.launcher != nil && (g == sandbox.GradeFull || !sandbox.Unlinked(e.launcher)) {
		return e.launcher, nil
	}
	f, err := sandbox.OpenLauncher(g)
	if err != nil {
		return nil, err
	}
	e.launcher = f
	return f, nil
}

// fence returns e.Fence, or the default one built once.
func (e *Executor) fence() Fence {
	if e.Fence != nil {
		return *e.Fence
	}
	e.fenceOnce.Do(func() { e.defaultFence = FenceFor(e.StateDir, e.Config) })
	return e.defaultFence
}

// ExecParams are the inputs of one attempt.
type ExecParams struct {
	Job     queue.Job
	Attempt int
	// Cancel, when closed, stops the running job (SIGTERM, then SIGKILL
	// after the kill grace) and the attempt ends as canceled.
	Cancel <-chan struct{}
	// Stdout and Stderr, when not nil, receive a live copy of the output.
	Stdout, Stderr io.Writer
	// SpawnGate, when not nil, is called right before the job's process
	// is started, with the attempt's ctx and Cancel, and blocks until the
	// process may start (the worker's process slots). An error ends the
	// attempt with nothing started: canceled when Cancel was closed,
	// interrupted when ctx ended.
	SpawnGate func(ctx context.Context, cancel <-chan struct{}) error
	// Exiting, when not nil, is called once, from any goroutine, when a
	// confined job's command has exited (bwrap's exit-code record), while
	// other processes of its sandbox may still be alive, about a
	// millisecond before Ended. The worker claims and decides the next
	// job in that time.
	Exiting func()
	// Waiting, when not nil, is told once, with the reason, that the job
	// waits before it starts: another job writes the same directories
	// (the roots' locks, see rootlock.go).
	Waiting func(why string)
	// Ended, when not nil, is called once, from any goroutine, as soon as
	// every process of the job has ended, before Execute has reaped bwrap
	// and classified the attempt: for a confined job when the sandbox's
	// init has exited (the pid namespace dies with it: see
	// [sandbox.InitWatch]), otherwise when the process has exited and its
	// group was killed. That moment is the attempt's EndedAt. It is also
	// called when the process failed to start after SpawnGate let it. It
	// is not called when the job never started, nor when a hard stop
	// (ctx) ended the job first.
	Ended func()
}

// Execute runs one attempt of p.Job and returns its record. It never
// returns an error for anything the job or its hooks did: those are
// outcomes. ctx ends the attempt early (a hard worker stop); the attempt is
// then returned with outcome [queue.OutcomeInterrupted] and must not be
// recorded as finished: the worker gives the job back to the queue
// ([queue.Store.LeaseRelease]), or lease recovery takes it back.
func (e *Executor) Execute(ctx context.Context, p ExecParams) queue.Attempt {
	now := e.now
	job := p.Job
	att := queue.Attempt{Number: p.Attempt, StartedAt: now()}
	// endedAt is when the job's processes ended (see ExecParams.Ended):
	// the attempt's end, so that the attempts of one slot never overlap.
	var (
		endedMu sync.Mutex
		endedAt time.Time
	)
	finish := func(outcome, reason string) queue.Attempt {
		att.Outcome, att.Reason, att.EndedAt = outcome, reason, now()
		endedMu.Lock()
		if !endedAt.IsZero() {
			att.EndedAt = endedAt
		}
		endedMu.Unlock()
		return att
	}
	// markEnded runs once; a second caller waits until the first is
	// done, so Ended has returned before Execute does.
	var endOnce sync.Once
	markEnded := func() {
		endOnce.Do(func() {
			endedMu.Lock()
			endedAt = now()
			endedMu.Unlock()
			if p.Ended != nil {
				p.Ended()
			}
		})
	}

	workspace, err := e.Workspace(job)
	if err != nil {
		return finish(queue.OutcomeRunnerFailed, err.Error())
	}
	hj := e.HookJob(job, workspace, p.Attempt)
	// The policy's ceilings come before anything else: a job they refuse
	// never reaches the hooks (nor the fence).
	if r := e.Policy.Judge(e.askOf(hj, job)); r != nil {
		placeRefusal(r, job, true)
		return finish(queue.OutcomeDenied, r.Error())
	}
	// A job whose sandbox cannot be built as submitted (a cwd the sandbox
	// cannot show, a root the fence refuses) never reaches the hooks: it
	// is the job's fault, not a policy decision, and the hooks would only
	// see an error. Its roots stay open for the run when no hook changes
	// them.
	fence := e.fence()
	// Only the roots, to lock; the protected paths are resolved under
	// the locks.
	pol, err := fence.rootsPolicy(hj)
	var lock *rootLocks
	defer func() { lock.release() }()
	// The job's timeout covers its wait for its roots' locks.
	var lockDeadline time.Time
	if hj.TimeoutS > 0 {
		lockDeadline = now().Add(time.Duration(hj.TimeoutS * float64(time.Second)))
	}
	if err == nil {
		pol, lock, err = e.lockAndResolve(ctx, p.Cancel, lockDeadline, p.Waiting, fence, hj, pol)
		if o := lockOutcome(ctx, err); o != "" {
			return finish(o, err.Error())
		}
	}
	var pins *sandbox.Pinned
	if err == nil {
		pins, err = fence.Pin(pol, job.ID)
	}
	if err != nil {
		return finish(queue.OutcomeRunnerFailed, "not run: "+err.Error())
	}
	defer func() { pins.Close() }()
	decideStart := time.Now()
	res, err := e.Chain.Decide(ctx, hooks.DecideParams{Job: hj, Extra: job.Spec.Hooks})
	e.Metrics.hookDecision(time.Since(decideStart))
	if err != nil {
		return finish(queue.OutcomeInterrupted, "hook chain stopped: "+err.Error())
	}
	if trail, err := json.Marshal(res.Trail); err == nil {
		att.Trail = trail
	}
	if res.Verdict != hooks.VerdictAllow {
		return finish(queue.OutcomeDenied, res.Reason)
	}
	final := res.Job
	// A hook may adjust the job (may_widen widens it), never past the
	// policy's ceilings.
	if r := e.Policy.Judge(e.askOf(final, job)); r != nil {
		placeRefusal(r, job, false)
		r.Msg += " (after the hooks' adjustments)"
		return finish(queue.OutcomeDenied, r.Error())
	}

	// Without an enforced adjustment the job is the one already checked
	// and pinned: its policy is reused.
	policy := pol
	if slices.ContainsFunc(res.Trail, func(e hooks.TrailEntry) bool { return e.Enforced && e.Decision == hooks.DecisionAdjust }) {
		if policy, err = fence.policy(final); err != nil {
			return finish(queue.OutcomeRunnerFailed, err.Error())
		}
		// A hook may have made the job write (may_widen) or write other
		// roots: their locks are taken, and the policy resolved again
		// under them.
		if policy.Mode() == sandbox.ModeWorkspaceWrite && !lock.covers(policy.Roots()) {
			lock.release()
			policy, lock, err = e.lockAndResolve(ctx, p.Cancel, lockDeadline, p.Waiting, fence, final, policy)
			if o := lockOutcome(ctx, err); o != "" {
				return finish(o, err.Error())
			}
			if err != nil {
				return finish(queue.OutcomeRunnerFailed, err.Error())
			}
		}
	}
	if !slices.Equal(policy.Roots(), pol.Roots()) || policy.Mode() != pol.Mode() || !slices.Equal(policy.Protected(), pol.Protected()) {
		// The roots as submitted stay open until the new ones are judged
		// against them (judgeNarrowing).
		before := pins
		defer before.Close()
		if pins, err = fence.Pin(policy, job.ID); err != nil {
			return finish(queue.OutcomeRunnerFailed, err.Error())
		}
		if r := e.judgeNarrowing(policy, pins, before, hj, final, res.Trail); r != "" {
			return finish(queue.OutcomeDenied, r)
		}
	}
	// workspace_roots was judged on paths; judge it again on the
	// directories pinned for bwrap, which no symlink flipped since can
	// change.
	if r := e.judgePinned(policy, pins, final, job); r != "" {
		return finish(queue.OutcomeDenied, r)
	}
	mode := policy.Mode()
	confined := mode.Confined()
	if confined && e.ProbeErr != nil {
		return finish(queue.OutcomeRunnerFailed, e.unusableReason(mode))
	}
	// What bwrap inherits (sandbox.Inherited, in descriptor order): the
	// status pipe, the layers' files, the pinned roots.
	d := sandbox.Discovered()
	var (
		rootFDs, protectFDs []int
		in                  sandbox.Inherited
	)
	if confined {
		rootFDs = sandbox.RootFDs(len(pins.Files()))
		protectFDs = sandbox.ProtectFDs(len(pins.Files()), len(pins.Protected()))
		in.Roots, in.Protected = pins.Files(), pins.Protected()
		if d.LandlockABI > 0 {
			if in.Launcher, err = e.launcherFile(d.Grade); err != nil {
				return finish(queue.OutcomeRunnerFailed, "not run: "+err.Error())
			}
		}
	}
	var devNodes deviceNodes
	if confined {
		if devNodes, err = e.deviceNodes(d.Grade); err != nil {
			return finish(queue.OutcomeRunnerFailed, "not run: "+err.Error())
		}
	}
	argv, err := sandbox.Build(sandbox.ConfineParams{Argv: final.Argv, Policy: policy, Discovery: d, RootFDs: rootFDs, ProtectFDs: protectFDs, DeviceNodes: devNodes.argvDir(), DevTree: devNodes.devTree()})
	if err != nil {
		return finish(queue.OutcomeRunnerFailed, err.Error())
	}
	env := e.environ(final, job, p.Attempt, workspace)
	if confined {
		argv, env = loaderSafe(argv, env)
	}
	att.ConfinedArgv = argv

	state := StateDir{Root: e.StateDir}
	if err := os.MkdirAll(state.Logs(), 0o700); err != nil {
		return finish(queue.OutcomeRunnerFailed, "log directory: "+err.Error())
	}
	att.StdoutPath, att.StderrPath = state.AttemptLogs(job.ID, p.Attempt)
	stdout := newCappedLog(att.StdoutPath, e.Config.LogMaxBytes, 0, p.Stdout)
	stderr := newCappedLog(att.StderrPath, e.Config.LogMaxBytes, stderrTailBytes, p.Stderr)

	timeout := time.Duration(final.TimeoutS * float64(time.Second))
	if p.SpawnGate != nil {
		if err := p.SpawnGate(ctx, p.Cancel); err != nil {
			if ctx.Err() != nil {
				return finish(queue.OutcomeInterrupted, "worker stopped before the job started")
			}
			return finish(queue.OutcomeCanceled, "canceled before it started")
		}
	}
	exiting := func() {}
	if p.Exiting != nil {
		var once sync.Once
		exiting = func() { once.Do(p.Exiting) }
	}
	if confined && d.Seccomp {
		// A pipe bwrap reads to its end: one per spawn.
		if in.Seccomp, err = sandbox.SeccompFile(policy); err != nil {
			return finish(queue.OutcomeRunnerFailed, "not run: "+err.Error())
		}
		defer in.Seccomp.Close()
	}
	// What the job creates at a missing protected path, or a protected
	// link it replaces, is undone as soon as it is made, and the job
	// stopped; never run unwatched.
	var watch *sandbox.ProtectWatch
	if confined {
		if watch, err = e.watchers.Watch(policy, job.ID); err != nil {
			return finish(queue.OutcomeRunnerFailed, "not run: "+err.Error())
		}
	}
	run := e.spawn(ctx, spawnParams{
		argv: argv, cwd: policy.Cwd(), env: env,
		confined: confined, inherited: in, stdout: stdout, stderr: stderr, devNodes: devNodes, timeout: timeout,
		cancel: p.Cancel, fenced: watch.Tripped(), ended: markEnded, exiting: exiting,
	})
	if err := stdout.Close(); err != nil && run.err == nil {
		run.err = fmt.Errorf("stdout log: %w", err)
	}
	if err := stderr.Close(); err != nil && run.err == nil {
		run.err = fmt.Errorf("stderr log: %w", err)
	}
	// Every process of the job has ended: what it did to a link no
	// mount could pin is undone before anything else is reported.
	tampered := ""
	if confined {
		tampered = policy.AfterCommand(job.ID, watch)
	}
	if run.err != nil {
		return finish(queue.OutcomeRunnerFailed, run.err.Error())
	}
	if tampered != "" || run.stopped == stopFence {
		if run.stopped == stopFence {
			tampered = strings.TrimPrefix(tampered+"; paddock stopped the job as soon as it did", "; ")
		}
		return finish(queue.OutcomeDenied, "the fence: "+tampered)
	}

	c := sandbox.Classify(sandbox.ClassifyParams{Mode: mode, State: run.state, Status: run.status, Stderr: stderr.Tail(), DenialLine: stderr.DenialLine()})
	if confined && e.ProbeCache != "" && run.stopped == stopNone && c.Outcome == sandbox.OutcomeRunnerFailed && run.status.ChildPID == 0 {
		// bwrap gave up before it made the sandbox's first process: the
		// host may have changed since the probe.
		_ = sandbox.InvalidateProbeCache(e.ProbeCache)
	}
	if c.Signal == "" {
		code := c.ExitCode
		att.ExitCode = &code
	}
	att.Signal = c.Signal
	switch {
	case run.stopped == stopHard:
		return finish(queue.OutcomeInterrupted, "worker stopped while the job ran")
	case run.stopped == stopTimeout:
		return finish(queue.OutcomeTimeout, fmt.Sprintf("timed out after %s and was stopped (SIGTERM to its processes, SIGKILL to what was left after at most %s)", timeout, e.Config.KillGrace.Duration))
	case run.stopped == stopCancel:
		return finish(queue.OutcomeCanceled, "canceled while running; stopped")
	}
	return finish(string(c.Outcome), c.Reason)
}

// unusableReason explains why a confined job did not run on a host where
// the probe found bwrap unusable: the probe's error, bwrap's own line and
// the hint, so `paddock show` tells the whole story.
func (e *Executor) unusableReason(mode sandbox.Mode) string {
	var b strings.Builder
	fmt.Fprintf(&b, "not run: the sandbox is unusable on this host, and a %s job never runs unconfined: %v", mode, e.ProbeErr)
	if e.Probe.BwrapLine != "" && !strings.Contains(e.ProbeErr.Error(), e.Probe.BwrapLine) {
		fmt.Fprintf(&b, "; bwrap said: %s", e.Probe.BwrapLine)
	}
	if e.Probe.Hint != "" {
		fmt.Fprintf(&b, " (hint: %s)", e.Probe.Hint)
	}
	return b.String()
}

func (e *Executor) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

// Workspace returns the job's workspace, creating the default one
// (<state>/workspaces/<id>) when the job names none.
func (e *Executor) Workspace(job queue.Job) (string, error) {
	ws := job.Spec.Workspace
	if ws == "" {
		ws = StateDir{Root: e.StateDir}.DefaultWorkspace(job.ID)
		if err := os.MkdirAll(ws, 0o755); err != nil {
			return "", fmt.Errorf("workspace: %w", err)
		}
	}
	return ws, nil
}

// HookJob is the job as the hook chain sees it before any adjustment.
func (e *Executor) HookJob(job queue.Job, workspace string, attempt int) hooks.Job {
	s := job.Spec
	mode := s.Mode
	if mode == "" {
		mode = e.Config.DefaultMode
	}
	// Confined jobs have no network unless they ask for it (and the
	// policy allows it); an unconfined job cannot be isolated.
	network := !sandbox.Mode(mode).Confined()
	if s.Network != nil {
		network = *s.Network
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = e.Config.DefaultTimeout.Duration
	}
	cwd := s.Cwd
	if cwd == "" {
		cwd = workspace
	}
	env := map[string]string{}
	for k, v := range s.Env {
		env[k] = v
	}
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	return hooks.Job{
		ID: job.ID, Name: job.Name, Argv: append([]string(nil), s.Command...), Env: env,
		Cwd: cwd, Workspace: workspace, Mode: mode, Network: network, UnixSockets: s.UnixSockets,
		Writable: append([]string(nil), s.Writable...), TimeoutS: timeout.Seconds(),
		Attempt: attempt, Labels: labels,
	}
}

// askOf is what j (job as the hooks see it) asks of the policy; its
// workspace counts unless it is the job's default one, paddock's own.
// judgePinned returns why the pinned roots of the final policy are
// refused by the policy's workspace_roots, or "": each root but the job's
// own default workspace must lie within one of them, by device and inode
// on the descriptors bwrap binds; with none, no workspace_write root may
// lie in one of [sandbox.SystemTrees].
func (e *Executor) judgePinned(pol sandbox.Policy, pins *sandbox.Pinned, final hooks.Job, job queue.Job) string {
	if !pol.Mode().Confined() {
		return ""
	}
	ownWS := StateDir{Root: e.StateDir}.DefaultWorkspace(job.ID)
	exempt := func(i int) bool { return i == 0 && final.Workspace == ownWS }
	if len(e.Policy.WorkspaceRoots) == 0 {
		if pol.Mode() != sandbox.ModeWorkspaceWrite {
			return ""
		}
		bad, dir, err := PinnedInside(pol, pins, sandbox.SystemTrees, exempt)
		if err != nil {
			return "not run: " + err.Error()
		}
		if bad == "" {
			return ""
		}
		r := &RefusedError{Job: job.Name, Key: "workspace", Ceiling: CeilingWorkspaceRoots, Msg: systemDirRefusal(bad, dir) + " (as it is bound)"}
		return r.Error()
	}
	bad, err := PinnedWithin(pol, pins, nil, e.Policy.WorkspaceRoots, exempt)
	if err != nil {
		return "not run: " + err.Error()
	}
	if bad == "" {
		return ""
	}
	r := &RefusedError{Job: job.Name, Key: "workspace", Ceiling: CeilingWorkspaceRoots,
		Msg: fmt.Sprintf("%q, as it is bound, is not under any of the policy's workspace_roots (%s)", bad, strings.Join(e.Policy.WorkspaceRoots, ", "))}
	return r.Error()
}

// placeRefusal names job's name, file and line in r: the line of the
// refused key in the job's text when atKey and the text is at hand, else
// the line where the job starts (0 when unknown, as for stdin).
func placeRefusal(r *RefusedError, job queue.Job, atKey bool) {
	r.Job, r.File, r.Line = job.Name, job.SourcePath, job.Spec.Line
	if atKey && job.Source != "" && job.Spec.Line > 0 {
		r.Line = jobspec.KeyLines([]byte(job.Source))(job.Spec.Line, r.Key)
	}
}

// judgeNarrowing returns why the writable roots a hook without may_widen
// set are refused, or "": each must lie within one of the job's writable
// roots as submitted, by device and inode on the descriptors pinned
// before the hooks ran (before) and after (pins).
func (e *Executor) judgeNarrowing(pol sandbox.Policy, pins, before *sandbox.Pinned, hj, final hooks.Job, trail []hooks.TrailEntry) string {
	if !pol.Mode().Confined() || slices.Equal(hj.Writable, final.Writable) || e.narrowedByMayWiden(trail) {
		return ""
	}
	var orig []*os.File
	if files := before.Files(); len(files) > 1 {
		orig = files[1:] // the writable roots; [0] is the workspace
	}
	bad, err := PinnedWithin(pol, pins, orig, nil, func(i int) bool { return i == 0 })
	if err != nil {
		return "not run: " + err.Error()
	}
	if bad == "" {
		return ""
	}
	return fmt.Sprintf("a hook without may_widen set writable root %q, which, as it is bound, is not within the job's writable roots", bad)
}

// narrowedByMayWiden reports whether a hook with may_widen changed the
// writable roots (its widening is the operator's choice).
func (e *Executor) narrowedByMayWiden(trail []hooks.TrailEntry) bool {
	mayWiden := map[string]bool{}
	for _, h := range e.Chain.Hooks() {
		mayWiden[h.Config.Name] = h.Config.MayWiden
	}
	for _, t := range trail {
		if t.Enforced && t.Decision == hooks.DecisionAdjust && slices.Contains(t.Changed, "writable") && mayWiden[t.Hook] {
			return true
		}
	}
	return false
}

func (e *Executor) askOf(j hooks.Job, job queue.Job) Ask {
	a := Ask{Mode: sandbox.Mode(j.Mode), Network: j.Network, UnixSockets: j.UnixSockets, Writable: j.Writable}
	if j.Workspace != (StateDir{Root: e.StateDir}).DefaultWorkspace(job.ID) {
		a.Workspace = j.Workspace
	}
	return a
}

// loaderEnv are the variables that change what a dynamically linked
// program loads or runs before its main: glibc's UNSECURE_ENVVARS (the
// list it drops for setuid programs, sysdeps/generic/unsecvars.h; TMPDIR
// aside, which paddock sets to /tmp and bwrap does not use),
// GLIBC_TUNABLES (CVE-2023-4911) and every LD_ and MALLOC_ variable.
var loaderEnv = []string{"GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
	"NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR"}

func isLoaderVar(name string) bool {
	return strings.HasPrefix(name, "LD_") || strings.HasPrefix(name, "MALLOC_") || slices.Contains(loaderEnv, name)
}

// loaderSafe keeps a job's loader variables away from bwrap itself, which
// runs on the host, outside every namespace: a job's LD_PRELOAD would
// otherwise load the job's code into it. They go to the job through
// bwrap's --setenv (before the "--" that ends bwrap's options); the rest of
// the environment is bwrap's and passes through to the job. Values given
// this way show in the confined argv: loader variables are not secrets.
func loaderSafe(argv, env []string) ([]string, []string) {
	var keep, setenv []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if isLoaderVar(k) {
			setenv = append(setenv, "--setenv", k, v)
			continue
		}
		keep = append(keep, kv)
	}
	if len(setenv) == 0 {
		return argv, env
	}
	sep := slices.Index(argv, "--") // bwrap's options never hold "--" as a value
	if sep < 0 {
		return argv, keep // not bwrap's argv; drop them rather than run them on the host
	}
	out := make([]string, 0, len(argv)+len(setenv))
	out = append(out, argv[:sep]...)
	out = append(out, setenv...)
	return append(out, argv[sep:]...), keep
}

// environ is the job's environment: the passthrough list from the worker,
// then PADDOCK_* facts, then the job's own env (which wins).
func (e *Executor) environ(j hooks.Job, job queue.Job, attempt int, workspace string) []string {
	m := map[string]string{}
	for _, k := range e.Config.EnvPassthrough {
		if v, ok := os.LookupEnv(k); ok {
			m[k] = v
		}
	}
	if _, ok := m["PATH"]; !ok {
		m["PATH"] = "/usr/local/bin:/usr/bin:/bin"
	}
	m["TMPDIR"] = "/tmp"
	m["PADDOCK_JOB_ID"] = job.ID
	m["PADDOCK_JOB_NAME"] = job.Name
	m["PADDOCK_ATTEMPT"] = strconv.Itoa(attempt)
	m["PADDOCK_WORKSPACE"] = workspace
	for k, v := range j.Env {
		m[k] = v
	}
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

type stopReason int

const (
	stopNone stopReason = iota
	stopTimeout
	stopCancel
	stopHard
	// stopFence: the job changed a protected path that no mount could
	// keep ([sandbox.ProtectWatch]); it is killed at once, without the
	// kill grace, in which it could make the change again.
	stopFence
)

type spawnParams struct {
	argv     []string
	cwd      string
	env      []string
	confined bool
	// inherited are the files bwrap inherits besides the status pipe,
	// which spawn makes (Status is ignored).
	inherited sandbox.Inherited
	stdout    io.Writer
	stderr    io.Writer
	// devNodes, when its dir is not "", are the substitute device nodes
	// ([Fence.DeviceNodes]): the job's stdin is their null, not the
	// host's /dev/null, which a job running as host root would own and
	// could fchmod(2) through the descriptor; and bwrap starts in their
	// namespace when there is one.
	devNodes deviceNodes
	timeout  time.Duration
	cancel   <-chan struct{}
	// fenced, when closed, stops the job at once (stopFence).
	fenced  <-chan struct{}
	ended   func() // called when the job's processes have ended (ExecParams.Ended)
	exiting func() // called when the confined command has exited (ExecParams.Exiting)
}

type spawnResult struct {
	state   *os.ProcessState
	status  sandbox.Status
	stopped stopReason
	err     error // the runner could not start or wait for the process
}

// AttemptLogPaths returns where attempt number attempt (1-based) of job
// jobID writes its stdout and stderr under stateDir: see
// [StateDir.AttemptLogs]. The attempt's record names them only once it
// ended; `paddock logs -f` reads them while it runs.
func AttemptLogPaths(stateDir, jobID string, attempt int) (stdout, stderr string) {
	return StateDir{Root: stateDir}.AttemptLogs(jobID, attempt)
}

// spawn starts argv in its own process group, with the sandbox status pipe
// and the pinned roots when confined, and waits for it, stopping it on
// timeout, cancel or ctx.
func (e *Executor) spawn(ctx context.Context, p spawnParams) spawnResult {
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Dir = p.cwd
	cmd.Env = p.env
	cmd.Stdin = nil // os/exec opens the host's /dev/null
	if p.devNodes.dir != "" {
		null, err := os.Open(sandbox.DevNull(p.devNodes.dir))
		if err != nil {
			return spawnResult{err: fmt.Errorf("stdin: %w", err)}
		}
		defer null.Close()
		cmd.Stdin = null
	}
	cmd.Stdout = p.stdout
	cmd.Stderr = p.stderr
	// Pdeathsig: if the worker dies (kill -9), bwrap dies with it, and with
	// bwrap the job's pid namespace; the job is then recovered from its lease.
	// PidFD: the wait below sleeps in the netpoller on the process's pidfd
	// instead of in a blocking waitid, which keeps a thread in a system
	// call for the job's whole run and the Go scheduler's monitor (sysmon)
	// polling it: about 0.7 ms of the worker's CPU per job, measured.
	pidfd := -1
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, PidFD: &pidfd}
	// A background process that keeps stdout open must not hold the
	// attempt forever once the job itself has exited.
	cmd.WaitDelay = 2 * time.Second

	var statusR, statusW *os.File
	if p.confined {
		var err error
		statusR, statusW, err = os.Pipe()
		if err != nil {
			return spawnResult{err: fmt.Errorf("status pipe: %w", err)}
		}
		defer statusR.Close()
		in := p.inherited
		in.Status = statusW
		cmd.ExtraFiles = in.ExtraFiles()
	}
	reaped := func() {} // called once cmd has been waited for
	start := cmd.Start
	if p.devNodes.ns {
		start = func() (err error) {
			reaped, err = sandbox.StartWithDeviceNodes(p.devNodes.dir, p.devNodes.tree, cmd)
			return err
		}
	}
	if err := start(); err != nil {
		if statusW != nil {
			statusW.Close()
		}
		p.ended() // nothing runs
		return spawnResult{err: fmt.Errorf("start %s: %w", p.argv[0], err)}
	}
	if statusW != nil {
		statusW.Close()
	}
	// The status stream is read as it comes. Its child-pid record names
	// the sandbox's init: the job's processes are all gone once it has
	// exited (sandbox.InitWatch), usually before bwrap itself has, and
	// the job's slot can free then (ExecParams.Ended).
	statusCh := make(chan sandbox.Status, 1)
	var (
		watchMu  sync.Mutex
		watch    *sandbox.InitWatch
		finished bool           // spawn is returning: no new watch
		watchers sync.WaitGroup // the watch's goroutine, done before spawn returns
	)
	if statusR != nil {
		go func() {
			st, err := sandbox.WatchStatus(io.LimitReader(statusR, 1<<20), func(s sandbox.Status) {
				if s.Ran {
					p.exiting()
				}
				watchMu.Lock()
				defer watchMu.Unlock()
				if finished || watch != nil || s.ChildPID == 0 {
					return
				}
				watchers.Add(1)
				w, err := sandbox.WatchInit(s, func(exited bool) {
					defer watchers.Done()
					if exited && ctx.Err() == nil { // a hard stop came first: not ended
						// The sandbox's init is gone, so the command has
						// exited: Exiting comes first even when this
						// goroutine wins the race with the status reader.
						p.exiting()
						p.ended()
					}
				})
				if err != nil {
					watchers.Done()
					return // told by bwrap's exit instead
				}
				watch = w
			})
			if err != nil {
				st = sandbox.Status{} // a malformed stream proves nothing
			}
			statusCh <- st
		}()
	}

	waitErr := make(chan error, 1)
	go func() {
		_ = sandbox.AwaitPidfd(pidfd) // on error, Wait blocks instead
		err := cmd.Wait()
		reaped()
		waitErr <- err
	}()

	var timer <-chan time.Time
	if p.timeout > 0 {
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		timer = t.C
	}
	res := spawnResult{}
	var err error
	select {
	case err = <-waitErr:
	case <-timer:
		res.stopped = stopTimeout
	case <-p.cancel:
		res.stopped = stopCancel
	case <-ctx.Done():
		res.stopped = stopHard
	case <-p.fenced:
		res.stopped = stopFence
	}
	if res.stopped != stopNone {
		grace := e.Config.KillGrace.Duration
		if res.stopped == stopHard || res.stopped == stopFence {
			grace = 0
		}
		err = stopGroup(cmd.Process.Pid, grace, waitErr)
	}
	// Whatever is left of the job's process group goes now (stragglers of
	// a danger_full_access job; a confined job's processes died with its
	// pid namespace). The group outlives its reaped leader only while a
	// member lives, so this cannot hit an unrelated process.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	res.state = cmd.ProcessState
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		res.err = fmt.Errorf("wait: %w", err)
	}
	if statusR != nil {
		select {
		case res.status = <-statusCh:
		case <-time.After(2 * time.Second):
			// Something in the sandbox kept the status fd open; without
			// a record the classifier reports a runner failure unless the
			// exit status says otherwise.
		}
	}
	// bwrap is gone, and its group was killed: the sandbox's init dies
	// with bwrap (--die-with-parent), and the job is over once it has.
	watchMu.Lock()
	w := watch
	finished = true
	watchMu.Unlock()
	if w != nil {
		select {
		case <-w.Done():
		case <-time.After(2 * time.Second):
			// Not seen in practice; the attempt ends all the same.
		}
		w.Stop()
	}
	watchers.Wait() // Ended is never called after spawn returns
	if res.stopped != stopHard {
		p.ended()
	}
	return res
}

// stopGroup sends SIGTERM to the job's process group and every process
// below it, waits up to grace for the job to exit, then sends SIGKILL.
// It returns the job's wait error.
func stopGroup(pid int, grace time.Duration, waitErr <-chan error) error {
	if grace > 0 {
		killTree(pid, syscall.SIGTERM)
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		select {
		case err := <-waitErr:
			return err
		case <-time.After(grace):
		}
	}
	killTree(pid, syscall.SIGKILL)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return <-waitErr
}

// killTree sends sig to every live descendant of pid (found through
// /proc/*/stat) and to pid itself: deepest first, except for SIGKILL,
// which goes to each parent before its children, so that no process of
// the job ever sees a child die and runs on (a shell's next command
// after its sleep was killed). The job runs in its own process group,
// but bwrap's --new-session and the job's own setsid calls move
// processes out of it; the parent links still tie them to pid.
func killTree(pid int, sig syscall.Signal) {
	children := map[int][]int{}
	ents, err := os.ReadDir("/proc")
	if err == nil {
		for _, ent := range ents {
			p, err := strconv.Atoi(ent.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
			if err != nil {
				continue
			}
			// Fields after the last ')' : state ppid ...
			s := string(b)
			i := strings.LastIndexByte(s, ')')
			if i < 0 {
				continue
			}
			f := strings.Fields(s[i+1:])
			if len(f) < 2 {
				continue
			}
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], p)
		}
	}
	var walk func(int)
	seen := map[int]bool{}
	walk = func(p int) {
		if seen[p] {
			return
		}
		seen[p] = true
		if sig == syscall.SIGKILL {
			_ = syscall.Kill(p, sig)
		}
		for _, c := range children[p] {
			walk(c)
		}
		if sig != syscall.SIGKILL {
			_ = syscall.Kill(p, sig)
		}
	}
	walk(pid)
}

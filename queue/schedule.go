package queue

import (
	"cmp"
	"fmt"
	"maps"
	"time"

	"paddock/jobspec"
)

// Scheduler constants.
const (
	// ScheduleOnTime is how late a tick may be handled and still count as
	// on time rather than missed (workers look at least every second).
	ScheduleOnTime = time.Minute
	// ScheduleLabel is the label every instance carries, set to the
	// schedule's name: `paddock ls --label schedule=NAME` lists them.
	ScheduleLabel = "schedule"
	// ScheduleTickLabel is the label set to the instance's tick (RFC 3339, UTC).
	ScheduleTickLabel = "schedule_tick"
)

// Decisions recorded for schedule ticks (ScheduleDecision.Decision).
const (
	// DecisionFired: the tick got an instance on time (or, for a deferred
	// tick, once the previous instance finished).
	DecisionFired = "fired"
	// DecisionCaughtUp: the one catch-up instance after missed ticks
	// (missed = "run_once", within missed_grace).
	DecisionCaughtUp = "caught_up"
	// DecisionMissed: ticks that passed with no worker running got no
	// instance. One record covers a whole outage (Count ticks from Tick).
	DecisionMissed = "missed"
	// DecisionSkippedOverlap: the previous instance was still queued or
	// running (overlap = "skip", or "queue" with a tick already waiting).
	DecisionSkippedOverlap = "skipped_overlap"
	// DecisionDeferred: overlap = "queue"; the tick waits for the running
	// instance. It becomes DecisionFired when its instance is enqueued.
	DecisionDeferred = "deferred"
	// DecisionManual: ScheduleRun enqueued an instance now, outside the
	// schedule's ticks (`paddock schedules run`).
	DecisionManual = "manual"
)

// Schedule is a stored schedule: a job spec with a cron expression. The
// scheduler (Store.ScheduleTick) enqueues one instance per tick, an
// ordinary job named "<name>-<tick as YYYYMMDDTHHMMSSZ, UTC>" with the
// labels ScheduleLabel and ScheduleTickLabel.
type Schedule struct {
	Name       string
	Spec       jobspec.Spec // as submitted; Spec.Schedule is the expression
	Source     string       // the submitted file's text
	SourcePath string       // "" for stdin or Go callers
	Paused     bool
	CreatedAt  time.Time
	UpdatedAt  time.Time // last upsert, pause or resume
	// NextRun is the next tick the scheduler will decide; zero while paused.
	NextRun time.Time
	// LastRun is the tick of the newest instance; zero when none yet.
	LastRun time.Time
	// LastJobID is the newest instance's id; "" when none yet.
	LastJobID string
	// LastJobState is that job's state; "" when none or pruned.
	LastJobState JobState
	// LastDecision is the newest recorded decision; nil when none.
	LastDecision *ScheduleDecision
}

// Location returns the schedule's time zone (UTC when Spec.Timezone is
// empty or, which validation prevents, unknown).
func (s *Schedule) Location() *time.Location { return s.Spec.Location() }

// ScheduleDecision is one recorded scheduler decision about one tick.
type ScheduleDecision struct {
	Schedule string
	Tick     time.Time // the tick decided (for DecisionMissed, the first missed one)
	Decision string    // one of the Decision* constants
	Count    int       // ticks covered: 1, or how many a DecisionMissed record covers (capped at 10,000)
	JobID    string    // the instance, for fired and caught_up; "" otherwise
	At       time.Time // when the decision was made (store clock)
	WorkerID string    // who made it
	Detail   string    // human text
}

// ScheduleUpsertParams is a batch of scheduled specs to create or update.
type ScheduleUpsertParams struct {
	Specs      []jobspec.Spec // every one with Schedule and Name set
	Source     string
	SourcePath string
	SourceName string // as JobEnqueueParams.SourceName
}

// SourceLabel is how messages name the batch's file: SourceName, else
// SourcePath, else [jobspec.StdinName].
func (p *ScheduleUpsertParams) SourceLabel() string {
	return cmp.Or(p.SourceName, p.SourcePath, jobspec.StdinName)
}

// ScheduleListParams filters ScheduleList. The zero value lists all.
type ScheduleListParams struct {
	NameGlob string // shell glob on the name; "" = any
}

// ScheduleTickParams identifies the scheduler.
type ScheduleTickParams struct {
	WorkerID string // recorded with each decision; required
}

// ScheduleTickResult is what one ScheduleTick did.
type ScheduleTickResult struct {
	Decisions []ScheduleDecision // made in this call, in order
	Jobs      []Job              // instances enqueued, in order
	// NextDue is the earliest NextRun of the schedules that are not
	// paused: the time to call ScheduleTick again. Zero when there are none.
	NextDue time.Time
}

// ScheduleRunParams asks for one instance now ([Store.ScheduleRun]).
type ScheduleRunParams struct {
	Name     string // the schedule; required
	WorkerID string // recorded with the decision, e.g. "cli"; "" is recorded as "manual"
}

// ScheduleRunResult is what ScheduleRun did.
type ScheduleRunResult struct {
	Decision ScheduleDecision // DecisionManual, or DecisionSkippedOverlap
	Job      *Job             // the instance; nil when skipped
}

// PlanManualRun decides ScheduleRun at now for a schedule whose spec is
// sched and whose newest instance busy is still queued or running (""
// when none): an instance (DecisionManual) for the tick now truncated to
// the second, unless overlap forbids it (skip or queue with busy set:
// DecisionSkippedOverlap, recorded at now exactly, so that refusals in
// the same second as the run they refuse are kept too).
func PlanManualRun(sched jobspec.Spec, busy string, now time.Time) PlannedDecision {
	overlap := cmp.Or(sched.Overlap, jobspec.OverlapSkip)
	tick := now.Truncate(time.Second)
	if busy != "" && overlap != jobspec.OverlapAllow {
		return PlannedDecision{Tick: now, Decision: DecisionSkippedOverlap, Count: 1,
			Detail: "manual run refused: instance " + busy + " still queued or running (overlap = \"" + overlap + "\")"}
	}
	return PlannedDecision{Tick: tick, Decision: DecisionManual, Count: 1, Instance: true, Detail: "run now by request"}
}

// ScheduleDecisionListParams filters ScheduleDecisionList.
type ScheduleDecisionListParams struct {
	Schedule string // "" = every schedule
	Limit    int    // newest first, at most this many; <= 0 = 100
}

// InstanceSpec turns a schedule's spec into the spec of its instance for
// tick: an ordinary job, not claimed before tick + [TickJitter] when the
// schedule has a jitter (RunAt), with the schedule labels and two more environment
// variables, PADDOCK_SCHEDULE and PADDOCK_SCHEDULE_TICK (RFC 3339 in the
// schedule's zone), unless the spec sets them.
func InstanceSpec(sched jobspec.Spec, tick time.Time) jobspec.Spec {
	s := sched
	s.Name = jobspec.InstanceName(sched.Name, tick)
	s.Schedule, s.Timezone, s.Overlap, s.Missed, s.MissedGrace, s.After = "", "", "", "", 0, nil
	s.Jitter, s.Delay, s.RunAt = 0, 0, time.Time{}
	if sched.Jitter > 0 {
		s.RunAt = tick.Add(TickJitter(sched.Name, tick, sched.Jitter)).UTC()
	}
	s.Labels = maps.Clone(sched.Labels)
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[ScheduleLabel] = sched.Name
	s.Labels[ScheduleTickLabel] = tick.UTC().Format(time.RFC3339)
	s.Env = maps.Clone(sched.Env)
	if s.Env == nil {
		s.Env = map[string]string{}
	}
	if _, ok := s.Env["PADDOCK_SCHEDULE"]; !ok {
		s.Env["PADDOCK_SCHEDULE"] = sched.Name
	}
	if _, ok := s.Env["PADDOCK_SCHEDULE_TICK"]; !ok {
		s.Env["PADDOCK_SCHEDULE_TICK"] = tick.In(sched.Location()).Format(time.RFC3339)
	}
	return s
}

// TickState is one schedule as the scheduler sees it.
type TickState struct {
	Spec     jobspec.Spec
	Cron     *jobspec.Cron
	Next     time.Time // first tick not decided yet
	Deferred time.Time // overlap=queue tick waiting; zero = none
	Busy     string    // id of the newest instance when it is queued or running; "" otherwise
}

// PlannedDecision is a decision before it is stored.
type PlannedDecision struct {
	Tick     time.Time
	Decision string // one of the Decision* constants
	Count    int    // ScheduleDecision.Count
	Detail   string
	Instance bool // enqueue an instance for Tick
}

// maxCountedTicks caps how many missed ticks are counted one by one.
const maxCountedTicks = 10_000

// PlanTick decides, purely, what one schedule does at now. It returns the
// decisions in order, the new cursor and the new deferred tick.
func PlanTick(st TickState, now time.Time) ([]PlannedDecision, time.Time, time.Time) {
	var out []PlannedDecision
	loc := st.Spec.Location()
	busy := st.Busy
	deferred := st.Deferred
	if !deferred.IsZero() && busy == "" {
		out = append(out, PlannedDecision{Tick: deferred, Decision: DecisionFired, Count: 1, Instance: true,
			Detail: "waited for the previous instance, which has finished"})
		deferred = time.Time{}
		busy = "the instance just enqueued"
	}
	if st.Next.After(now) {
		return out, st.Next, deferred
	}
	newest, count, capped := lastTickAtOrBefore(st.Cron, loc, st.Next, now)
	next := st.Cron.Next(now, loc)
	if count > 1 {
		n := fmt.Sprint(count - 1)
		if capped {
			n = "at least " + n
		}
		out = append(out, PlannedDecision{Tick: st.Next, Decision: DecisionMissed, Count: count - 1,
			Detail: fmt.Sprintf("%s tick(s) from %s passed with no worker running; no instance for them", n, st.Next.In(loc).Format(time.RFC3339))})
	}
	late := now.Sub(newest)
	grace := st.Spec.MissedGrace
	if grace <= 0 {
		grace = jobspec.MissedGraceDefault
	}
	missed := st.Spec.Missed
	if missed == "" {
		missed = jobspec.MissedRunOnce
	}
	d := PlannedDecision{Tick: newest, Count: 1}
	switch {
	case late <= ScheduleOnTime && (count == 1 || missed == jobspec.MissedSkip):
		d.Decision, d.Detail = DecisionFired, "on time"
	case missed == jobspec.MissedRunOnce && late <= grace:
		d.Decision = DecisionCaughtUp
		d.Detail = fmt.Sprintf("catch-up run for missed ticks, %s late (missed_grace %s)", late.Round(time.Second), grace)
	case missed == jobspec.MissedRunOnce:
		d.Decision = DecisionMissed
		d.Detail = fmt.Sprintf("%s late, beyond missed_grace %s: no catch-up run", late.Round(time.Second), grace)
	default:
		d.Decision = DecisionMissed
		d.Detail = fmt.Sprintf("%s late and missed = \"skip\": no instance", late.Round(time.Second))
	}
	if d.Decision == DecisionMissed {
		if count > 1 { // fold into the outage record
			out[len(out)-1].Count = count
			out[len(out)-1].Detail += "; the newest, " + newest.In(loc).Format(time.RFC3339) + ", " + d.Detail
			return out, next, deferred
		}
		return append(out, d), next, deferred
	}
	overlap := st.Spec.Overlap
	if overlap == "" {
		overlap = jobspec.OverlapSkip
	}
	switch {
	case busy == "" || overlap == jobspec.OverlapAllow:
		d.Instance = true
	case overlap == jobspec.OverlapQueue && deferred.IsZero():
		deferred = newest
		d.Decision, d.Detail = DecisionDeferred, "waits for instance "+busy+" to finish ("+d.Detail+")"
	case overlap == jobspec.OverlapQueue:
		d.Decision, d.Detail = DecisionSkippedOverlap, "instance "+busy+" still queued or running and a tick already waits for it"
	default:
		d.Decision, d.Detail = DecisionSkippedOverlap, "instance "+busy+" still queued or running"
	}
	return append(out, d), next, deferred
}

// lastTickAtOrBefore returns the newest tick in [first, now] (first is a
// tick at or before now) and how many ticks that range holds; capped when
// there were more than maxCountedTicks (the count is then a lower bound).
func lastTickAtOrBefore(c *jobspec.Cron, loc *time.Location, first, now time.Time) (time.Time, int, bool) {
	if c.Every() > 0 {
		d := int64(c.Every())
		u := now.UnixNano()
		k := u / d
		if u < 0 && u%d != 0 {
			k--
		}
		newest := time.Unix(0, k*d)
		if newest.Before(first) {
			return first, 1, false
		}
		n := int64(newest.Sub(first)/c.Every()) + 1
		if n > maxCountedTicks {
			return newest, maxCountedTicks, true
		}
		return newest, int(n), false
	}
	t, n := first, 1
	for n < maxCountedTicks {
		nx := c.Next(t, loc)
		if nx.IsZero() || nx.After(now) {
			return t, n, false
		}
		t, n = nx, n+1
	}
	// A long outage: find the newest tick from a window before now.
	for _, w := range []time.Duration{time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 10 * 367 * 24 * time.Hour} {
		from := now.Add(-w)
		if from.Before(t) {
			from = t
		}
		x := c.Next(from, loc)
		if x.IsZero() || x.After(now) {
			if from.Equal(t) {
				return t, n, true
			}
			continue
		}
		for {
			nx := c.Next(x, loc)
			if nx.IsZero() || nx.After(now) {
				return x, n, true
			}
			x = nx
		}
	}
	return t, n, true
}

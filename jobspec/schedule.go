package jobspec

import (
	"fmt"
	"slices"
	"time"
)

// Schedule policies and defaults: the job-file keys overlap, missed and
// missed_grace, which apply to schedules only. The store decides ticks
// with them (see the queue package, "Schedules").
const (
	// OverlapSkip (the default): a tick that comes while the schedule's
	// newest instance is still queued or running is skipped and recorded.
	OverlapSkip = "skip"
	// OverlapQueue: such a tick waits and its instance is enqueued once
	// the running one has finished. At most one tick waits; later ones are
	// skipped while it does.
	OverlapQueue = "queue"
	// OverlapAllow: every tick gets an instance, whatever is running.
	OverlapAllow = "allow"

	// MissedRunOnce (the default): after ticks were missed (no worker
	// was running), one catch-up instance runs for the newest missed tick
	// if it is at most MissedGrace old; the others are recorded as missed.
	MissedRunOnce = "run_once"
	// MissedSkip: missed ticks get no instance; they are recorded.
	MissedSkip = "skip"

	// MissedGraceDefault is Spec.MissedGrace's default.
	MissedGraceDefault = time.Hour
	// MaxScheduleNameLen is the longest schedule name, in bytes: instance
	// names add "-YYYYMMDDTHHMMSSZ" ([InstanceName]) and must fit in
	// MaxNameLen.
	MaxScheduleNameLen = MaxNameLen - len("-"+instanceTickLayout)
)

// OverlapPolicies returns the values of the overlap key, the default first.
func OverlapPolicies() []string { return []string{OverlapSkip, OverlapQueue, OverlapAllow} }

// MissedPolicies returns the values of the missed key, the default first.
func MissedPolicies() []string { return []string{MissedRunOnce, MissedSkip} }

// instanceTickLayout is the tick's part of an instance name, in UTC.
const instanceTickLayout = "20060102T150405Z"

// InstanceName returns the name of schedule's instance for tick:
// "<schedule>-<tick as YYYYMMDDTHHMMSSZ, UTC>".
func InstanceName(schedule string, tick time.Time) string {
	return schedule + "-" + tick.UTC().Format(instanceTickLayout)
}

// Location returns the spec's time zone: UTC when Timezone is empty or
// (which validation prevents) unknown.
func (s *Spec) Location() *time.Location {
	if s.Timezone == "" {
		return time.UTC
	}
	loc, err := time.LoadLocation(s.Timezone)
	if err != nil {
		return time.UTC
	}
	return loc
}

type keyMsg struct{ key, msg string }

// scheduleProblems checks the schedule rules of one spec: a schedule needs
// a short enough name, a valid expression, and no after; policies only go
// with a schedule (stray: the first of them the job set itself, or "").
func scheduleProblems(s *Spec, stray string) []keyMsg {
	var out []keyMsg
	if s.Schedule == "" {
		if stray != "" {
			out = append(out, keyMsg{stray, "overlap, missed, missed_grace and jitter apply to schedules only: set schedule or remove " + stray})
		}
		return out
	}
	if _, err := ParseCron(s.Schedule); err != nil {
		out = append(out, keyMsg{"schedule", err.Error()})
	}
	switch {
	case s.Name == "":
		out = append(out, keyMsg{"name", "missing: a schedule needs a name (its instances are named NAME-<tick>, and resubmitting the file updates the schedule of that name)"})
	case len(s.Name) > MaxScheduleNameLen:
		out = append(out, keyMsg{"name", fmt.Sprintf("schedule name longer than %d bytes (instance names add a 17-byte tick)", MaxScheduleNameLen)})
	}
	if len(s.After) > 0 {
		out = append(out, keyMsg{"after", "a schedule cannot wait for other jobs: each instance starts at its tick"})
	}
	if !s.RunAt.IsZero() {
		out = append(out, keyMsg{"run_at", "a schedule's instances start at their ticks: run_at applies to one-off jobs only (use jitter to spread ticks)"})
	}
	if s.Delay != 0 {
		out = append(out, keyMsg{"delay", "a schedule's instances start at their ticks: delay applies to one-off jobs only (use jitter to spread ticks)"})
	}
	if s.Overlap != "" && !slices.Contains(OverlapPolicies(), s.Overlap) {
		out = append(out, keyMsg{"overlap", fmt.Sprintf("unknown policy %q: expected skip, queue or allow", s.Overlap)})
	}
	if s.Missed != "" && !slices.Contains(MissedPolicies(), s.Missed) {
		out = append(out, keyMsg{"missed", fmt.Sprintf("unknown policy %q: expected run_once or skip", s.Missed)})
	}
	if s.MissedGrace < 0 {
		out = append(out, keyMsg{"missed_grace", "negative duration: expected a positive one"})
	}
	return out
}

// schedulePolicyKeys are the keys that apply to schedules only, in the
// order a problem names the first one a job set.
var schedulePolicyKeys = []string{"overlap", "missed", "missed_grace", "jitter"}

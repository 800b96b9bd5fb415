package queue

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"time"

	"paddock/jobspec"
)

// Group is a named set of jobs (those whose Spec.Group names it). The
// queue stores its limit and pause, so every worker and host sharing the
// queue honours them.
type Group struct {
	Name string
	// Limit is the most of the group's jobs running at once: 1 is mutual
	// exclusion; 0 = unlimited (no limit set).
	Limit int
	// Paused: no job of the group is claimed while set (QueuePause with
	// a Group); running ones go on.
	Paused bool
	// Running is how many of the group's jobs run now.
	Running int
	// Queued is how many of the group's jobs are queued (ready or not).
	Queued int
}

// QueueState is the queue-wide switches ([Store.QueueGet]).
type QueueState struct {
	// Paused: nothing is claimed (QueuePause without a Group); running
	// jobs go on.
	Paused bool
	// PausedAt is when it was paused; zero unless Paused.
	PausedAt time.Time
}

// GroupLimitSetParams sets or removes a group's limit ([Store.GroupLimitSet]).
type GroupLimitSetParams struct {
	Name string // required: a group name (the rules of a job name)
	// Limit is the most jobs of the group running at once, 1 to
	// MaxGroupLimit; 0 removes the limit (the group is unlimited).
	Limit int
}

// GroupListParams filters GroupList. The zero value lists every group.
type GroupListParams struct {
	Names []string // only these groups (each one listed, even with nothing set and no job); empty = every group
}

// QueuePauseParams names what QueuePause and QueueResume act on.
type QueuePauseParams struct {
	Group string // "" = the whole queue; else one group (which need not have jobs yet)
}

// MaxGroupLimit is the largest group limit.
const MaxGroupLimit = 1_000_000

// ErrInvalidGroup marks a bad group name or limit given to a groups or
// pause command (errors.Is(err, ErrInvalid) holds too: the same kind of
// bad input, about a group rather than a job).
var ErrInvalidGroup error = invalidGroup{}

type invalidGroup struct{}

func (invalidGroup) Error() string { return "queue: invalid group" }
func (invalidGroup) Unwrap() error { return ErrInvalid }

// Check refuses a GroupLimitSet: a bad group name or a limit out of range.
func (p *GroupLimitSetParams) Check() error {
	if p == nil {
		return errors.New("queue: group limit: nil params")
	}
	if err := CheckGroupName(p.Name); err != nil {
		return err
	}
	if p.Limit < 0 || p.Limit > MaxGroupLimit {
		return fmt.Errorf("%w: group %q: limit %d out of range: expected 1 to %d, or 0 to remove it", ErrInvalidGroup, p.Name, p.Limit, MaxGroupLimit)
	}
	return nil
}

// Check refuses a QueuePause or QueueResume naming a bad group.
func (p *QueuePauseParams) Check() error {
	if p == nil || p.Group == "" {
		return nil
	}
	return CheckGroupName(p.Group)
}

// CheckGroupName refuses what cannot be a group name (a job file's
// group key follows the same rules as a job name, see jobspec.Validate).
func CheckGroupName(name string) error {
	err := jobspec.Validate("", []jobspec.Spec{{Command: []string{"x"}, Group: name}})
	if name == "" || err != nil {
		var ve *jobspec.ValidationError
		msg := "empty group name"
		if errors.As(err, &ve) && len(ve.Errors) > 0 {
			msg = ve.Errors[0].Message
		}
		return fmt.Errorf("%w: group %q: %s", ErrInvalidGroup, name, msg)
	}
	return nil
}

// ClaimGate is the group and pause rule of one claim: a store builds it
// inside the claim's transaction from the queue's state and the groups
// that have a limit or a pause (with their Running counts, read in that
// transaction), then:
//
//  1. claims nothing when Paused();
//  2. when Limited() is false, takes the first ready jobs in claim order
//     outside every group that has a limit or a pause (those of the
//     other groups are all in Blocked), in one statement;
//  3. otherwise reads, by seeks in claim order, the first jobs wanted
//     outside those groups and, for each group of Rooms, its first jobs
//     up to its room, and takes the rows Choose returns.
//
// A claim restricted to ids may instead select in claim order the jobs
// whose group is not in Blocked, admit each through Take, and select
// again while a group filled up.
//
// The store must make these steps atomic with respect to other claims
// (SQLite: the claim's IMMEDIATE transaction; PostgreSQL: lock the rows
// of the groups whose jobs it chose, FOR UPDATE, count their running
// jobs again after the lock and choose again), so that no two claimers
// both take a group's last slot. The store keeps the jobs of groups
// with a limit or a pause apart from the others (an index of its own),
// so that no step reads the jobs of a blocked group. A ClaimGate is not
// safe for concurrent use.
type ClaimGate struct {
	paused bool
	room   map[string]int // limited groups: slots left
	block  map[string]bool
}

// NewClaimGate returns the gate for q and groups (every group with a
// limit or paused; Running must be filled, Queued is ignored).
func NewClaimGate(q QueueState, groups []Group) *ClaimGate {
	g := &ClaimGate{paused: q.Paused, room: map[string]int{}, block: map[string]bool{}}
	for _, gr := range groups {
		switch {
		case gr.Paused:
			g.block[gr.Name] = true
		case gr.Limit > 0 && gr.Running >= gr.Limit:
			g.block[gr.Name] = true
		case gr.Limit > 0:
			g.room[gr.Name] = gr.Limit - gr.Running
		}
	}
	return g
}

// Limited reports whether Take can refuse a job that Blocked does not
// exclude (a group with a limit has slots left). When false, a store may
// take every job its selection returns without calling Take, in one
// statement.
func (g *ClaimGate) Limited() bool { return len(g.room) > 0 }

// Paused reports whether the whole queue is paused: the claim takes
// nothing.
func (g *ClaimGate) Paused() bool { return g.paused }

// Blocked returns the groups the claim must not take jobs from (paused
// or full), sorted; never nil (an empty list encodes as a JSON array).
func (g *ClaimGate) Blocked() []string {
	return append(make([]string, 0, len(g.block)), slices.Sorted(maps.Keys(g.block))...)
}

// Rooms returns each limited group that still has slots, with how many
// (never nil). A claim seeks at most that many jobs of each through the
// index of gated jobs; the groups of Blocked are not in it.
func (g *ClaimGate) Rooms() map[string]int { return maps.Clone(g.room) }

// ClaimCandidate is a job a claim may take: its row, its group ("" = no
// group) and its place in claim order (Priority descending, then
// Created, then Row).
type ClaimCandidate struct {
	Row      int64
	Group    string
	Priority int
	Created  time.Time
}

// Choose returns the rows of the first want candidates, in claim order,
// that Take admits (counting each against its group). Candidates are the
// best jobs outside the limited groups and, for each group of Rooms, its
// best jobs up to its room: the result is what a walk of every ready job
// in claim order would take, without walking the jobs of blocked groups.
func (g *ClaimGate) Choose(c []ClaimCandidate, want int) []int64 {
	slices.SortFunc(c, func(a, b ClaimCandidate) int {
		if a.Priority != b.Priority {
			return cmp.Compare(b.Priority, a.Priority)
		}
		if d := a.Created.Compare(b.Created); d != 0 {
			return d
		}
		return cmp.Compare(a.Row, b.Row)
	})
	var out []int64
	for _, x := range c {
		if len(out) >= want {
			break
		}
		if g.Take(x.Group) {
			out = append(out, x.Row)
		}
	}
	return out
}

// Take admits one more job of group ("" = no group: always admitted) and
// counts it against the group's limit; false when the group is full or
// paused (it is then in Blocked).
func (g *ClaimGate) Take(group string) bool {
	if group == "" {
		return true
	}
	if g.block[group] {
		return false
	}
	n, limited := g.room[group]
	if !limited {
		return true
	}
	n--
	g.room[group] = n
	if n <= 0 {
		g.block[group] = true
	}
	return true
}

// DueAt is when a job enqueued at now with spec sp may first be claimed
// (Job.NotBefore): the later of sp.RunAt and now + sp.Delay; zero when
// neither is set (at once).
func DueAt(sp jobspec.Spec, now time.Time) time.Time {
	var due time.Time
	if sp.Delay > 0 {
		due = now.Add(sp.Delay)
	}
	if sp.RunAt.After(due) {
		due = sp.RunAt
	}
	return due
}

// RetryDueAt is Job.NotBefore of a job JobRetry queues again: its spec's
// run_at, which a job canceled before it was due keeps (a time in the
// past is due at once); a delay, counted from the first enqueue, is not
// applied again. Zero when the spec has no run_at.
func RetryDueAt(sp jobspec.Spec) time.Time { return sp.RunAt }

// TickJitter is how long after tick the instance of schedule name with
// the given jitter may start: a fraction of jitter taken from an FNV-1a
// hash of the name and the tick's Unix time, so every worker (and a
// repeated decision) computes the same delay. 0 when jitter <= 0;
// otherwise in [0, jitter), whole milliseconds.
func TickJitter(name string, tick time.Time, jitter time.Duration) time.Duration {
	ms := jitter.Milliseconds()
	if ms <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(tick.UnixNano(), 10)))
	return time.Duration(h.Sum64()%uint64(ms)) * time.Millisecond
}

// Waiting says why queued job j is not claimed yet at now, given the
// queue's state and its groups by name (as GroupList returns them): the
// queue or the job's group is paused, the group is full ("group repo-x
// full (1/1)"), dependencies are pending, or its due time has not come.
// "" when j is claimable, or not queued.
func Waiting(j Job, q QueueState, groups map[string]Group, now time.Time) string {
	if j.State != StateQueued {
		return ""
	}
	switch {
	case j.DepsPending > 0:
		return fmt.Sprintf("%d dependenc%s pending", j.DepsPending, plural(j.DepsPending, "y", "ies"))
	case j.NotBefore.After(now):
		return "due " + j.NotBefore.UTC().Format(time.RFC3339)
	case q.Paused:
		return "queue paused"
	}
	if gr, ok := groups[j.Spec.Group]; ok && j.Spec.Group != "" {
		switch {
		case gr.Paused:
			return "group " + gr.Name + " paused"
		case gr.Limit > 0 && gr.Running >= gr.Limit:
			return fmt.Sprintf("group %s full (%d/%d)", gr.Name, gr.Running, gr.Limit)
		}
	}
	return ""
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

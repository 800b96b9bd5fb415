package queue

import (
	"fmt"
	"slices"
	"strconv"

	"paddock/jobspec"
)

// Enqueue planning: what JobEnqueueAll checks before its transaction and
// how it resolves `after`, the same for every store.

// EnqueueBatch is one batch of a JobEnqueueAll call, checked by
// [PlanEnqueue] and split in two.
type EnqueueBatch struct {
	// Jobs holds the batch's one-off specs (possibly none), in order.
	Jobs *JobEnqueueParams
	// Schedules holds its scheduled specs (possibly none), for
	// ScheduleUpsert in the same transaction.
	Schedules *ScheduleUpsertParams
	// later tells where a later batch of the call defines a job named
	// name ("file:line"), or ""; nil for the last batch.
	later func(name string) string
}

// PlanEnqueue checks the batches of one JobEnqueueAll call, before any
// store work: none empty, each valid (jobspec.Validate), and no name given
// by two batches. It splits each batch into its jobs and its schedules.
// Errors: ErrInvalid for no or an empty batch; a *jobspec.ValidationError
// otherwise.
func PlanEnqueue(ps []*JobEnqueueParams) ([]EnqueueBatch, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("%w: no batch", jobspec.ErrInvalid)
	}
	batches := make([]EnqueueBatch, len(ps))
	for i, p := range ps {
		if p == nil || len(p.Specs) == 0 {
			return nil, fmt.Errorf("%w: empty batch", jobspec.ErrInvalid)
		}
		if verr := jobspec.Validate(p.SourceLabel(), p.Specs); verr != nil {
			return nil, jobspec.PlaceKeys(verr, []byte(p.Source))
		}
		batches[i].Jobs, batches[i].Schedules = splitScheduled(p)
	}
	if verr := crossBatchNames(ps); verr != nil {
		return nil, verr
	}
	if len(ps) > 1 {
		later := laterJobs(ps)
		for i := range batches[:len(ps)-1] {
			batches[i].later = func(name string) string { return later(i, name) }
		}
	}
	return batches, nil
}

// StoredJob is a stored job as enqueue planning sees it: a holder of a
// name, or a dependency.
type StoredJob struct {
	Row   int64 // the driver's key for the job; opaque to planning
	ID    string
	Name  string
	State JobState
}

// EnqueueLookup is what planning asks the store, inside its transaction.
type EnqueueLookup struct {
	// Held returns, among names, those held by a queued or running job,
	// with that job.
	Held func(names []string) (map[string]StoredJob, error)
	// Resolve finds a stored job by id, or the newest with that name;
	// found is false when there is none.
	Resolve func(ref string) (j StoredJob, found bool, err error)
}

// JobDeps are the dependencies of one job of a batch, each once however
// it was named.
type JobDeps struct {
	InBatch []int       // indexes in the batch's Jobs.Specs
	Stored  []StoredJob // jobs already stored (or of an earlier batch)
}

// Pending is how many of d have not succeeded yet (Job.DepsPending).
func (d JobDeps) Pending() int {
	n := len(d.InBatch)
	for _, s := range d.Stored {
		if s.State != StateSucceeded {
			n++
		}
	}
	return n
}

// IDs lists the ids of d (Job.DependsOn); ids are those of the batch's
// jobs, in order.
func (d JobDeps) IDs(ids []string) []string {
	var out []string
	for _, j := range d.InBatch {
		out = append(out, ids[j])
	}
	for _, s := range d.Stored {
		out = append(out, s.ID)
	}
	return out
}

// PlanDeps resolves `after` for every job of b.Jobs: a name of the batch
// first, then a stored job (by id, or the newest with that name). It
// refuses the batch, with a *jobspec.ValidationError placed on the keys'
// lines, when a name is held by a queued or running job (the FieldError's
// Err is ErrNameInUse) or an `after` names nothing (saying so when a
// later batch of the call defines it).
func (b EnqueueBatch) PlanDeps(look EnqueueLookup) ([]JobDeps, error) {
	p := b.Jobs
	var errs []jobspec.FieldError
	fe := func(i int, key, msg string, sentinel error) {
		sp := p.Specs[i]
		label := "job " + strconv.Itoa(i+1)
		if sp.Name != "" {
			label = "job " + strconv.Quote(sp.Name)
		}
		errs = append(errs, jobspec.FieldError{File: p.SourceLabel(), Line: sp.Line, Job: label, Key: key, Message: msg, Err: sentinel})
	}
	batchIdx := make(map[string]int, len(p.Specs))
	var names []string
	for i, sp := range p.Specs {
		if sp.Name != "" {
			batchIdx[sp.Name] = i
			names = append(names, sp.Name)
		}
	}
	if len(names) > 0 {
		held, err := look.Held(names)
		if err != nil {
			return nil, err
		}
		for i, sp := range p.Specs {
			if h, ok := held[sp.Name]; ok && sp.Name != "" {
				fe(i, "name", NameHeld(sp.Name, h.State, h.ID), ErrNameInUse)
			}
		}
	}
	deps := make([]JobDeps, len(p.Specs))
	cache := map[string]*StoredJob{}
	for i, sp := range p.Specs {
		for _, ref := range sp.After {
			if j, ok := batchIdx[ref]; ok {
				if !slices.Contains(deps[i].InBatch, j) {
					deps[i].InBatch = append(deps[i].InBatch, j)
				}
				continue
			}
			e, ok := cache[ref]
			if !ok {
				j, found, err := look.Resolve(ref)
				if err != nil {
					return nil, err
				}
				if found {
					e = &j
				}
				cache[ref] = e
			}
			if e == nil {
				if at := b.laterJob(ref); at != "" {
					fe(i, "after", fmt.Sprintf("%q is a job of %s, which comes later in this submission: list it first (after may name a job of the same file, of an earlier one, or in the queue)", ref, at), nil)
				} else {
					fe(i, "after", fmt.Sprintf("%q names no job in this file and no id or name in the queue", ref), ErrNoSuchDependency)
				}
				continue
			}
			if !slices.ContainsFunc(deps[i].Stored, func(x StoredJob) bool { return x.Row == e.Row }) {
				deps[i].Stored = append(deps[i].Stored, *e)
			}
		}
	}
	if len(errs) > 0 {
		at := jobspec.KeyLines([]byte(p.Source))
		for i := range errs {
			errs[i].Line = at(errs[i].Line, errs[i].Key)
		}
		return nil, &jobspec.ValidationError{Errors: errs} // errors.Is ErrNameInUse when a name is held
	}
	return deps, nil
}

// splitScheduled returns a copy of p holding only its one-off specs, and
// params holding its scheduled specs.
func splitScheduled(p *JobEnqueueParams) (*JobEnqueueParams, *ScheduleUpsertParams) {
	sched := &ScheduleUpsertParams{Source: p.Source, SourcePath: p.SourcePath, SourceName: p.SourceName}
	n := 0
	for i := range p.Specs {
		if p.Specs[i].Schedule != "" {
			n++
		}
	}
	if n == 0 { // the usual batch: no copy of its specs
		return p, sched
	}
	jobs := &JobEnqueueParams{Source: p.Source, SourcePath: p.SourcePath, SourceName: p.SourceName, Specs: make([]jobspec.Spec, 0, len(p.Specs)-n)}
	sched.Specs = make([]jobspec.Spec, 0, n)
	for i := range p.Specs {
		if p.Specs[i].Schedule != "" {
			sched.Specs = append(sched.Specs, p.Specs[i])
		} else {
			jobs.Specs = append(jobs.Specs, p.Specs[i])
		}
	}
	return jobs, sched
}

// crossBatchNames refuses a name that a batch of ps gives to a job or a
// schedule when an earlier batch gives it too, as validateSpecs does
// within one batch: the earlier job would hold it, or the later schedule
// would silently replace the earlier. It lists every such name, in one
// pass.
func crossBatchNames(ps []*JobEnqueueParams) error {
	if len(ps) < 2 {
		return nil
	}
	where := map[string]string{} // name: the first batch giving it, as file:line
	var errs []jobspec.FieldError
	for _, p := range ps {
		var mine []jobspec.FieldError
		for _, sp := range p.Specs {
			if at, ok := where[sp.Name]; ok && sp.Name != "" {
				mine = append(mine, jobspec.FieldError{File: p.SourceLabel(), Line: sp.Line, Job: "job " + strconv.Quote(sp.Name), Key: "name",
					Message: fmt.Sprintf("duplicate name %q: a job or schedule of %s has it too (names are unique within one submission)", sp.Name, at)})
			}
		}
		for _, sp := range p.Specs {
			if _, ok := where[sp.Name]; sp.Name != "" && !ok {
				where[sp.Name] = p.SourceLabel()
				if sp.Line > 0 {
					where[sp.Name] += ":" + strconv.Itoa(sp.Line)
				}
			}
		}
		if len(mine) > 0 {
			at := jobspec.KeyLines([]byte(p.Source))
			for i := range mine {
				mine[i].Line = at(mine[i].Line, mine[i].Key)
			}
			errs = append(errs, mine...)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return &jobspec.ValidationError{Errors: errs}
}

// laterJob is b.later(name), or "" when b.later is nil.
func (b EnqueueBatch) laterJob(name string) string {
	if b.later == nil {
		return ""
	}
	return b.later(name)
}

// laterJobs returns a function telling where a batch of ps after batch i
// defines a job named name ("file:line" of its name key), or "". It
// indexes the names on its first call, and places a batch's keys when
// first asked about it: only a refused submission calls it.
func laterJobs(ps []*JobEnqueueParams) func(i int, name string) string {
	type def struct{ batch, line int }
	var defs map[string]def
	lines := map[int]func(int, string) int{}
	return func(i int, name string) string {
		if defs == nil {
			defs = map[string]def{}
			for b, p := range ps {
				for _, sp := range p.Specs {
					if _, ok := defs[sp.Name]; !ok && sp.Name != "" && sp.Schedule == "" {
						defs[sp.Name] = def{b, sp.Line}
					}
				}
			}
		}
		d, ok := defs[name]
		if !ok || d.batch <= i {
			return ""
		}
		p := ps[d.batch]
		at := p.SourceLabel()
		if d.line > 0 {
			if lines[d.batch] == nil {
				lines[d.batch] = jobspec.KeyLines([]byte(p.Source))
			}
			at += ":" + strconv.Itoa(lines[d.batch](d.line, "name"))
		}
		return at
	}
}

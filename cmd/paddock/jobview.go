package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"paddock/queue"
	"paddock/runner"
)

// jobRow is the summary of a job that ls, wait and submit --wait print.
type jobRow struct {
	MessageType  string `json:"message_type"`
	ID           string `json:"id"`
	Name         string `json:"name"`
	State        string `json:"state"`
	AttemptCount int    `json:"attempt_count"` // show's attempts is the list of them

	ExitCode        *int    `json:"exit_code"`
	Signal          string  `json:"signal,omitempty"`
	Outcome         string  `json:"outcome,omitempty"`
	DurationSeconds float64 `json:"duration_seconds"`
	Reason          string  `json:"reason,omitempty"`

	// Group is the job's group ("" = none).
	Group string `json:"group,omitempty"`
	// Created, Started (the newest attempt's start) and Finished are RFC
	// 3339 UTC times with nanoseconds; Started and Finished are null
	// until they happen.
	Created  string  `json:"created"`
	Started  *string `json:"started"`
	Finished *string `json:"finished"`
	// Due is when a queued job that is not claimable yet becomes so
	// (run_at, delay, retry backoff); absent otherwise.
	Due *string `json:"due,omitempty"`
	// Waiting says why a queued job is not claimed (queue.Waiting):
	// "group repo-x full (1/1)", "queue paused", "due ..."; set by ls.
	Waiting string `json:"waiting,omitempty"`
}

// nanoRFC3339 is RFC 3339 with all nine digits of nanoseconds, so times
// sort as text.
const nanoRFC3339 = "2006-01-02T15:04:05.000000000Z07:00"

// timeText formats t in UTC with nanoRFC3339; nil for the zero time.
func timeText(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(nanoRFC3339)
	return &s
}

// rowOf summarises j from its last attempt.
func rowOf(j queue.Job, messageType string) jobRow {
	r := jobRow{MessageType: messageType, ID: j.ID, Name: j.Name, State: string(j.State), AttemptCount: j.AttemptCount, Reason: j.Reason,
		Group: j.Spec.Group, Created: *timeText(j.CreatedAt), Started: timeText(j.StartedAt), Finished: timeText(j.FinishedAt)}
	if j.State == queue.StateQueued && j.NotBefore.After(time.Now()) {
		r.Due = timeText(j.NotBefore)
	}
	if n := len(j.Attempts); n > 0 {
		last := j.Attempts[n-1]
		r.ExitCode, r.Signal, r.Outcome = last.ExitCode, last.Signal, last.Outcome
		end := last.EndedAt
		if end.IsZero() {
			end = time.Now()
		}
		r.DurationSeconds = end.Sub(last.StartedAt).Seconds()
		if r.Reason == "" {
			r.Reason = last.Reason
		}
	}
	return r
}

func (r jobRow) exitText() string {
	switch {
	case r.Signal != "":
		return r.Signal
	case r.ExitCode != nil:
		return fmt.Sprint(*r.ExitCode)
	}
	return "-"
}

// printJobLine prints one job as a JSON object or a tab-separated line.
func printJobLine(w io.Writer, j queue.Job, asJSON bool, messageType string) {
	r := rowOf(j, messageType)
	if asJSON {
		writeJSON(w, r)
		return
	}
	fmt.Fprintf(w, "%s\t%s\t%s\texit=%s\t%.2fs\t%s\n", r.ID, r.Name, r.State, r.exitText(), r.DurationSeconds, oneLine(r.Reason, 100))
}

// printJobTable prints jobs as an aligned table with a header; waiting
// gives, by job id, why a queued job is not claimed (it replaces the
// reason).
func printJobTable(w io.Writer, jobs []queue.Job, waiting map[string]string) {
	rows := [][]string{{"ID", "NAME", "STATE", "EXIT", "DURATION", "TRIES", "REASON"}}
	for _, j := range jobs {
		r := rowOf(j, "")
		dur := "-"
		if r.AttemptCount > 0 {
			dur = fmt.Sprintf("%.2fs", r.DurationSeconds)
		}
		reason := r.Reason
		if why := waiting[j.ID]; why != "" {
			reason = "waiting: " + why
		}
		rows = append(rows, []string{r.ID, r.Name, r.State, r.exitText(), dur, fmt.Sprint(r.AttemptCount), oneLine(reason, 80)})
	}
	printTable(w, rows)
}

// waitingOf says, by job id, why each queued job of jobs is not claimed
// (queue.Waiting), from two reads of the store whatever the number of
// jobs: the queue's state and its groups. Empty when none is queued.
func waitingOf(ctx context.Context, st queue.Store, jobs []queue.Job) (map[string]string, error) {
	out := map[string]string{}
	var names []string
	for _, j := range jobs {
		if j.State == queue.StateQueued {
			names = append(names, j.Spec.Group)
		}
	}
	if names == nil {
		return out, nil
	}
	q, err := st.QueueGet(ctx)
	if err != nil {
		return nil, err
	}
	gs, err := st.GroupList(ctx, &queue.GroupListParams{})
	if err != nil {
		return nil, err
	}
	groups := make(map[string]queue.Group, len(gs))
	for _, g := range gs {
		groups[g.Name] = g
	}
	now := time.Now()
	for _, j := range jobs {
		if why := queue.Waiting(j, q, groups, now); why != "" {
			out[j.ID] = why
		}
	}
	return out, nil
}

// printTable prints rows (the first is the header) as aligned columns;
// the last column is not padded.
func printTable(w io.Writer, rows [][]string) {
	// Escaped first (termsafe.go), so that the widths are what is shown.
	for _, row := range rows {
		for i, c := range row {
			row[i] = termSafe(c)
		}
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len(c))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i == len(row)-1 {
				b.WriteString(c)
				break
			}
			fmt.Fprintf(&b, "%-*s  ", widths[i], c)
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// oneLine flattens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// eachJob applies op to every ref, prints each changed job (as messageType
// under --json), wakes idle workers, and reports failures one per line
// without stopping at the first. The exit status is 2 when a ref names no
// job, 1 when op refused a job (a wrong state), 0 otherwise.
func eachJob(ctx context.Context, cmd *cobra.Command, gopts *GlobalOptions, refs []string, verb, messageType string,
	op func(a *app, ref string) (queue.Job, error)) error {
	a, err := openQueueApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	// jobError says what went wrong with one ref; under --json a
	// job_error object, the exit's own exit_error coming last.
	jobError := func(ref string, err error) {
		err = fmt.Errorf("%s %s: %w", verb, ref, err)
		if gopts.JSON {
			writeJSON(termSafeWriter{cmd.ErrOrStderr()}, map[string]any{"message_type": "job_error", "ref": ref, "message": err.Error()})
			return
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "paddock: %s\n", termSafe(err.Error()))
	}
	// Every job is looked up first: an unknown one is bad input (exit 2),
	// and bad input changes nothing, not the jobs named before it. A job
	// named twice (by id and by name, say) is done once.
	var ids, names []string
	var before []queue.JobState
	unknown := false
	for _, r := range refs {
		j, err := a.store.JobGet(ctx, r)
		if errors.Is(err, queue.ErrNotFound) {
			jobError(r, err)
			unknown = true
			continue
		}
		if err != nil {
			return err
		}
		if !slices.Contains(ids, j.ID) {
			ids, names, before = append(ids, j.ID), append(names, r), append(before, j.State)
		}
	}
	if unknown {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("nothing was done: %s names a job that does not exist", verb)}
	}
	code := exitOK
	fail := func(i int, err error) {
		jobError(names[i], err)
		if errors.Is(err, queue.ErrNotFound) {
			code = exitUsage
		} else if code == exitOK {
			code = exitFailure
		}
	}
	// A retry refused for a job's state is tried again once another job
	// named has been retried: "retry B A", B waiting on A, retries A and
	// then B, as "retry A B" does. Rounds end when one makes no progress.
	todo := make([]int, len(ids))
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		var again []int
		refused := map[int]error{}
		for _, i := range todo {
			id := ids[i]
			j, err := op(a, id)
			if errors.Is(err, queue.ErrWrongState) && verb == "cancel" && !before[i].Finished() {
				// Ended since it was looked up: canceling a job named
				// before it failed this one, its dependent. Done, unless
				// it succeeded meanwhile.
				if now, gerr := a.store.JobGet(ctx, id); gerr == nil && now.State.Finished() && now.State != queue.StateSucceeded {
					j, err = now, nil
				}
			}
			if errors.Is(err, queue.ErrWrongState) && verb == "retry" {
				again, refused[i] = append(again, i), err
				continue
			}
			if err != nil {
				fail(i, err)
				continue
			}
			printJobLine(cmd.OutOrStdout(), j, gopts.JSON, messageType)
		}
		if len(again) == len(todo) {
			for _, i := range again {
				fail(i, refused[i])
			}
			break
		}
		todo = again
	}
	_ = runner.Wake(a.StateDir)
	if code != exitOK {
		return &exitCodeError{code: code}
	}
	return nil
}

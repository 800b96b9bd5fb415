package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
}

// rowOf summarises j from its last attempt.
func rowOf(j queue.Job, messageType string) jobRow {
	r := jobRow{MessageType: messageType, ID: j.ID, Name: j.Name, State: string(j.State), AttemptCount: j.AttemptCount, Reason: j.Reason}
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

// printJobTable prints jobs as an aligned table with a header.
func printJobTable(w io.Writer, jobs []queue.Job) {
	rows := [][]string{{"ID", "NAME", "STATE", "EXIT", "DURATION", "TRIES", "REASON"}}
	for _, j := range jobs {
		r := rowOf(j, "")
		dur := "-"
		if r.AttemptCount > 0 {
			dur = fmt.Sprintf("%.2fs", r.DurationSeconds)
		}
		rows = append(rows, []string{r.ID, r.Name, r.State, r.exitText(), dur, fmt.Sprint(r.AttemptCount), oneLine(r.Reason, 80)})
	}
	printTable(w, rows)
}

// printTable prints rows (the first is the header) as aligned columns;
// the last column is not padded.
func printTable(w io.Writer, rows [][]string) {
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
	a, err := openApp(ctx, cmd, gopts)
	if err != nil {
		return err
	}
	defer a.Close()
	// Every job is looked up first: an unknown one is bad input (exit 2),
	// and bad input changes nothing, not the jobs named before it.
	ids := make([]string, len(refs))
	unknown := false
	for i, r := range refs {
		j, err := a.store.JobGet(ctx, r)
		if errors.Is(err, queue.ErrNotFound) {
			printError(gopts, fmt.Errorf("%s %s: %w", verb, r, err))
			unknown = true
			continue
		}
		if err != nil {
			return err
		}
		ids[i] = j.ID
	}
	if unknown {
		return &exitCodeError{code: exitUsage, err: fmt.Errorf("nothing was done: %s names a job that does not exist", verb)}
	}
	code := exitOK
	for i, r := range refs {
		j, err := op(a, ids[i])
		if err != nil {
			printError(gopts, fmt.Errorf("%s %s: %w", verb, r, err))
			if errors.Is(err, queue.ErrNotFound) {
				code = exitUsage
			} else if code == exitOK {
				code = exitFailure
			}
			continue
		}
		printJobLine(cmd.OutOrStdout(), j, gopts.JSON, messageType)
	}
	_ = runner.Wake(a.StateDir)
	if code != exitOK {
		return &exitCodeError{code: code}
	}
	return nil
}

package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/cmd/internal/compose"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/sqlite"
	"paddock/runner"
)

// databaseFile is the queue's file name inside a state directory.
var databaseFile = filepath.Base(runner.StateDir{}.Database())

// listSpy records the JobList calls of a wait and counts its JobGet calls.
type listSpy struct {
	queue.Store
	calls []queue.JobListParams
	gets  int
}

func (s *listSpy) JobGet(ctx context.Context, ref string) (queue.Job, error) {
	s.gets++
	return s.Store.JobGet(ctx, ref)
}

func (s *listSpy) JobList(ctx context.Context, p *queue.JobListParams) ([]queue.Job, error) {
	s.calls = append(s.calls, *p)
	return s.Store.JobList(ctx, p)
}

// spiedApp returns an app on a new SQLite store in a temporary state
// directory, the spy between them, and the store itself (closed when t
// ends).
func spiedApp(t *testing.T) (*app, *listSpy, *sqlite.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, databaseFile), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	spy := &listSpy{Store: st}
	return &app{Install: &compose.Install{StateDir: dir}, store: spy}, spy, st
}

// TestWaitJobsLooksOnlyAtItsJobs: a wait never lists the store without
// ids (an empty IDs lists every job: a submit --wait of a file of
// schedules only once read every finished job in the queue), returns at
// once with nothing to wait for, and prints one line per job however
// often it is named.
func TestWaitJobsLooksOnlyAtItsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, spy, st := spiedApp(t)

	var out bytes.Buffer
	require.NoError(t, waitJobs(ctx, a, nil, time.Second, &out, false))
	require.Empty(t, spy.calls)
	require.Empty(t, out.String())

	jobs, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []jobspec.Spec{
		{Name: "a", Command: []string{"true"}}, {Name: "b", Command: []string{"true"}},
	}})
	require.NoError(t, err)
	for _, j := range jobs {
		_, err := st.JobCancel(ctx, j.ID)
		require.NoError(t, err)
	}
	out.Reset()
	err = waitJobs(ctx, a, []string{jobs[0].ID, jobs[1].ID, jobs[0].ID}, time.Second, &out, false)
	require.ErrorContains(t, err, "2 of 2 job(s) did not succeed")
	require.Equal(t, 2, strings.Count(out.String(), "\n"), out.String())
	require.NotEmpty(t, spy.calls)
	for _, c := range spy.calls {
		require.NotEmpty(t, c.IDs)
	}
}

// TestResolveRefs: ids resolve in one query (5,000 of them once took 2 s,
// a JobGet each), names one by one, in the order given; a ref that is
// neither is a usage error; no refs resolve to none, not to every job.
func TestResolveRefs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, spy, st := spiedApp(t)
	specs := make([]jobspec.Spec, 50)
	for i := range specs {
		specs[i] = jobspec.Spec{Name: fmt.Sprintf("j%d", i), Command: []string{"true"}}
	}
	jobs, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs})
	require.NoError(t, err)

	var refs, want []string
	for i := len(jobs) - 1; i >= 0; i-- {
		refs, want = append(refs, jobs[i].ID), append(want, jobs[i].ID)
	}
	refs, want = append(refs, "j7", jobs[3].ID), append(want, jobs[7].ID, jobs[3].ID)
	got, err := resolveRefs(ctx, a, refs)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, 1, spy.gets, "only the name is looked up alone")

	_, err = resolveRefs(ctx, a, []string{jobs[0].ID, "nope"})
	var ue *usageError
	require.ErrorAs(t, err, &ue)
	require.ErrorContains(t, err, `no job "nope"`)
	got, err = resolveRefs(ctx, a, nil)
	require.NoError(t, err)
	require.Empty(t, got)
}

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/queue"
)

// listSpy records the JobList calls of a wait.
type listSpy struct {
	queue.Store
	calls []queue.JobListParams
}

func (s *listSpy) JobList(ctx context.Context, p *queue.JobListParams) ([]queue.Job, error) {
	s.calls = append(s.calls, *p)
	return s.Store.JobList(ctx, p)
}

// TestWaitJobsLooksOnlyAtItsJobs: a wait never lists the store without
// ids (an empty IDs lists every job: a submit --wait of a file of
// schedules only once read every finished job in the queue), returns at
// once with nothing to wait for, and prints one line per job however
// often it is named.
func TestWaitJobsLooksOnlyAtItsJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := queue.OpenSQLite(ctx, filepath.Join(dir, DatabaseFile), queue.SQLiteOptions{})
	require.NoError(t, err)
	defer st.Close()
	spy := &listSpy{Store: st}
	a := &app{stateDir: dir, store: spy}

	var out bytes.Buffer
	require.NoError(t, waitJobs(ctx, a, nil, time.Second, &out, false))
	require.Empty(t, spy.calls)
	require.Empty(t, out.String())

	jobs, err := st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: []queue.Spec{
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

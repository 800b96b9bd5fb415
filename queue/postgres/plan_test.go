package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"paddock/internal/pgtest"
	"paddock/jobspec"
	"paddock/queue"
)

// The claim (with or without a group limit set) reads jobs_ready in
// claim order and stops at its limit, even
// right after a big enqueue, before autovacuum has analyzed the table
// (the planner then believes it empty and would sort every ready job).
func TestClaimPlanReadsTheReadyIndexInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.Shared(t).NewDatabase(t, t.Name())
	s, err := Open(ctx, url, Options{})
	require.NoError(t, err)
	defer s.Close()
	specs := make([]jobspec.Spec, 10_000)
	for i := range specs {
		specs[i] = jobspec.Spec{Command: []string{"true"}, Labels: map[string]string{"batch": "b"}}
	}
	for b := range 10 { // 100,000 jobs, faster than autovacuum analyzes
		for i := range specs {
			specs[i].Name = fmt.Sprintf("b%d-%d", b, i)
		}
		_, err = s.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: "# test"})
		require.NoError(t, err)
	}
	for _, c := range []struct {
		sql     string
		prelude []string
		args    []any
		want    string
	}{
		{claimReadySQL, claimPrelude, []any{"w", nil, time.Minute.Microseconds(), 1, ""}, "Index Scan using jobs_ready on jobs"},
		{claimIDsSQL, nil, []any{"w", nil, time.Minute.Microseconds(), 1, "", []string{"x"}}, "jobs_id_key"},
		// The claim with a group limit (claimSeek) selects the same way,
		// and seeks each group's jobs in jobs_gated.
		{claimPickOpenSQL, claimPrelude, []any{time.Now(), 1}, "Index Scan using jobs_ready on jobs"},
		{claimPickGroupSQL, claimPrelude, []any{time.Now(), 1, "g"}, "Index Scan using jobs_gated on jobs"},
		{claimPromoteSQL, nil, []any{time.Now()}, "jobs_scheduled"},
		{claimRunningSQL, nil, []any{[]string{"g"}}, "jobs_group"},
	} {
		var plan []string
		require.NoError(t, s.txClock(ctx, func(tx pgx.Tx) error {
			for _, q := range c.prelude {
				if _, err := tx.Exec(ctx, q); err != nil {
					return err
				}
			}
			rows, err := tx.Query(ctx, "EXPLAIN "+c.sql, c.args...)
			if err != nil {
				return err
			}
			plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		}))
		text := strings.Join(plan, "\n")
		require.Contains(t, text, c.want, text)
		if c.prelude != nil {
			require.NotContains(t, text, "Sort", text)
		}
	}
}

package queue

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueryPlans guards the indexes the hot paths rely on: no statement
// below may scan the jobs table or sort in a temporary b-tree.
func TestQueryPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := OpenSQLite(ctx, filepath.Join(t.TempDir(), "q.db"), SQLiteOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	for _, analyze := range []bool{false, true} {
		if analyze {
			_, err = st.w.ExecContext(ctx, `ANALYZE`)
			require.NoError(t, err)
		}
		for name, q := range map[string]string{
			"claim":     claimSQL,
			"held":      heldNamesSQL,
			"byName":    `SELECT ` + jobCols + ` FROM jobs WHERE name = ? AND name != '' ORDER BY created_ns DESC, rid DESC LIMIT 1`,
			"release":   releaseSQL,
			"fail":      failSQL,
			"recover":   `SELECT ` + jobCols + ` FROM jobs WHERE state = 'running' AND lease_expires_ns < ?`,
			"prune":     pruneSelectSQL,
			"retryDeps": retryDepsSQL,
		} {
			rows, err := st.w.QueryContext(ctx, `EXPLAIN QUERY PLAN `+q, 1, 1, 1, 1)
			require.NoError(t, err, name)
			var plan []string
			for rows.Next() {
				var id, parent, notused int
				var detail string
				require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
				plan = append(plan, detail)
			}
			rows.Close()
			all := strings.Join(plan, "\n")
			t.Logf("%s:\n%s", name, all)
			for _, line := range plan {
				// An ordered walk of an index (SCAN ... USING INDEX) is fine
				// for the claim: it stops at LIMIT.
				bad := strings.Contains(line, "TEMP B-TREE") ||
					(strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, "USING") && !strings.Contains(line, "VIRTUAL TABLE")) ||
					(strings.HasPrefix(line, "SCAN jobs") && name != "claim")
				require.False(t, bad, "%s:\n%s", name, all)
			}
		}
	}
}

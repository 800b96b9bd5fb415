package queue_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
	"paddock/queue"
	"paddock/queue/sqlite"
)

// TestStoreErrorsPointAtKeys: errors only the store can find (an `after`
// name nothing in the queue has) and KeyLines give the key's own line, in
// a [[job]] file, in a single-job file and through [defaults].
func TestStoreErrorsPointAtKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "q.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	for _, tt := range []struct {
		name, text string
		line       int
	}{
		{"batch", "[[job]]\nname = \"a\"\ncommand = \"true\"\n\n[[job]]\nname = \"b\"\ncommand = \"true\"\nafter = [\"nowhere\"]\n", 8},
		{"single", "name = \"a\"\n\ncommand = \"true\"\nafter = [\"nowhere\"]\n", 4},
		{"defaults", "[defaults]\nretries = 1\nafter = [\"nowhere\"]\n\n[[job]]\nname = \"a\"\ncommand = \"true\"\n", 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			specs, err := jobspec.Parse("f.toml", []byte(tt.text), "/srv")
			require.NoError(t, err)
			_, err = st.JobEnqueue(ctx, &queue.JobEnqueueParams{Specs: specs, Source: tt.text, SourcePath: "f.toml"})
			var verr *jobspec.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Len(t, verr.Errors, 1)
			require.Equal(t, "after", verr.Errors[0].Key)
			require.Equal(t, tt.line, verr.Errors[0].Line, err.Error())
			require.Equal(t, tt.line, jobspec.KeyLines([]byte(tt.text))(specs[len(specs)-1].Line, "after"))
		})
	}
	// Text that is not the specs' file: the job's own line stands.
	require.Equal(t, 7, jobspec.KeyLines([]byte("bench"))(7, "after"))
	require.Equal(t, 0, jobspec.KeyLines(nil)(0, "hooks"))
}

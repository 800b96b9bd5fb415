package suggest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDidYouMean(t *testing.T) {
	t.Parallel()
	cands := []string{"timeout", "concurrency", "mode", "read_only"}
	for in, want := range map[string]string{
		"timout":     ` (did you mean "timeout"?)`,
		"concurency": ` (did you mean "concurrency"?)`,
		"READ_OLNY":  ` (did you mean "read_only"?)`,
		"mod":        ` (did you mean "mode"?)`,
		"zzzzzz":     "",
		"x":          "",
	} {
		require.Equal(t, want, DidYouMean(in, cands), in)
	}
}

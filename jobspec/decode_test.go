package jobspec

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/internal/testenv"
	"paddock/internal/tomlfile"
)

// A large file decoded in pieces is the file decoded whole, and a file
// the pieces cannot stand for (a [defaults] table after the jobs, an
// error in a later piece, a multi-line string that holds a header) gives
// the decoder's own result or error.
func TestDecodeFileInPieces(t *testing.T) {
	t.Parallel()
	if runtime.GOMAXPROCS(0) < 2 {
		testenv.Unavailable(t, "one processor: files are decoded whole, and the pieces cannot be checked")
	}
	batch := func(n int, tail string) []byte {
		var b strings.Builder
		b.WriteString("[defaults]\nretries = 1\n\n")
		for i := range n {
			fmt.Fprintf(&b, "[[job]]\nname = \"j%d\"\ncommand = [\"echo\", %q]\n[job.env]\nN = \"%d\"\n\n", i, strings.Repeat("x", 40), i)
			if i == n/2 {
				b.WriteString(tail)
			}
		}
		return []byte(b.String())
	}
	for name, data := range map[string][]byte{
		"jobs only":           batch(8000, ""),
		"defaults after jobs": []byte(strings.Replace(string(batch(8000, "[other]\nx = 1\n")), "[defaults]\nretries = 1\n", "", 1)),
		"header in a string":  batch(8000, "description = '''\n[[job]]\nname = \"fake\"\n'''\n"),
	} {
		require.Greater(t, len(data), splitMinBytes, name)
		heads := tomlfile.Locate(data, false)
		require.NotEmpty(t, pieceStarts(data, heads, 2), name)
		got, err := decodeFile(data, heads)
		want, werr := decodeWhole(data)
		require.Equal(t, werr, err, name)
		require.Equal(t, want, got, name)
	}
	bad := batch(8000, "retries = = 2\n")
	_, err := decodeFile(bad, tomlfile.Locate(bad, false))
	_, werr := decodeWhole(bad)
	require.Error(t, err)
	require.Equal(t, werr.Error(), err.Error(), "an error in a later piece is the whole file's, with its line")
}

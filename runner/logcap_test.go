package runner

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCappedLog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		max    int64
		writes []string
		want   string // exact file content; "" means check prefix/suffix below
	}{
		{name: "nothing written leaves no file", max: 100, writes: nil, want: "<none>"},
		{name: "under the cap", max: 100, writes: []string{"hello ", "world\n"}, want: "hello world\n"},
		{name: "exactly the cap", max: 10, writes: []string{"0123456789"}, want: "0123456789"},
		{name: "one write over", max: 10, writes: []string{"0123456789ABCDEF"},
			want: "01234\n[paddock: 6 bytes cut here; the log keeps the first 5 and the last 5 of 16 bytes]\nBCDEF"},
		{name: "many small writes wrap the ring", max: 6, writes: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"},
			want: "abc\n[paddock: 4 bytes cut here; the log keeps the first 3 and the last 3 of 10 bytes]\nhij"},
		{name: "write larger than the ring after the head", max: 6, writes: []string{"abc", "0123456789"},
			want: "abc\n[paddock: 7 bytes cut here; the log keeps the first 3 and the last 3 of 13 bytes]\n789"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(t.TempDir(), "log")
			var echo bytes.Buffer
			c := newCappedLog(p, tt.max, 4, &echo)
			for _, w := range tt.writes {
				n, err := c.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			all := strings.Join(tt.writes, "")
			require.Equal(t, all, echo.String(), "echo sees every byte")
			require.Equal(t, all[max(0, len(all)-4):], string(c.Tail()))
			require.Equal(t, int64(len(all)), c.Written())
			require.NoError(t, c.Close())
			ents, err := os.ReadDir(filepath.Dir(p))
			require.NoError(t, err)
			if tt.want == "<none>" {
				require.Empty(t, ents)
				return
			}
			got, err := os.ReadFile(p)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
			require.Len(t, ents, 1, "the tail ring is removed")
		})
	}
}

func BenchmarkCappedLogWrite(b *testing.B) {
	p := filepath.Join(b.TempDir(), "log")
	c := newCappedLog(p, 1<<20, 8<<10, nil)
	buf := bytes.Repeat([]byte("x"), 32<<10)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		_, _ = c.Write(buf)
	}
	require.NoError(b, c.Close())
}

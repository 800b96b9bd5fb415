package runner

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

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

// TestCappedLogReadFrom: io.Copy from a pipe (os/exec's path for a job's
// output) goes through ReadFrom, and leaves what Write alone leaves; a
// read error other than EOF is returned.
func TestCappedLogReadFrom(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 7000) // 112,000 bytes: several buffers
	byWrite := newCappedLog(filepath.Join(dir, "write"), 1000, 16, nil)
	_, err := byWrite.Write(data)
	require.NoError(t, err)
	require.NoError(t, byWrite.Close())

	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	go func() {
		for rest := data; len(rest) > 0; {
			k := min(len(rest), 3001)
			_, _ = pw.Write(rest[:k])
			rest = rest[k:]
		}
		pw.Close()
	}()
	byCopy := newCappedLog(filepath.Join(dir, "copy"), 1000, 16, nil)
	var _ io.ReaderFrom = byCopy
	n, err := io.Copy(byCopy, pr)
	require.NoError(t, err)
	require.Equal(t, int64(len(data)), n)
	require.Equal(t, int64(len(data)), byCopy.Written())
	require.Equal(t, data[len(data)-16:], byCopy.Tail())
	require.NoError(t, byCopy.Close())
	want, err := os.ReadFile(filepath.Join(dir, "write"))
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dir, "copy"))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))

	broken := newCappedLog(filepath.Join(dir, "broken"), 1000, 0, nil)
	boom := errors.New("boom")
	n, err = broken.ReadFrom(io.MultiReader(strings.NewReader("abc"), iotest.ErrReader(boom)))
	require.ErrorIs(t, err, boom)
	require.Equal(t, int64(3), n)
	require.NoError(t, broken.Close())
}

// TestCappedLogDenialLine: the stderr capture finds a denial line however
// much other stderr follows it (far more than its tail keeps), and one
// split across two writes; a log that keeps no tail does not scan.
func TestCappedLogDenialLine(t *testing.T) {
	t.Parallel()
	const msg = "touch: cannot touch '/etc/x': Read-only file system"
	filler := bytes.Repeat([]byte("warning: unused variable 'x' [-Wunused-variable]\n"), (64<<10)/49+1) // > 64 KiB
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		writes [][]byte
	}{
		{"one write, then 64 KiB", [][]byte{[]byte("cc -o /usr/bin/x x.c\n" + msg + "\n"), filler}},
		{"split across two writes, then 64 KiB", [][]byte{[]byte("cc -o /usr/bin/x x.c\n" + msg[:25]), []byte(msg[25:] + "\n"), filler}},
		{"split, with the 64 KiB in the second write", [][]byte{[]byte(msg[:40]), append([]byte(msg[40:]+"\n"), filler...)}},
	} {
		c := newCappedLog(filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")), 1<<20, stderrTailBytes, nil)
		for _, w := range tc.writes {
			_, err := c.Write(w)
			require.NoError(t, err)
		}
		require.NotContains(t, string(c.Tail()), "Read-only", tc.name)
		require.Equal(t, msg, c.DenialLine(), tc.name)
		require.NoError(t, c.Close())
	}

	noTail := newCappedLog(filepath.Join(dir, "stdout"), 1<<20, 0, nil)
	_, err := noTail.Write([]byte(msg + "\n"))
	require.NoError(t, err)
	require.Equal(t, "", noTail.DenialLine())
	require.NoError(t, noTail.Close())
}

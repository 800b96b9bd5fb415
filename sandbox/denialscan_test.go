package sandbox

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDenialScanner: whatever the writes' boundaries, the scanner finds
// the line denialLine finds in the whole stream (lines shorter than the
// scanner keeps), escape sequences, binary and an unterminated last line
// included.
func TestDenialScanner(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{
		"plain output\n",
		"warning: unused variable 'x'\n",
		"touch: cannot touch '/etc/x': Read-only file system\n",
		"cp: /usr/y: Read-only \x1b[1mfile\x1b[22m system\n",
		"\x1b[1;31merror:\x1b[0m coloured, no denial\n",
		"\u009b1mmake:\u009b0m Permission denied\n",
		"\x1b]0;Permission denied\x1b\\ hidden in a title\n",
		"\x1bPOperation not permitted\x1b\\ hidden in a DCS\n",
		"sh: 1: cannot create /etc/z: Operation not permitted\n",
		"°±© text with C2 bytes\n",
		"",
	}
	for seed := range 300 {
		var stream []byte
		for range rng.IntN(12) {
			switch rng.IntN(8) {
			case 0:
				stream = append(stream, randomLine(rng, rng.IntN(3000))...)
				stream = append(stream, '\n')
			case 1:
				stream = append(stream, randomLine(rng, 100)...)
				stream = append(stream, "mv: cannot move 'a' to '/usr/a': Read-only file system\n"...)
			default:
				stream = append(stream, pieces[rng.IntN(len(pieces))]...)
			}
		}
		if rng.IntN(3) == 0 { // an unterminated last line
			stream = append(stream, pieces[rng.IntN(len(pieces))]...)
			stream = bytes.TrimSuffix(stream, []byte("\n"))
		}
		want, wantOK := denialLine(stream)
		var s DenialScanner
		for rest := stream; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(200))
			n, err := s.Write(rest[:k])
			require.NoError(t, err)
			require.Equal(t, k, n)
			rest = rest[k:]
		}
		got, ok := s.Line()
		require.Equal(t, wantOK, ok, "seed %d: %q", seed, stream)
		require.Equal(t, want, got, "seed %d: %q", seed, stream)
	}
}

// TestDenialScannerBounded: a denial line stays found under megabytes of
// other output, a line longer than the scanner keeps is judged on its end,
// and the scanner holds a bounded amount whatever it is given.
func TestDenialScannerBounded(t *testing.T) {
	t.Parallel()
	const msg = "touch: cannot touch '/etc/x': Read-only file system"
	var s DenialScanner
	_, _ = s.Write([]byte("x\n" + msg[:20]))
	_, _ = s.Write([]byte(msg[20:] + "\n"))
	filler := []byte(strings.Repeat("warning: unused variable\n", 1000))
	for range 100 {
		_, _ = s.Write(filler)
	}
	line, ok := s.Line()
	require.True(t, ok)
	require.Equal(t, msg, line)

	var long DenialScanner
	for range 100 { // one 2.5 MB line, written in pieces, ending in a denial
		_, _ = long.Write(filler[:len(filler)-1])
	}
	_, _ = long.Write([]byte(" " + msg))
	require.LessOrEqual(t, cap(long.line), 2*denialScanLineMax)
	line, ok = long.Line()
	require.True(t, ok)
	require.True(t, strings.HasSuffix(line, msg), line)
	require.LessOrEqual(t, len(line), reasonLineMax+len("…"))
}

// TestHasEscapeStart: the scanner's quick test knows every character
// stripEscapes starts at, and only those.
func TestHasEscapeStart(t *testing.T) {
	t.Parallel()
	for _, r := range escapeStarts {
		require.True(t, hasEscapeStart([]byte("a"+string(r)+"b")), "%U", r)
	}
	for r := rune(0x80); r < 0x100; r++ {
		if !strings.ContainsRune(escapeStarts, r) {
			require.False(t, hasEscapeStart([]byte("a"+string(r)+"b")), "%U", r)
		}
	}
	require.False(t, hasEscapeStart([]byte("\xc2")))
}

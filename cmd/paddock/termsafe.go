package main

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// What paddock prints quotes job files, hook reasons and paths a job
// made: hostile text. A control character in it would reach the
// operator's terminal as a control sequence (ESC ] 0 sets the window's
// title, ESC ] 52 writes the clipboard on many terminals, CR and ESC [
// rewrite what is on the screen), and a bidirectional override would show
// text in another order than it is (CVE-2021-42574, "Trojan Source").
// So every command's output (cobra's OutOrStdout, errors, progress notes,
// the worker's log, and JSON written to stderr: encoding/json leaves DEL,
// C1 and the bidirectional overrides as they are) passes through
// termSafe, except the job's own output, which `logs` and `run` copy
// byte for byte as a shell would.

// termSafe returns s with each character a terminal would act on
// written out instead: the C0 controls but newline and tab, DEL, the C1
// controls and the bidirectional embeddings, overrides and isolates as
// \u00XX or \uXXXX (a JSON string's escape, so that --json output stays
// valid), and each byte that is not UTF-8 as \xHH. Text without them is
// returned as it is.
func termSafe(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return r == utf8.RuneError || termUnsafe(r) })
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.WriteString(s[:i])
	for s = s[i:]; s != ""; {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case termUnsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// termUnsafe reports whether a terminal may act on r rather than show
// it: C0 but \n and \t, DEL, C1 (ECMA-48), and U+202A–U+202E,
// U+2066–U+2069 (Unicode's bidirectional formatting characters, UAX #9).
func termUnsafe(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r >= 0x7f && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// termSafeWriter writes what it is given through [termSafe]. Each Write
// is taken as whole text: a character split between two writes is
// escaped as bytes (paddock's own writes are whole lines).
type termSafeWriter struct{ w io.Writer }

func (t termSafeWriter) Write(p []byte) (int, error) {
	s := termSafe(string(p))
	if _, err := io.WriteString(t.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// rawOut is w without [termSafeWriter]: for the job's own output, which
// `logs` prints as it was written.
func rawOut(w io.Writer) io.Writer {
	if t, ok := w.(termSafeWriter); ok {
		return t.w
	}
	return w
}

package sandbox

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// stripEscapes removes from l the escape sequences of ECMA-48 (5th
// edition, 1991), which a terminal acts on instead of showing:
//
//   - control sequences (5.4): CSI, as ESC [ or as U+009B in UTF-8 (C2 9B),
//     then parameter bytes 0x30–0x3F, intermediate bytes 0x20–0x2F and a
//     final byte 0x40–0x7E; colours are ESC [ 1;31m;
//   - operating system commands (8.3.89): OSC, as ESC ] or U+009D, a
//     command string, and the string terminator ST (8.3.143), as ESC \ or
//     U+009C, or, as xterm also takes it, BEL; hyperlinks are
//     ESC ] 8;;URI ESC \ text ESC ] 8;; ESC \. The string holds bytes
//     0x08–0x0D and 0x20–0x7E, and bytes from 0x80 as in xterm and the
//     Linux console (UTF-8 window titles);
//   - the other control strings (5.6): DCS (8.3.27), SOS (8.3.128), PM
//     (8.3.94) and APC (8.3.2), as ESC P, ESC X, ESC ^ and ESC _ or as
//     U+0090, U+0098, U+009E and U+009F, their payload and ST; a terminal
//     shows none of the payload. The payload is whatever comes before the
//     first ST, any byte (SOS may hold any but SOS and ST; an ESC not
//     followed by \ is payload too, where a terminal that follows DEC's
//     parser ends the string and shows what follows: the reason errs
//     towards showing less). With no ST on the line, the string runs to
//     the line's end if the rest of the line is text (no junk, by the rule
//     of binaryWindow); otherwise only its opener goes: binary output
//     holds openers by chance, and the message a program writes after it
//     on the same line must stay;
//   - the other two-byte escape sequences: ESC and one byte 0x30–0x7E,
//     that is the C1 set (ECMA-48 5.3, 0x40–0x5F), the private Fp
//     sequences (ECMA-35 §13.2.3, 0x30–0x3F: "ESC 7" and "ESC 8" save and
//     restore the cursor) and the independent control functions Fs
//     (ECMA-48 5.5, 0x60–0x7E: "ESC c" resets the terminal);
//   - ESC, intermediate bytes 0x20–0x2F, a final byte 0x30–0x7E (ECMA-35
//     §13.2, nF sequences: "ESC ( B" from tput sgr0, charset selection).
//
// Apart from the control strings of DCS, SOS, PM and APC, only whole
// sequences go: one cut short, or holding a byte it may not, stays but for
// its ESC or C1 character, which [reasonText] drops as a control
// character. An unterminated OSC thus cannot swallow the rest of a line.
//
// stripEscapes sees one line: a control string does not go on past it.
func stripEscapes(l string) string {
	if !strings.ContainsAny(l, escapeStarts) {
		return l
	}
	var b strings.Builder
	for i := 0; i < len(l); {
		n := escapeLen(l[i:])
		if n == 0 {
			b.WriteByte(l[i])
			n = 1
		}
		i += n
	}
	return b.String()
}

// escapeStarts are the characters that start the escape sequences
// [stripEscapes] removes: ESC, and the C1 characters CSI, OSC, DCS, SOS,
// PM and APC. hasEscapeStart looks for the same.
const escapeStarts = "\x1b\u009b\u009d\u0090\u0098\u009e\u009f"

// escapeLen returns the length in bytes of the escape sequence (see
// [stripEscapes]) that starts s, or 0 when none does.
func escapeLen(s string) int {
	switch {
	case strings.HasPrefix(s, "\x1b["), strings.HasPrefix(s, "\u009b"):
		i := 2
		for i < len(s) && s[i] >= 0x30 && s[i] <= 0x3f {
			i++
		}
		for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
			i++
		}
		if i < len(s) && s[i] >= 0x40 && s[i] <= 0x7e {
			return i + 1
		}
	case strings.HasPrefix(s, "\x1b]"), strings.HasPrefix(s, "\u009d"):
		for i := 2; i < len(s); i++ {
			switch c := s[i]; {
			case c == '\a':
				return i + 1
			case c == 0xc2 && strings.HasPrefix(s[i:], "\u009c"):
				return i + 2
			case c == '\x1b':
				if strings.HasPrefix(s[i:], "\x1b\\") {
					return i + 2
				}
				return 0
			case c < 0x08, c > 0x0d && c < 0x20, c == 0x7f:
				return 0
			}
		}
	case strings.HasPrefix(s, "\x1bP"), strings.HasPrefix(s, "\x1bX"), strings.HasPrefix(s, "\x1b^"), strings.HasPrefix(s, "\x1b_"),
		strings.HasPrefix(s, "\u0090"), strings.HasPrefix(s, "\u0098"), strings.HasPrefix(s, "\u009e"), strings.HasPrefix(s, "\u009f"):
		// DCS, SOS, PM, APC: up to and with the first ST, or the end
		// when that is text.
		for i := 2; i+1 < len(s); i++ {
			if (s[i] == '\x1b' && s[i+1] == '\\') || (s[i] == 0xc2 && s[i+1] == 0x9c) {
				return i + 2
			}
		}
		for i := 2; i < len(s); {
			r, size := utf8.DecodeRuneInString(s[i:])
			if junk, _ := isJunk(r, size); junk {
				return 2
			}
			i += size
		}
		return len(s)
	case len(s) >= 2 && s[0] == '\x1b' && s[1] >= 0x30 && s[1] <= 0x7e:
		return 2
	case len(s) >= 3 && s[0] == '\x1b' && s[1] >= 0x20 && s[1] <= 0x2f:
		// ECMA-35 §13.2 (nF): intermediate bytes, then a final byte
		// 0x30–0x7E; "ESC ( B", which tput sgr0 writes, selects ASCII.
		i := 1
		for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
			i++
		}
		if i < len(s) && s[i] >= 0x30 && s[i] <= 0x7e {
			return i + 1
		}
	}
	return 0
}

// binaryWindow, binaryMin and binaryGap define where binary output is on a
// line: where it ends before a message ([messageStart]) and, read from the
// line's end backwards, where it starts after one ([messageEnd]). A character is junk when it is an invalid UTF-8 byte or a control
// character other than tab and escape (which colours use). Binary starts at
// a stretch of binaryWindow characters of which at least binaryMin are junk,
// one of them a control character, and goes on while junk comes again
// within binaryGap characters. Random bytes are ~60% junk (~12% control
// characters), and a clean run of binaryGap of them has odds of ~1e-7;
// text in a legacy encoding has invalid bytes (every letter of a CP1251 or
// KOI8-R file name) but no control characters, and valid UTF-8 text none.
const (
	binaryWindow = 8
	binaryMin    = 4
	binaryGap    = 16
)

// binaryScan applies the junk rule of binaryWindow to a line's characters
// given one at a time, in either direction.
type binaryScan struct {
	junkAt, ctrlAt [binaryWindow]bool // of the last characters: rings
	n              int                // characters seen
	last           int                // the index, in characters, of binary's last junk; -1 before any
}

// isJunk reports whether r, decoded from size bytes, is junk by the rule of
// binaryWindow, and whether it is a control character.
func isJunk(r rune, size int) (junk, ctrl bool) {
	ctrl = unicode.IsControl(r) && r != '\t' && r != '\x1b'
	return (r == utf8.RuneError && size == 1) || ctrl, ctrl
}

// step takes the next character, r decoded from size bytes, and reports
// whether it is binary's: junk in a dense enough stretch, or junk within
// binaryGap characters of binary's last.
func (b *binaryScan) step(r rune, size int) bool {
	n := b.n
	b.n++
	junk, ctrl := isJunk(r, size)
	b.junkAt[n%binaryWindow], b.ctrlAt[n%binaryWindow] = junk, ctrl
	if !junk {
		return false
	}
	dense, ctrls := 0, 0
	for k := range b.junkAt {
		if b.junkAt[k] {
			dense++
		}
		if b.ctrlAt[k] {
			ctrls++
		}
	}
	if (dense >= binaryMin && ctrls > 0) || (b.last >= 0 && n-b.last <= binaryGap) {
		b.last = n
		return true
	}
	return false
}

// messageStart returns where the message that ends at at begins in l: just
// after the binary output before at (see binaryWindow), or 0 when there is
// none. A program that writes binary to stderr and then fails a write
// leaves its message on the binary's line; the reason's quote should start
// at the message ("touch: cannot touch ..."), not at hundreds of bytes of
// U+FFFD.
func messageStart(l string, at int) int {
	b := binaryScan{last: -1}
	start := 0
	for i := 0; i < at; {
		r, size := utf8.DecodeRuneInString(l[i:])
		i += size
		if b.step(r, size) {
			start = i
		}
	}
	return start
}

// messageEnd returns where the message that goes on from from ends in l:
// where the first binary output after from starts, by the rule of
// [messageStart] applied backwards from the line's end, or len(l) when
// there is none. A program that fails a write and then writes binary to
// stderr leaves the binary on its message's line.
func messageEnd(l string, from int) int {
	b := binaryScan{last: -1}
	end := len(l)
	for i := len(l); i > from; {
		r, size := utf8.DecodeLastRuneInString(l[from:i])
		i -= size
		if b.step(r, size) {
			end = i
		}
	}
	return end
}

// reasonLineMax is how much of a stderr line a reason quotes, in bytes.
const reasonLineMax = 300

// reasonText makes a line of a job's stderr fit a reason: invalid UTF-8
// replaced, control characters (NULs of binary output, the ESC of an
// escape sequence cut short; [stripEscapes] removes whole ones) and
// format characters (bidi overrides such as U+202E, zero-width ones,
// which would change how the rest reads) dropped, tabs made spaces.
func reasonText(l string) string {
	l = strings.ToValidUTF8(l, "\uFFFD")
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return ' '
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r):
			return -1
		}
		return r
	}, l))
}

// quoteAround returns at most reasonLineMax bytes of l around the n bytes
// at at (the denial's signature, which the error message ends with):
// most of what comes before it, the rest after it, "…" where it cuts.
func quoteAround(l string, at, n int) string {
	if len(l) <= reasonLineMax {
		return l
	}
	end := min(len(l), at+n+(reasonLineMax-n)/4)
	start := max(0, end-reasonLineMax)
	end = min(len(l), start+reasonLineMax)
	for start > 0 && !utf8.RuneStart(l[start]) {
		start++
	}
	for end < len(l) && !utf8.RuneStart(l[end]) {
		end--
	}
	q := l[start:end]
	if start > 0 {
		q = "…" + q
	}
	if end < len(l) {
		q += "…"
	}
	return q
}

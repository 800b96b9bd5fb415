package sandbox

import "bytes"

// denialScanLineMax is how much of a line that spans writes a
// [DenialScanner] keeps, in bytes: its last 8 KiB.
const denialScanLineMax = 8 << 10

// DenialScanner finds the last line of a stream that names a refused
// write, by the rules of [Classification.Denied] (the same test [Classify]
// applies to its Stderr), in bounded memory whatever the stream's length:
// give its [DenialScanner.Line] to [ClassifyParams].DenialLine so that a
// denial followed by more stderr than the caller keeps of its tail still
// counts.
//
// A line that spans writes is judged on its last 8 KiB, as a tail judges
// its first, cut, line; a line within one write is judged whole. The
// scanner keeps that much of the line in progress and the last denial's
// quote (at most reasonLineMax bytes and two "…").
//
// # Cost
//
// Each write costs a few passes over it at memory speed: bytes.IndexByte
// for its first newline, bytes.LastIndexByte from its end to its last one
// (a byte loop, but over the last line only), bytes.Index for each of the
// three denial signatures and bytes.IndexByte for ESC and for the first
// byte (C2) of the C1 characters that start escape sequences. Only when
// one of these finds something are the write's lines looked at one by
// one, and only a line that holds a signature, or an escape and a
// signature's bytes in order, goes through the full test. Output without
// escape sequences or signatures (the usual case) thus costs no
// allocation and no per-line work; coloured output costs a loop over its
// lines and, per line, an IndexByte for each byte of a signature at most.
//
// The zero value is ready to use. A DenialScanner is not safe for
// concurrent use.
type DenialScanner struct {
	line  []byte // the line in progress: its last denialScanLineMax bytes
	found string // the last complete denial line's quote; "" before one
}

// Write scans p; it never fails.
func (s *DenialScanner) Write(p []byte) (int, error) {
	first := bytes.IndexByte(p, '\n')
	if first < 0 {
		s.keep(p)
		return len(p), nil
	}
	// The line in progress ends in p.
	if len(s.line) == 0 {
		s.scan(p[:first])
	} else {
		s.keep(p[:first])
		s.scan(s.line)
		s.line = s.line[:0]
	}
	rest := p[first+1:]
	if last := bytes.LastIndexByte(rest, '\n'); last >= 0 {
		s.scan(rest[:last])
		rest = rest[last+1:]
	}
	s.keep(rest)
	return len(p), nil
}

// Line returns the quote of the last line written with a denial signature
// (the line in progress too, as the stream's last line), as [Classify]
// quotes it, and whether there was one.
func (s *DenialScanner) Line() (string, bool) {
	if mayDeny(s.line) && lineMayDeny(s.line) {
		if l, ok := denialLine(s.line); ok {
			return l, true
		}
	}
	return s.found, s.found != ""
}

// keep appends p to the line in progress, keeping its last
// denialScanLineMax bytes.
func (s *DenialScanner) keep(p []byte) {
	if len(p) >= denialScanLineMax {
		s.line = append(s.line[:0], p[len(p)-denialScanLineMax:]...)
		return
	}
	if over := len(s.line) + len(p) - denialScanLineMax; over > 0 {
		s.line = s.line[:copy(s.line, s.line[over:])]
	}
	s.line = append(s.line, p...)
}

// scan looks for a denial in lines, whole lines without their last
// newline, and remembers the last.
func (s *DenialScanner) scan(lines []byte) {
	if !mayDeny(lines) {
		return
	}
	for len(lines) > 0 {
		line, rest, _ := bytes.Cut(lines, []byte("\n"))
		if lineMayDeny(line) {
			if l, ok := denialLine(line); ok {
				s.found = l
			}
		}
		lines = rest
	}
}

// denialSignatureBytes are denialSignatures as byte slices.
var denialSignatureBytes = func() [][]byte {
	b := make([][]byte, len(denialSignatures))
	for i, sig := range denialSignatures {
		b[i] = []byte(sig)
	}
	return b
}()

// mayDeny reports whether text may hold a line that [denialLine] takes:
// it holds a signature, or an escape sequence ([stripEscapes] leaves a
// line without one as it is) that may hide a split signature.
func mayDeny(text []byte) bool {
	return hasSignature(text) || hasEscapeStart(text)
}

// hasSignature reports whether b holds one of the denial signatures.
func hasSignature(b []byte) bool {
	for _, sig := range denialSignatureBytes {
		if bytes.Contains(b, sig) {
			return true
		}
	}
	return false
}

// lineMayDeny is mayDeny for one line, closer: a line with an escape
// sequence but no signature may deny only if it holds the bytes of a
// signature in order (stripEscapes only removes bytes).
func lineMayDeny(line []byte) bool {
	if hasSignature(line) {
		return true
	}
	if !hasEscapeStart(line) {
		return false
	}
	for _, sig := range denialSignatureBytes {
		if holdsInOrder(line, sig) {
			return true
		}
	}
	return false
}

// hasEscapeStart reports whether b holds a character of escapeStarts: ESC,
// or the UTF-8 form (C2 and a byte 0x80–0x9F) of a C1 character among them.
func hasEscapeStart(b []byte) bool {
	if bytes.IndexByte(b, '\x1b') >= 0 {
		return true
	}
	for {
		i := bytes.IndexByte(b, 0xc2)
		if i < 0 || i+1 >= len(b) {
			return false
		}
		switch b[i+1] {
		case 0x90, 0x98, 0x9b, 0x9d, 0x9e, 0x9f:
			return true
		}
		b = b[i+1:]
	}
}

// holdsInOrder reports whether b holds the bytes of sig in order, with
// anything between them.
func holdsInOrder(b, sig []byte) bool {
	for _, c := range sig {
		i := bytes.IndexByte(b, c)
		if i < 0 {
			return false
		}
		b = b[i+1:]
	}
	return true
}

package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Status is what bwrap wrote on its status fd (--json-status-fd).
type Status struct {
	// ChildPID is the host pid of the sandbox's first process; 0 when bwrap
	// failed before creating it.
	ChildPID int
	// Ran is true only when bwrap wrote an "exit-code" record, which it does
	// only after the command really started and exited. false means the
	// command never ran (bwrap failed during setup, exec failed, or bwrap
	// was killed).
	Ran bool
	// ExitCode is the command's exit status when Ran (128+n when the
	// command was killed by signal n inside the pid namespace).
	ExitCode int
	// PidNamespace is the inode number of the sandbox's pid namespace, as
	// bwrap reports it with the child pid ("pid-namespace"); 0 when it
	// did not.
	PidNamespace uint64
	// LaunchError is what the launcher reported (a [launch.ReportKey]
	// record on [LaunchReportFD]) when the command never ran: the
	// Landlock ruleset could not be enforced, or the argv could not be
	// executed. Ran is then false, whatever exit-code record follows
	// (bwrap reports the launcher's exit). "" when none.
	LaunchError string
}

// ReadStatus reads bwrap's JSON status stream from r until EOF. The caller
// owns r. An empty stream is a valid Status with Ran false. A malformed
// stream returns what was read so far and an error.
func ReadStatus(r io.Reader) (Status, error) {
	return WatchStatus(r, nil)
}

// WatchStatus is [ReadStatus] that also calls onRecord, on the caller's
// goroutine, with the status so far after each record, as soon as it
// arrives (bwrap writes the child-pid record once the sandbox's first
// process exists, the exit-code record once the command has exited).
// onRecord may be nil.
//
// The exit-code record does not mean that the job's processes are gone:
// bwrap's init inside the sandbox reports the command's exit through an
// eventfd at once, and keeps running (and reaping) while other processes
// of the sandbox live; they die when the init does, which the kernel
// kills when bwrap exits (--die-with-parent), with the whole pid
// namespace (pid_namespaces(7)). [AwaitInit] waits for that.
func WatchStatus(r io.Reader, onRecord func(Status)) (Status, error) {
	var s Status
	dec := json.NewDecoder(r)
	for {
		var rec struct {
			ChildPID    *int    `json:"child-pid"`
			PidNS       *uint64 `json:"pid-namespace"`
			ExitCode    *int    `json:"exit-code"`
			LaunchError *string `json:"paddock-launch-error"`
		}
		if err := dec.Decode(&rec); err != nil {
			if errors.Is(err, io.EOF) {
				return s, nil
			}
			return s, fmt.Errorf("sandbox: reading bwrap status: %w", err)
		}
		if rec.ChildPID != nil {
			s.ChildPID = *rec.ChildPID
		}
		if rec.PidNS != nil {
			s.PidNamespace = *rec.PidNS
		}
		if rec.LaunchError != nil && s.LaunchError == "" {
			s.LaunchError = *rec.LaunchError
			if s.LaunchError == "" {
				s.LaunchError = "the launcher failed"
			}
		}
		if rec.ExitCode != nil {
			s.Ran = s.LaunchError == ""
			s.ExitCode = *rec.ExitCode
		}
		if onRecord != nil {
			onRecord(s)
		}
	}
}

// Outcome is how a spawned job ended.
type Outcome string

const (
	// OutcomeSucceeded: the command ran and exited 0.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeFailed: the command ran and exited non-zero, or the process was
	// killed by a signal (a timeout, a cancel).
	OutcomeFailed Outcome = "failed"
	// OutcomeRunnerFailed: bwrap failed; the command never ran.
	OutcomeRunnerFailed Outcome = "runner_failed"
)

// ClassifyParams are the inputs of [Classify].
type ClassifyParams struct {
	// Mode of the policy the job ran under.
	Mode Mode
	// State of the spawned process (bwrap, or argv[0] for
	// danger_full_access). nil means it never started.
	State *os.ProcessState
	// Status is from [ReadStatus]; the zero value for danger_full_access.
	Status Status
	// Stderr is the tail of the job's stderr, for the denial hint and
	// bwrap's own error line.
	Stderr []byte
	// DenialLine is the quote of the last line of the whole stderr with a
	// denial signature, from a [DenialScanner] the stderr went through;
	// Classify uses it when Stderr holds no such line (the denial came
	// before the tail). "" (the default) when none, or not scanned.
	DenialLine string
}

// denial returns the denial hint's quote: of the last line of Stderr with
// a denial signature, else DenialLine.
func (p ClassifyParams) denial() (string, bool) {
	if line, ok := denialLine(p.Stderr); ok {
		return line, true
	}
	return p.DenialLine, p.DenialLine != ""
}

// Classification is the verdict of [Classify].
type Classification struct {
	Outcome Outcome
	// ExitCode is the command's exit status; -1 when the spawned process was
	// killed by a signal or never started.
	ExitCode int
	// Signal names the signal that killed the spawned process ("SIGKILL"),
	// "" when it exited.
	Signal string
	// Denied is a hint that the fence refused a write: the exit status is not
	// 0 and a line of stderr carries a denial signature ("Read-only file
	// system", "Permission denied", "Operation not permitted") in the text
	// it shows on a terminal (escape sequences removed). It is never true
	// when the exit status is 0.
	Denied bool
	// Reason is human text: "exit status 1", "bwrap: … (…; hint: …)",
	// "write refused by the fence: …".
	Reason string
}

// denialSignatures mark a line as a write the fence (or the kernel on its
// behalf) refused.
var denialSignatures = []string{"Read-only file system", "Permission denied", "Operation not permitted"}

// Classify tells a command that ran and failed from a runner (bwrap) that
// failed before the command ran, using bwrap's status record, never stderr
// text: for confined modes, Status.Ran decides. Text only feeds the denial
// hint and the reason:
//
//   - exit status 0 is never a denial;
//   - a runner (bwrap) line counts only when "bwrap: " starts the line;
//   - a line that is both a runner line and a denial line is a denial.
//
// Classify is pure and safe for concurrent use.
func Classify(p ClassifyParams) Classification {
	if p.State == nil {
		return Classification{Outcome: OutcomeRunnerFailed, ExitCode: -1, Reason: "the process never started"}
	}
	if ws, ok := p.State.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		name := unix.SignalName(ws.Signal())
		if name == "" {
			name = ws.Signal().String()
		}
		c := Classification{Outcome: OutcomeFailed, ExitCode: -1, Signal: name, Reason: "killed by " + name}
		if p.Mode.Confined() && p.Status.ChildPID == 0 {
			c.Outcome = OutcomeRunnerFailed
			c.Reason = "bwrap killed by " + name + " before the command started"
		}
		return c
	}
	code := p.State.ExitCode()
	if p.Mode.Confined() && !p.Status.Ran {
		c := Classification{Outcome: OutcomeRunnerFailed, ExitCode: code, Reason: fmt.Sprintf("bwrap exited with status %d before the command ran", code)}
		if msg := p.Status.LaunchError; msg != "" {
			c.Reason = "paddock-launch: " + msg
			if explanation, hint := explain(msg); explanation != "" {
				c.Reason += " (" + explanation + "; hint: " + hint + ")"
			}
			return c
		}
		if d, ok := Diagnose(p.Stderr); ok {
			c.Reason = d.Line
			if d.Explanation != "" {
				c.Reason += " (" + d.Explanation + "; hint: " + d.Hint + ")"
			}
		}
		if code != 0 {
			if line, ok := p.denial(); ok {
				c.Denied = true
				c.Reason += "; write refused by the fence: " + line
			}
		}
		return c
	}
	if p.Mode.Confined() {
		code = p.Status.ExitCode
	}
	if code == 0 {
		return Classification{Outcome: OutcomeSucceeded, ExitCode: 0, Reason: "exit status 0"}
	}
	c := Classification{Outcome: OutcomeFailed, ExitCode: code, Reason: fmt.Sprintf("exit status %d", code)}
	if line, ok := p.denial(); ok && p.Mode.Confined() {
		c.Denied = true
		c.Reason = "write refused by the fence: " + line
	}
	return c
}

// denialLine returns the last stderr line with a denial signature, its
// escape sequences removed (see [stripEscapes]): a signature hidden in one
// (a window title) does not count, one split by colours does.
func denialLine(stderr []byte) (string, bool) {
	lines := bytes.Split(stderr, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		shown := stripEscapes(string(lines[i]))
		for _, sig := range denialSignatures {
			if at := strings.LastIndex(shown, sig); at >= 0 {
				l := reasonText(shown[messageStart(shown, at):messageEnd(shown, at+len(sig))])
				at = strings.LastIndex(l, sig)
				return quoteAround(l, at, len(sig)), true
			}
		}
	}
	return "", false
}

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

package sandbox

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

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
			if explanation, hint := explainLaunch(msg); explanation != "" {
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

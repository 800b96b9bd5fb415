package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"paddock/sandbox/launch"
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
			s.LaunchError = launch.Describe(*rec.LaunchError)
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

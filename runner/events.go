package runner

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

// Event is one line of the event log: a job changed state.
type Event struct {
	// Time is when the change was recorded (RFC 3339 with nanoseconds).
	Time time.Time `json:"time"`
	// Type is "started" (a worker claimed the job and runs an attempt),
	// "finished" (the attempt was recorded; State is the job's state after
	// it) or "recovered" (an expired lease was taken back, or a stopping
	// worker gave back a job it had to stop).
	Type     string `json:"type"`
	JobID    string `json:"job_id"`
	JobName  string `json:"job_name,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	State    string `json:"state,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Reason   string `json:"reason,omitempty"`
	WorkerID string `json:"worker_id,omitempty"`
}

// EventLog appends events as JSON lines to a file (events.jsonl in the state
// directory). Each event is one write on an O_APPEND descriptor, so several
// workers can share the file without interleaving lines. Safe for concurrent
// use. A nil *EventLog discards events.
type EventLog struct {
	mu sync.Mutex
	f  *os.File
}

// OpenEventLog opens (creating, mode 0600) the event log at path.
func OpenEventLog(path string) (*EventLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	return &EventLog{f: f}, nil
}

// Append writes e. Errors are returned but a worker only logs them: losing
// an event line must not stop a job.
func (l *EventLog) Append(e Event) error {
	if l == nil {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.f.Write(b)
	return err
}

// Close closes the file.
func (l *EventLog) Close() error {
	if l == nil {
		return nil
	}
	return l.f.Close()
}

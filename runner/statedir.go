package runner

import (
	"fmt"
	"path/filepath"

	"paddock/sandbox"
)

// StateDir is the layout of paddock's state directory: the one place
// where the names of its files and directories are spelled. Root is the
// directory itself (absolute). Every method is pure.
//
//	<root>/paddock.db              the queue (SQLite; -wal and -shm beside it)
//	<root>/events.jsonl            the event log (workers append, waits read)
//	<root>/logs/<id>.<n>.stdout    attempt logs, one flat directory
//	<root>/workspaces/<id>/        a job's default workspace
//	<root>/inbox/                  job files dropped by agents
//	<root>/cache/probe.json        the probe cache
//	<root>/cache/wazero/           the hooks' compilation cache
//	<root>/notify/wake             touched after an enqueue: idle workers claim at once
//	<root>/dev/                    a root worker's substitute device nodes (sandbox.PrepareDeviceNodes)
//	<root>/locks/root-<n>          locks of writable roots and their ancestors, n < 1024 (lockRoots)
//	<root>/locks/key               the key that hashes directories to those locks
//
// Jobs never see any of it: the whole directory is hidden inside every
// sandbox, and only a job's own default workspace is bound back.
type StateDir struct {
	Root string
}

// Names inside the state directory.
const (
	databaseName   = "paddock.db"
	eventLogName   = "events.jsonl"
	logsName       = "logs"
	workspacesName = "workspaces"
	inboxName      = "inbox"
	cacheName      = "cache"
	hookCacheName  = "wazero"
	notifyName     = "notify"
	devName        = "dev"
	locksName      = "locks"
	wakeName       = "wake"
)

// Database is the queue's SQLite file.
func (s StateDir) Database() string { return filepath.Join(s.Root, databaseName) }

// EventLog is the append-only event log (see [OpenEventLog]).
func (s StateDir) EventLog() string { return filepath.Join(s.Root, eventLogName) }

// Logs is the flat directory of attempt logs: a directory per job would
// cost a mkdir per job.
func (s StateDir) Logs() string { return filepath.Join(s.Root, logsName) }

// AttemptLogs returns where attempt number attempt (1-based) of job jobID
// writes its stdout and stderr: <root>/logs/<jobID>.<attempt>.stdout and
// .stderr. A file exists once the job wrote a byte to that stream.
func (s StateDir) AttemptLogs(jobID string, attempt int) (stdout, stderr string) {
	base := filepath.Join(s.Logs(), fmt.Sprintf("%s.%d", jobID, attempt))
	return base + ".stdout", base + ".stderr"
}

// Workspaces is the parent of the jobs' default workspaces.
func (s StateDir) Workspaces() string { return filepath.Join(s.Root, workspacesName) }

// DefaultWorkspace is the workspace of a job that names none; it is that
// job's alone.
func (s StateDir) DefaultWorkspace(jobID string) string {
	return filepath.Join(s.Workspaces(), jobID)
}

// DeviceNodes is where a worker running as root keeps the device nodes
// its jobs get in place of the host's ([sandbox.PrepareDeviceNodes]).
func (s StateDir) DeviceNodes() string { return filepath.Join(s.Root, devName) }

// RootLockKey is the key that hashes directories to their places in
// [StateDir.RootLocks] ([rootLockPlan]).
func (s StateDir) RootLockKey() string { return filepath.Join(s.Root, locksName, "key") }

// RootLocks is the file whose bytes are the writable roots' locks
// ([lockRoots]).
func (s StateDir) RootLocks() string { return filepath.Join(s.Root, locksName, "roots") }

// Inbox is the directory agents drop job files into.
func (s StateDir) Inbox() string { return filepath.Join(s.Root, inboxName) }

// ProbeCache is the probe cache file (see sandbox.ProbeCached).
func (s StateDir) ProbeCache() string {
	return filepath.Join(s.Root, cacheName, sandbox.ProbeCacheFile)
}

// HookCache is the hooks' on-disk compilation cache directory.
func (s StateDir) HookCache() string { return filepath.Join(s.Root, cacheName, hookCacheName) }

// Notify is the directory of the wake file ([StateDir.WakeFile]): a
// directory of its own, so that a worker's watch of it does not see every
// write to the database.
func (s StateDir) Notify() string { return filepath.Join(s.Root, notifyName) }

// WakeFile is the file `paddock submit` touches after an enqueue, so that
// idle workers claim at once instead of at their next poll ([Wake]).
func (s StateDir) WakeFile() string { return filepath.Join(s.Notify(), wakeName) }

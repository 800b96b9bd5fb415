// Package inbox turns job files dropped into a directory into queued
// jobs: each settled *.toml file is parsed (package jobspec), enqueued
// whole into a queue.Store, and moved to accepted/ or, with a ".error"
// file saying why, to rejected/. See [Inbox].
//
// An [Inbox] is safe for concurrent use, and several processes may scan
// one directory: scans are serialized with a lock file.
package inbox

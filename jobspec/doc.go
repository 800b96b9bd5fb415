// Package jobspec is paddock's job-file format: TOML job files parsed
// into [Spec] values, strictly validated, with every problem located.
//
// [Parse] and [ParseFile] read a file holding one job as top-level keys,
// or many as [[job]] tables with an optional [defaults] table. Every key
// of a job table is in one table of this package (its name, how its TOML
// value is checked, how a default reaches a job): an unknown key is an
// error with a did-you-mean hint, and every error is a [FieldError]
// naming the file, the line, the job and the key. [Validate] applies the
// same rules to specs built by Go code; a store runs it before it
// enqueues. [ParseCron] parses a schedule expression and [Cron.Next]
// computes its ticks. [KeyLines] places a key of a file's text on its
// line, for errors found after parsing (an `after` naming nothing, an
// unknown hook name).
//
// The package reads files and nothing else: it never enqueues, runs a
// job or evaluates a hook, and it does not expand "~" or environment
// variables in paths. The job-file keys and their defaults are documented
// in docs/job-files.md.
//
// # Names and ids
//
// A job id is [IDLen] characters of [IDAlphabet]. A name is optional, at
// most [MaxNameLen] bytes of letters, digits, '.', '_' and '-', starting
// with a letter or digit, and never shaped like an id ([LooksLikeID]), so
// that a reference (in after, or on the command line) is an id exactly
// when it looks like one.
//
// # Concurrency
//
// Every function is safe for concurrent use; a [Cron] is immutable.
// Parse never panics, whatever its input (FuzzParse).
package jobspec

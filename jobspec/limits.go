package jobspec

import (
	"fmt"
	"strconv"
)

// Limits on what a job spec may carry. A job must be one the kernel can
// start, and one whose hook request stays small enough for any hook to
// read: a job cannot make a hook fail by its size. The execve limits are
// those of Linux, execve(2), "Limits on size of arguments and environment".
// Parse and the stores refuse a job over any of them, naming the key.
const (
	// MaxArgBytes is the longest single argv element, or env entry counted
	// as "NAME=value", in bytes: MAX_ARG_STRLEN (32 pages, 131072 bytes)
	// less the terminating NUL. A longer one fails execve with E2BIG.
	MaxArgBytes = 128<<10 - 1
	// MaxArgvEnvBytes bounds argv and env together, counted as execve
	// counts them: each string with its NUL, plus an 8-byte pointer. It is
	// half of ARG_MAX under the default 8 MiB stack limit (a quarter of
	// the stack limit: 2 MiB); the other half is left to the sandbox's own
	// arguments (bwrap is exec'd with the job's argv after its own) and
	// the environment the worker passes through.
	MaxArgvEnvBytes = 1 << 20
	// MaxArgs is the most argv elements a job may have.
	MaxArgs = 1 << 16
	// MaxEnv is the most env entries a job may have.
	MaxEnv = 1 << 10
	// MaxLabels is the most labels a job may have.
	MaxLabels = 64
	// MaxLabelKeyBytes is the longest label name, in bytes.
	MaxLabelKeyBytes = 128
	// MaxLabelValueBytes is the longest label value, in bytes.
	MaxLabelValueBytes = 1 << 10
	// MaxWritable is the most extra writable paths a job may name.
	MaxWritable = 64
	// MaxPathBytes is the longest cwd, workspace or writable path, in
	// bytes: PATH_MAX (4096) less the NUL.
	MaxPathBytes = 4095
	// MaxJobHooks is the most optional hooks a job may ask for, each name
	// at most MaxNameLen bytes.
	MaxJobHooks = 32
)

// limitProblems returns how s breaks the limits above, at most one
// problem per limit, in a stable order.
func limitProblems(s *Spec) []keyMsg {
	var out []keyMsg
	add := func(key, format string, args ...any) { out = append(out, keyMsg{key, fmt.Sprintf(format, args...)}) }

	total := 0
	if len(s.Command) > MaxArgs {
		add("command", "%d arguments, more than the %d a job may have", len(s.Command), MaxArgs)
	}
	for i, a := range s.Command {
		if len(a) > MaxArgBytes {
			add("command", "argument %d is %d bytes, more than the %d a single argument may have (MAX_ARG_STRLEN, execve(2))", i+1, len(a), MaxArgBytes)
			break
		}
	}
	for _, a := range s.Command {
		total += len(a) + 1 + 8
	}
	if len(s.Env) > MaxEnv {
		add("env", "%d variables, more than the %d a job may have", len(s.Env), MaxEnv)
	}
	for _, k := range sortedKeys(s.Env) {
		n := len(k) + 1 + len(s.Env[k])
		if n > MaxArgBytes {
			add("env."+k, "%s=... is %d bytes, more than the %d a single variable may have (MAX_ARG_STRLEN, execve(2))", k, n, MaxArgBytes)
		}
		total += n + 1 + 8
	}
	if total > MaxArgvEnvBytes {
		add("command", "command and env take %d bytes as execve counts them (each string with its NUL, plus an 8-byte pointer), more than the %d a job may use (half of ARG_MAX, execve(2))", total, MaxArgvEnvBytes)
	}

	if len(s.Labels) > MaxLabels {
		add("labels", "%d labels, more than the %d a job may have", len(s.Labels), MaxLabels)
	}
	for _, k := range sortedKeys(s.Labels) {
		switch v := s.Labels[k]; {
		case len(k) > MaxLabelKeyBytes:
			add("labels", "label name %s... is %d bytes, more than %d", strconv.Quote(k[:32]), len(k), MaxLabelKeyBytes)
		case len(v) > MaxLabelValueBytes:
			add("labels."+k, "value is %d bytes, more than the %d a label may have", len(v), MaxLabelValueBytes)
		}
	}

	if len(s.Writable) > MaxWritable {
		add("writable", "%d paths, more than the %d a job may name", len(s.Writable), MaxWritable)
	}
	for _, f := range []struct {
		key   string
		paths []string
	}{{"cwd", []string{s.Cwd}}, {"workspace", []string{s.Workspace}}, {"writable", s.Writable}} {
		for _, p := range f.paths {
			if len(p) > MaxPathBytes {
				add(f.key, "path of %d bytes, more than %d (PATH_MAX)", len(p), MaxPathBytes)
				break
			}
		}
	}
	if len(s.Hooks) > MaxJobHooks {
		add("hooks", "%d hooks, more than the %d a job may ask for", len(s.Hooks), MaxJobHooks)
	}
	for _, h := range s.Hooks {
		if len(h) > MaxNameLen {
			add("hooks", "a hook name of %d bytes, more than %d", len(h), MaxNameLen)
			break
		}
	}
	return out
}

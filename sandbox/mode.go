package sandbox

import (
	"fmt"
	"strings"
)

// Mode says what a confined command may write. The zero value is not a
// valid mode; [NewPolicy] rejects it.
type Mode string

const (
	// ModeReadOnly lets the command read the whole host filesystem and
	// write nothing on it. It gets a private, empty tmpfs on /tmp (discarded
	// when it exits) and the standard device nodes; the workspace is visible
	// read-only.
	ModeReadOnly Mode = "read_only"
	// ModeWorkspaceWrite is ModeReadOnly plus the workspace and any extra
	// writable roots bound read-write at their own paths.
	ModeWorkspaceWrite Mode = "workspace_write"
	// ModeDangerFullAccess runs the command unconfined: [Confine] returns
	// the argv unchanged. It is the only unconfined path.
	ModeDangerFullAccess Mode = "danger_full_access"
)

// Modes returns every valid mode, in order of increasing access.
func Modes() []Mode {
	return []Mode{ModeReadOnly, ModeWorkspaceWrite, ModeDangerFullAccess}
}

// ParseMode returns the Mode spelled s. The error names the bad value and
// lists the valid ones.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes() {
		if string(m) == s {
			return m, nil
		}
	}
	names := make([]string, 0, 3)
	for _, m := range Modes() {
		names = append(names, string(m))
	}
	return "", fmt.Errorf("sandbox: unknown mode %q (valid: %s)", s, strings.Join(names, ", "))
}

// Confined reports whether m runs under bwrap (every mode except
// [ModeDangerFullAccess]).
func (m Mode) Confined() bool { return m == ModeReadOnly || m == ModeWorkspaceWrite }

// Grade is how much of the intended sandbox this host can build. See the
// package documentation for the exact bwrap arguments of each grade.
type Grade string

const (
	// GradeFull: a fresh /dev (--dev), a fresh /proc (--proc) and a private
	// pid namespace.
	GradeFull Grade = "full"
	// GradePartial: the host cannot mount a fresh /dev or /proc (typical in
	// unprivileged containers). Device nodes are bound one by one as
	// devices, /proc is an empty read-only tmpfs, the pid namespace is still
	// private.
	GradePartial Grade = "partial"
	// GradeUnusable: bwrap is missing or cannot build either base. Confined
	// modes refuse to run ([ErrUnusable]).
	GradeUnusable Grade = "unusable"
)

// Package layout holds tests of the module's shape: which package may
// import which (RATIONALE.md, "Layout"), and that the names several
// packages spell agree.
package layout_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/hooks"
	"paddock/jobspec"
	"paddock/queue"
	"paddock/sandbox"
)

const module = "paddock"

// listed is what `go list` says of one of the module's packages (tests
// left out): its direct imports and every package it needs, of paddock's.
type listed struct{ imports, deps []string }

func goList(t *testing.T) map[string]listed {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .Deps " "}}`, "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", out)
	ours := func(list string) []string {
		var out []string
		for _, p := range strings.Fields(list) {
			if strings.HasPrefix(p, module+"/") {
				out = append(out, p)
			}
		}
		return out
	}
	res := map[string]listed{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "|")
		res[f[0]] = listed{imports: ours(f[1]), deps: ours(f[2])}
	}
	return res
}

// TestImportNevers checks the package layering with `go list`: deps are
// every package a package needs (transitively), imports its direct ones.
func TestImportNevers(t *testing.T) {
	t.Parallel()
	deps, imports := map[string][]string{}, map[string][]string{}
	for pkg, l := range goList(t) {
		deps[pkg], imports[pkg] = l.deps, l.imports
	}
	under := func(p, dir string) bool { return p == module+"/"+dir || strings.HasPrefix(p, module+"/"+dir+"/") }
	internal := func(p string) bool { return under(p, "internal") }
	require.Contains(t, deps, module+"/queue/sqlite", "go list saw the module")

	// sandbox and hooks are libraries: nothing of paddock's outside
	// themselves (sandbox/launch is the sandbox's launcher).
	for _, lib := range []string{"sandbox", "hooks"} {
		for _, d := range deps[module+"/"+lib] {
			require.True(t, under(d, lib), "%s imports %s: nothing of paddock's outside itself", lib, d)
		}
	}
	// jobspec: none of queue, runner, hooks (nor cmd, inbox).
	for _, d := range deps[module+"/jobspec"] {
		require.False(t, under(d, "queue") || under(d, "runner") || under(d, "hooks") || under(d, "inbox") || under(d, "cmd"), "jobspec imports %s", d)
	}
	// queue: of paddock's packages, jobspec only.
	for _, d := range imports[module+"/queue"] {
		require.True(t, d == module+"/jobspec" || internal(d), "queue imports %s; it may import jobspec only", d)
	}
	// A store driver is imported only by cmd/ (and tests, which go list
	// leaves out here).
	for pkg, ims := range imports {
		if slices.Contains(ims, module+"/queue/sqlite") {
			require.True(t, under(pkg, "cmd"), "%s imports the SQLite driver; only cmd/ may", pkg)
		}
	}
	// runner: no driver, nothing of cmd/.
	for _, d := range deps[module+"/runner"] {
		require.False(t, under(d, "queue/sqlite") || under(d, "cmd"), "runner imports %s", d)
	}
	// Nothing imports a command.
	for pkg, ds := range deps {
		for _, d := range ds {
			require.False(t, under(d, "cmd") && !under(pkg, "cmd"), "%s imports %s", pkg, d)
		}
	}
}

// TestSpellingsAgree: the modes are spelled in sandbox (their owner) and
// in hooks (which imports nothing of paddock's); jobspec takes them from
// sandbox. The outcomes of a spawned job are spelled in sandbox and in
// queue (every attempt outcome). They must agree.
func TestSpellingsAgree(t *testing.T) {
	t.Parallel()
	var modes []string
	for _, m := range sandbox.Modes() {
		modes = append(modes, string(m))
	}
	require.Equal(t, modes, hooks.Modes(), "hooks.Modes and sandbox.Modes, in order of increasing access")
	require.Equal(t, modes, jobspec.Modes())
	for _, o := range []sandbox.Outcome{sandbox.OutcomeSucceeded, sandbox.OutcomeFailed, sandbox.OutcomeRunnerFailed} {
		require.Contains(t, queue.Outcomes(), string(o), "sandbox's outcome %q is an attempt outcome", o)
	}
	// Outcomes that end a job name the state they lead to.
	for _, o := range []string{queue.OutcomeSucceeded, queue.OutcomeFailed, queue.OutcomeDenied, queue.OutcomeCanceled} {
		require.Contains(t, queue.JobStates(), queue.JobState(o))
	}
}

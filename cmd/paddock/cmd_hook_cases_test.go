package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
)

// TestExampleHookCases runs the policy cases each example hook ships
// (examples/hooks/NAME/cases.toml) through the real binary, as a hook
// author would: every case must pass.
func TestExampleHookCases(t *testing.T) {
	t.Parallel()
	bin := e2etest.Paddock(t)
	state := t.TempDir()
	for name := range exampleHooks {
		t.Run(name, func(t *testing.T) {
			cases := filepath.Join("..", "..", "examples", "hooks", name, "cases.toml")
			cmd := exec.Command(bin, "--state-dir", state, "hook", "test", exampleWasm(t, name), "--cases", cases)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			require.NotContains(t, out.String(), "FAIL")
			m := regexp.MustCompile(`\n` + regexp.QuoteMeta(cases) + `: (\d+) of (\d+) cases passed\n$`).FindStringSubmatch(out.String())
			require.NotNil(t, m, out.String())
			require.Equal(t, m[2], m[1])
			require.Equal(t, m[1], strconv.Itoa(strings.Count(out.String(), "\npass ")))
		})
	}
}

// TestHookCasesReportFailures: a case whose expectation the hook does not
// meet fails (exit 1) with what differs; a failing hook fails a case that
// does not expect it; a case may expect a failure (a hostile input).
func TestHookCasesReportFailures(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "cases.toml")
	require.NoError(t, os.WriteFile(file, []byte(`
settings = { dry_run = ["rsync"] }

[[case]]
name = "right"
argv = ["rsync", "a", "b"]
decision = "adjust"
adjusted = { argv = ["rsync", "--dry-run", "a", "b"] }

[[case]]
name = "wrong field"
argv = ["rsync", "a", "b"]
decision = "adjust"
adjusted = { argv = ["rsync", "a", "b", "--dry-run"], mode = "read_only" }

[[case]]
name = "wrong reason"
argv = ["git", "log"]
decision = "adjust"
reason = "because"
`), 0o644))
	var out bytes.Buffer
	gopts := &GlobalOptions{StateDir: t.TempDir(), JSON: true}
	opts := HookTestOptions{Cases: file, Timeout: 5e9, MemoryMiB: 64, Mode: "workspace_write", Network: true}
	err := runHookCases(context.Background(), opts, gopts, exampleWasm(t, "tighten"), &out)
	var ec *exitCodeError
	require.ErrorAs(t, err, &ec)
	require.Equal(t, exitFailure, ec.code)

	var msgs []hookCaseMessage
	var sum hookCasesMessage
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4)
	for _, l := range lines[:3] {
		var m hookCaseMessage
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		msgs = append(msgs, m)
	}
	require.NoError(t, json.Unmarshal([]byte(lines[3]), &sum))
	require.Equal(t, hookCasesMessage{MessageType: "hook_cases", Hook: "tighten", File: file, Passed: 1, Failed: 2}, sum)
	require.True(t, msgs[0].Passed)
	require.Equal(t, 10, msgs[1].Line, "the line of its [[case]]")
	require.False(t, msgs[1].Passed)
	require.Equal(t, []string{`argv ["rsync" "--dry-run" "a" "b"], expected ["rsync" "a" "b" "--dry-run"]`, "mode workspace_write, expected read_only"}, msgs[1].Problems)
	require.False(t, msgs[2].Passed)
	require.Equal(t, []string{`reason "git log is not in git_write: read_only" does not contain "because"`}, msgs[2].Problems)

	// A hostile input the hook fails on: a case may expect the failure,
	// and one that does not fails.
	hostile := filepath.Join(t.TempDir(), "hostile.toml")
	require.NoError(t, os.WriteFile(hostile, []byte(`
[[case]]
name = "a request it cannot read"
argv = ["x"]
labels = { pad = "`+strings.Repeat("y", 1<<20)+`" }
decision = "deny"
error = "memory limit exceeded"

[[case]]
name = "unexpected failure"
argv = ["x"]
labels = { pad = "`+strings.Repeat("y", 1<<20)+`" }
decision = "deny"
`), 0o644))
	out.Reset()
	opts.Cases, opts.MemoryMiB = hostile, 4
	err = runHookCases(context.Background(), opts, gopts, denylistWasm(t), &out)
	require.ErrorAs(t, err, &ec)
	require.Contains(t, out.String(), `"case":"a request it cannot read","line":2,"passed":true`)
	require.Contains(t, out.String(), `"problems":["the hook failed: hooks: memory limit exceeded`)
}

// TestHookCasesFileErrors: a cases file that does not parse is a usage
// error naming the file, the line and the key.
func TestHookCasesFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, tc := range map[string]struct{ text, want string }{
		"unknown key": {"[[case]]\nargv = [\"x\"]\ndecison = \"deny\"\n", `:3: case 1: decison: unknown key (did you mean "decision"?)`},
		"unknown key, again": {"[[case]]\nargv = [\"x\"]\ndecison = \"deny\"\n[[case]]\nargv = [\"y\"]\n[[case]]\nargv = [\"z\"]\ndecison = \"deny\"\n",
			":3: case 1: decison: unknown key (did you mean \"decision\"?)\n" + "FILE:8: case 3: decison: unknown key"},
		"no decision":    {"[[case]]\nargv = [\"x\"]\n", `:1: case 1: decision: missing`},
		"bad decision":   {"\n[[case]]\nargv = [\"x\"]\ndecision = \"Allow\"\n", `:2: case 1: decision: "Allow" is not "allow", "adjust" or "deny"`},
		"no argv":        {"[[case]]\ndecision = \"allow\"\n", `:1: case 1: argv: missing`},
		"adjusted, deny": {"[[case]]\nargv = [\"x\"]\ndecision = \"deny\"\nadjusted = { mode = \"read_only\" }\n", `:1: case 1: adjusted: only with decision = "adjust"`},
		"no case":        {"settings = {}\n", `: no case: expected [[case]] tables`},
		"not toml":       {"[[case]\n", `:2: invalid TOML: `},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".toml")
			require.NoError(t, os.WriteFile(file, []byte(tc.text), 0o644))
			opts := HookTestOptions{Cases: file, Timeout: 5e9, MemoryMiB: 64}
			err := runHookCases(context.Background(), opts, &GlobalOptions{StateDir: dir}, denylistWasm(t), &bytes.Buffer{})
			var ue *usageError
			require.ErrorAs(t, err, &ue)
			require.ErrorContains(t, err, file+strings.ReplaceAll(tc.want, "FILE", file))
		})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// schedCLI runs the CLI in-process on one state directory.
type schedCLI struct {
	t             *testing.T
	state, config string
	dir           string
}

func setupSchedCLI(t *testing.T) *schedCLI {
	t.Helper()
	dir := t.TempDir()
	c := &schedCLI{t: t, state: filepath.Join(dir, "state"), config: filepath.Join(dir, "config.toml"), dir: dir}
	require.NoError(t, os.WriteFile(c.config, nil, 0o600))
	return c
}

func (c *schedCLI) run(args ...string) (string, error) {
	c.t.Helper()
	root := newRootCommand(&GlobalOptions{})
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	root.SetArgs(append([]string{"--state-dir", c.state, "--config", c.config}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestSchedulesCommands(t *testing.T) {
	t.Parallel()
	c := setupSchedCLI(t)
	file := filepath.Join(c.dir, "s.toml")
	require.NoError(t, os.WriteFile(file, []byte(`
[[job]]
name = "nightly"
command = "true"
schedule = "30 1 * * *"
timezone = "America/New_York"

[[job]]
name = "once"
command = "true"
`), 0o600))
	out, err := c.run("submit", file)
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(out, "\n"), "one id line, for the one-off job: %q", out)
	require.Contains(t, out, "\tonce\n")

	out, err = c.run("--json", "schedules")
	require.NoError(t, err)
	var row scheduleRow
	require.NoError(t, json.Unmarshal([]byte(out), &row))
	require.Equal(t, "schedule", row.MessageType)
	require.Equal(t, "nightly", row.Name)
	require.Equal(t, "America/New_York", row.Timezone)
	require.Equal(t, "skip", row.Overlap)
	require.Equal(t, "run_once", row.Missed)
	require.EqualValues(t, 3600, row.MissedGraceSeconds)

	out, err = c.run("--json", "schedules", "next", "nightly", "--count", "3", "--from", "2026-10-31T12:00:00-04:00")
	require.NoError(t, err)
	var next []string
	require.NoError(t, json.Unmarshal([]byte(out), &next))
	require.Equal(t, []string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00", "2026-11-03T01:30:00-05:00"}, next)
	out, err = c.run("schedules", "next", "nightly", "-n", "1", "--from", "2026-03-07T12:00:00-05:00")
	require.NoError(t, err)
	require.Equal(t, "2026-03-08T01:30:00-05:00\n", out)
	// An interval schedule runs through the repeated hour: no 75-minute gap.
	quarter := filepath.Join(c.dir, "q.toml")
	require.NoError(t, os.WriteFile(quarter, []byte("name = \"quarter\"\ncommand = \"true\"\nschedule = \"*/15 * * * *\"\ntimezone = \"America/New_York\"\n"), 0o600))
	_, err = c.run("submit", quarter)
	require.NoError(t, err)
	out, err = c.run("schedules", "next", "quarter", "-n", "8", "--from", "2026-11-01T05:00:00Z")
	require.NoError(t, err)
	require.Equal(t, `2026-11-01T01:15:00-04:00
2026-11-01T01:30:00-04:00
2026-11-01T01:45:00-04:00
2026-11-01T01:00:00-05:00
2026-11-01T01:15:00-05:00
2026-11-01T01:30:00-05:00
2026-11-01T01:45:00-05:00
2026-11-01T02:00:00-05:00
`, out)
	_, err = c.run("schedules", "rm", "quarter")
	require.NoError(t, err)

	out, err = c.run("schedules", "pause", "nightly")
	require.NoError(t, err)
	require.Equal(t, "nightly\tpaused\n", out)
	out, err = c.run("schedules")
	require.NoError(t, err)
	require.Regexp(t, `nightly\s+30 1 \* \* \*\s+America/New_York\s+paused`, out)
	out, err = c.run("schedules", "resume", "nightly")
	require.NoError(t, err)
	require.Contains(t, out, "nightly\tnext run ")

	// Resubmitting updates in place.
	_, err = c.run("submit", file)
	require.Error(t, err, "the one-off job's name is still held by its queued job")
	require.NoError(t, os.WriteFile(file, []byte("name = \"nightly\"\ncommand = \"true\"\nschedule = \"@hourly\"\n"), 0o600))
	_, err = c.run("submit", file)
	require.NoError(t, err)
	out, err = c.run("schedules")
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(out, "\n"), "a header and one schedule: %s", out)
	require.Contains(t, out, "@hourly")

	for _, args := range [][]string{
		{"schedules", "next", "nope"},
		{"schedules", "pause", "nope"},
		{"schedules", "rm", "nope"},
		{"schedules", "next", "nightly", "--count", "0"},
		{"schedules", "next", "nightly", "--from", "yesterday"},
	} {
		_, err := c.run(args...)
		var ue *usageError
		require.True(t, errors.As(err, &ue), "%v: %v", args, err)
	}
	out, err = c.run("schedules", "rm", "nightly")
	require.NoError(t, err)
	require.Equal(t, "nightly\tremoved\n", out)
	out, err = c.run("--json", "schedules")
	require.NoError(t, err)
	require.Empty(t, out)
}

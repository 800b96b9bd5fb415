package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
)

// listedTimes is a job as `paddock --json ls` prints it, with its times.
type listedTimes struct {
	Name     string  `json:"name"`
	State    string  `json:"state"`
	Group    string  `json:"group"`
	Created  string  `json:"created"`
	Started  *string `json:"started"`
	Finished *string `json:"finished"`
	Due      *string `json:"due"`
	Waiting  string  `json:"waiting"`
}

func listTimes(b *e2etest.Bundle) map[string]listedTimes {
	b.T.Helper()
	out, errOut, code := b.Run("--json", "ls", "--limit", "0")
	require.Equal(b.T, 0, code, errOut)
	m := map[string]listedTimes{}
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var j listedTimes
		require.NoError(b.T, dec.Decode(&j), out)
		m[j.Name] = j
	}
	return m
}

func parseNano(t *testing.T, s *string) time.Time {
	t.Helper()
	require.NotNil(t, s)
	require.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$`, *s, "RFC 3339 with nine digits of nanoseconds, UTC")
	tm, err := time.Parse(time.RFC3339Nano, *s)
	require.NoError(t, err)
	return tm
}

// TestE2EGroupLimitOneAtATime: three jobs of one group under a limit of 1
// and a worker with room for three run one at a time (their start and
// finish times, from ls --json, never overlap); while one runs, ls and
// show say why the others wait, and `paddock groups` counts them.
func TestE2EGroupLimitOneAtATime(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	ws := t.TempDir()
	b.Submit(b.WriteJob("repo.toml", fmt.Sprintf(`
[defaults]
workspace = %q
mode = "workspace_write"
group = "repo-x"

[[job]]
name = "r1"
command = "sleep 0.6"

[[job]]
name = "r2"
command = "sleep 0.6"

[[job]]
name = "r3"
command = "sleep 0.6"

[[job]]
name = "free"
group = "other"
command = "true"
`, ws)))
	out, errOut, code := b.Run("groups", "set", "repo-x", "1")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "repo-x\tlimit 1\trunning=0 queued=3")
	_, errOut, code = b.Run("groups", "set", "repo-x", "0")
	require.Equal(t, 2, code, "a limit of 0 is unset's job")
	require.Contains(t, errOut, "groups unset")

	b.StartWorker("--concurrency", "3")
	running := ""
	for deadline := time.Now().Add(30 * time.Second); running == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for n, j := range listTimes(b) {
			if j.State == "running" && j.Group == "repo-x" {
				running = n
			}
		}
	}
	require.NotEmpty(t, running, "a job of the group runs")
	out, _, code = b.Run("ls")
	require.Equal(t, 0, code)
	require.Contains(t, out, "waiting: group repo-x full (1/1)")
	out, _, code = b.Run("--json", "groups")
	require.Equal(t, 0, code)
	var g groupRow
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r groupRow
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		if r.Name == "repo-x" {
			g = r
		}
	}
	require.Equal(t, 1, g.Limit)
	require.LessOrEqual(t, g.Running, 1, "never two at once")

	type span struct{ start, end time.Time }
	var spans []span
	for _, n := range []string{"r1", "r2", "r3", "free"} {
		b.WaitState(n, 60*time.Second, "succeeded")
	}
	jobs := listTimes(b)
	for _, n := range []string{"r1", "r2", "r3"} {
		j := jobs[n]
		parseNano(t, &j.Created)
		spans = append(spans, span{parseNano(t, j.Started), parseNano(t, j.Finished)})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	for i := 1; i < len(spans); i++ {
		require.False(t, spans[i].start.Before(spans[i-1].end), "job %d started before the one before it finished: %v", i, spans)
	}
	out, errOut, code = b.Run("groups", "unset", "repo-x")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "repo-x\tunlimited")
	// Unsetting what has no limit (again, or a typo) says so.
	for _, name := range []string{"repo-x", "repo-y"} {
		_, errOut, code = b.Run("groups", "unset", name)
		require.Equal(t, 2, code, name)
		require.Contains(t, errOut, fmt.Sprintf("group %q has no limit to unset", name))
	}
	// Pausing a group nothing names works (for jobs to come) and says so.
	_, errOut, code = b.Run("pause", "--group", "repo-y")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "group repo-y has no queued or running job and no limit; paused anyway")
	_, errOut, code = b.Run("pause", "--group", "repo-y")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, errOut, "repo-y is paused now: it is named")
}

// TestE2EPauseResumeAndDelay: a paused queue claims nothing and
// `worker --drain` says so and exits 1; a paused group holds its jobs
// back; a delayed job waits for its due time, which ls shows.
func TestE2EPauseResumeAndDelay(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	// An empty --group (an unset $GROUP) is refused, not the whole queue.
	_, errOut, code := b.Run("pause", "--group", "")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--group: empty group name")
	_, errOut, code = b.Run("pause")
	require.Equal(t, 0, code, errOut)
	b.Submit(b.WriteJob("jobs.toml", `
[[job]]
name = "now"
mode = "read_only"
command = "true"

[[job]]
name = "later"
mode = "read_only"
command = "true"
delay = "3s"

[[job]]
name = "past"
mode = "read_only"
command = "true"
run_at = 2020-01-01T00:00:00Z

[[job]]
name = "held"
mode = "read_only"
group = "gpu"
command = "true"
`))
	out, _, code := b.Run("ls")
	require.Equal(t, 0, code)
	require.Contains(t, out, "waiting: queue paused")
	start := time.Now()
	_, errOut, code = b.Run("worker", "--drain")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "paused")
	require.Less(t, time.Since(start), 20*time.Second, "it does not wait for a resume")
	require.Equal(t, "queued", b.Show("now").State, "nothing ran")

	_, errOut, code = b.Run("pause", "--group", "gpu")
	require.Equal(t, 0, code, errOut)
	_, errOut, code = b.Run("resume")
	require.Equal(t, 0, code, errOut)
	jobs := listTimes(b)
	require.Equal(t, "group gpu paused", jobs["held"].Waiting)
	due := parseNano(t, jobs["later"].Due)
	later := jobs["later"]
	created := parseNano(t, &later.Created)
	require.Equal(t, 3*time.Second, due.Sub(created), "due = enqueue + delay")
	require.Nil(t, jobs["past"].Due, "a run_at in the past is due at once")

	// The group is paused: drain says so once the rest is done.
	_, errOut, code = b.Run("worker", "--drain")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "paused group (gpu): run `paddock resume --group gpu`")
	jobs = listTimes(b)
	require.Equal(t, "succeeded", jobs["later"].State)
	require.False(t, parseNano(t, jobs["later"].Started).Before(due), "not started before it was due")
	_, errOut, code = b.Run("resume", "--group", "gpu")
	require.Equal(t, 0, code, errOut)
	_, errOut, code = b.Run("worker", "--drain")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "succeeded", b.Show("held").State)
	_, errOut, code = b.Run("pause", "--group", "bad name")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "group")

	// paddock run on a paused queue says why it waits, and runs on resume.
	_, errOut, code = b.Run("pause")
	require.Equal(t, 0, code, errOut)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := b.Cmd(ctx, "run", b.WriteJob("one.toml", "name = \"one\"\nmode = \"read_only\"\ncommand = \"echo ran\"\n"))
	var stdout, stderr syncBuffer
	run.Stdout, run.Stderr = &stdout, &stderr
	require.NoError(t, run.Start())
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(stderr.String(), "waiting: queue paused"); time.Sleep(50 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "run says why it waits: %s", stderr.String())
	}
	_, errOut, code = b.Run("resume")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, run.Wait(), stderr.String())
	require.Equal(t, "ran\n", stdout.String())
	require.Equal(t, 1, strings.Count(stderr.String(), "waiting: queue paused"), "said once")
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestE2ESchedulesRunAndJitter: `schedules run` enqueues an instance now
// (recorded as manual) and refuses a second while it waits (overlap
// skip, exit 1); jitter shows in `schedules --json`; show prints the job
// file only with --source.
func TestE2ESchedulesRunAndJitter(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	file := b.WriteJob("sched.toml", `
name = "yearly"
schedule = "0 0 1 1 *"
jitter = "5m"
mode = "read_only"
command = "echo manual"
`)
	_, errOut, code := b.Run("submit", file)
	require.Equal(t, 0, code, errOut)
	out, errOut, code := b.Run("--json", "schedules", "run", "yearly")
	require.Equal(t, 0, code, errOut)
	var v scheduleRunView
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, "manual", v.Decision)
	require.NotEmpty(t, v.JobID)
	require.True(t, strings.HasPrefix(v.JobName, "yearly-"), v.JobName)

	out, _, code = b.Run("schedules", "run", "yearly")
	require.Equal(t, 1, code, "overlap = skip: the first instance still waits")
	require.Contains(t, out, "still queued or running")
	_, _, code = b.Run("schedules", "run", "nope")
	require.Equal(t, 2, code)
	kinds := []string{}
	for _, d := range decisions(b, "yearly") {
		kinds = append(kinds, d.Decision)
	}
	require.Equal(t, []string{"skipped_overlap", "manual"}, kinds)

	out, _, code = b.Run("--json", "schedules")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"jitter_seconds":300`)

	_, errOut, code = b.Run("worker", "--drain")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "succeeded", b.Show(v.JobID).State)
	out, _, code = b.Run("show", v.JobID)
	require.Equal(t, 0, code)
	require.NotContains(t, out, `schedule = "0 0 1 1 *"`, "show leaves the job file alone")
	out, _, code = b.Run("show", "--source", v.JobID)
	require.Equal(t, 0, code)
	text, err := os.ReadFile(file)
	require.NoError(t, err)
	require.Equal(t, string(text), out)
}

// TestE2EDrainSaysItWaits: a drain with a delayed job waits for it, and
// says once that queued jobs cannot start yet instead of waiting silently.
func TestE2EDrainSaysItWaits(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, "")
	b.Submit(b.WriteJob("later.toml", "name = \"later\"\nmode = \"read_only\"\ncommand = \"true\"\ndelay = \"1h\"\n"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cmd := b.Cmd(ctx, "worker", "--drain")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	require.Error(t, err, "the drain is still waiting for the delayed job after 3 s")
	require.Equal(t, 1, strings.Count(stderr.String(), "draining: waiting for queued jobs that cannot start yet"), stderr.String())
}

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
)

// fileSHA256 is the hex sha256 of the file at path.
func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// setPolicy is b.SetPolicy.
func setPolicy(t *testing.T, b *e2etest.Bundle, text string) string {
	t.Helper()
	return b.SetPolicy(text)
}

// allowUnconfined sets a policy that lets jobs run danger_full_access:
// for tests of unconfined jobs.
func allowUnconfined(t *testing.T, b *e2etest.Bundle) {
	t.Helper()
	setPolicy(t, b, "max_mode = \"danger_full_access\"\n")
}

// A fresh queue enforces the defaults, and says so.
func TestE2EPolicyShowDefaults(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	out, errOut, code := b.Run("policy", "show")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "none set: this queue enforces the defaults")
	require.Contains(t, out, "max_mode  workspace_write")
	require.Contains(t, out, "~/.ssh")
	out, _, code = b.Run("--json", "policy", "show")
	require.Equal(t, 0, code)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Equal(t, "policy", v["message_type"])
	require.Equal(t, false, v["set"])
	require.Equal(t, "workspace_write", v["max_mode"])
	require.Equal(t, false, v["allow_network"])
}

// A policy that does not load is refused, naming file, line and key;
// one whose hook gives no sha256 too.
func TestE2EPolicySetRefusesBadFiles(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	for name, tc := range map[string]struct{ text, want string }{
		"unknown key": {"max_mod = \"read_only\"\n", `-key.toml:1: unknown key "max_mod"`},
		"bad mode":    {"\nmax_mode = \"everything\"\n", "-mode.toml:2: max_mode:"},
		"no sha256":   {"[[hook]]\nname = \"deny\"\npath = \"/nonexistent.wasm\"\n", "sha256: required in a policy"},
		"empty":       {"\n \n", "-empty.toml: the file is empty: write at least one key"},
	} {
		p := filepath.Join(b.Dir, "bad-"+strings.ReplaceAll(name, " ", "-")+".toml")
		require.NoError(t, os.WriteFile(p, []byte(tc.text), 0o600))
		_, errOut, code := b.Run("policy", "set", p)
		require.Equal(t, 2, code, name)
		require.Contains(t, errOut, tc.want, name)
	}
	out, _, _ := b.Run("policy", "show")
	require.Contains(t, out, "none set", "nothing was stored")
}

// Two workers on one state directory, one started with another chain in
// its config: that one refuses to run (exit 2, saying which hook and how
// to fix it) and no job runs under it; the other runs every job under the
// queue's chain. Each attempt records the policy's digest.
func TestE2EPolicyOddWorkerRefuses(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	wasm := denylistWasm(t)
	sum := fileSHA256(t, wasm)
	digest := setPolicy(t, b, fmt.Sprintf(`
[[hook]]
name = "deny-rm"
path = %q
sha256 = %q
settings = { deny = ["rm"] }
`, wasm, sum))

	odd := filepath.Join(b.Dir, "odd.toml")
	require.NoError(t, os.WriteFile(odd, []byte(e2etest.DefaultConfig+fmt.Sprintf(`
[[hook]]
name = "allow-all"
path = %q
sha256 = %q
settings = { deny = [] }
`, wasm, sum)), 0o600))

	ws := t.TempDir()
	var jobs strings.Builder
	fmt.Fprintf(&jobs, "[defaults]\nworkspace = %q\n", ws)
	for i := range 10 {
		fmt.Fprintf(&jobs, "[[job]]\nname = \"rm-%d\"\ncommand = [\"rm\", \"-f\", \"nothing-%d\"]\n", i, i)
	}
	ids := b.Submit(b.WriteJob("rm.toml", jobs.String()))
	require.Len(t, ids, 10)

	// submit and check with the odd config refuse, each saying what it
	// did not do.
	for cmd, refused := range map[string]string{"submit": "nothing was enqueued: ", "check": "nothing was checked: "} {
		_, errOut, code := b.Run("--config", odd, cmd, b.WriteJob("one.toml", "command = [\"true\"]\n"))
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, "paddock: "+refused+"runner: this process does not match the queue's policy", cmd)
	}

	// The odd worker refuses before it claims anything.
	out, errOut, code := b.Run("--config", odd, "worker", "--drain")
	require.Equal(t, 2, code, out+errOut)
	require.Contains(t, errOut, "paddock: not running the queue's jobs: ")
	require.Contains(t, errOut, `"allow-all"`)
	require.Contains(t, errOut, `"deny-rm"`)
	require.Contains(t, errOut, "remove the [[hook]] tables")
	for _, l := range b.List() {
		require.Equal(t, "queued", l.State, "no job ran under the odd worker")
	}

	// A worker whose config names no hook runs the queue's chain.
	b.StartWorker()
	for _, id := range ids {
		j := b.WaitState(id, 2*time.Minute, "denied", "succeeded", "failed")
		require.Equal(t, "denied", j.State, id)
		require.Equal(t, digest, j.Attempts[0].PolicySHA256)
	}
}

// A module whose bytes no longer match the policy's digest stops every
// process from running the queue's jobs.
func TestE2EPolicyModuleBytesMustMatch(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	wasm := filepath.Join(b.Dir, "hook.wasm")
	data, err := os.ReadFile(denylistWasm(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(wasm, data, 0o600))
	setPolicy(t, b, fmt.Sprintf("[[hook]]\nname = \"deny-rm\"\npath = %q\nsha256 = %q\nsettings = { deny = [\"rm\"] }\n", wasm, fileSHA256(t, wasm)))
	require.NoError(t, os.WriteFile(wasm, append(data, 0), 0o600)) // a byte more
	job := b.WriteJob("ok.toml", fmt.Sprintf("command = [\"true\"]\nworkspace = %q\n", t.TempDir()))
	_, errOut, code := b.Run("run", job)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "deny-rm")
	require.Contains(t, errOut, "sha256")
	_, errOut, code = b.Run("worker", "--drain")
	require.Equal(t, 2, code, errOut)
}

// paddock run with no hooks in its config runs under the queue's chain.
func TestE2EPolicyRunUsesTheQueuesChain(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	wasm := denylistWasm(t)
	setPolicy(t, b, fmt.Sprintf("[[hook]]\nname = \"deny-rm\"\npath = %q\nsha256 = %q\nsettings = { deny = [\"rm\"] }\n", wasm, fileSHA256(t, wasm)))
	job := b.WriteJob("rm.toml", fmt.Sprintf("name = \"rm\"\ncommand = [\"rm\", \"-f\", \"x\"]\nworkspace = %q\n", t.TempDir()))
	_, errOut, code := b.Run("run", job)
	require.Equal(t, exitDenied, code, errOut)
	require.Equal(t, "denied", b.Show("rm").State)
}

// Each ceiling refuses a job at submit, at the inbox and at run time,
// naming the file, the line, the key and the ceiling; check reports it
// as refused_by_policy (exit 1) before any hook runs.
func TestE2EPolicyCeilings(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	root := t.TempDir()
	inside := filepath.Join(root, "ws")
	require.NoError(t, os.Mkdir(inside, 0o755))
	outside := t.TempDir()
	setPolicy(t, b, fmt.Sprintf("max_mode = \"workspace_write\"\nallow_network = false\nworkspace_roots = [%q]\n", root))

	cases := []struct {
		name, text, key, ceiling string
		line                     int
	}{
		{"full", fmt.Sprintf("command = [\"true\"]\nworkspace = %q\nmode = \"danger_full_access\"\n", inside), "mode", "max_mode", 3},
		{"net", fmt.Sprintf("command = [\"true\"]\nworkspace = %q\n\nnetwork = true\n", inside), "network", "allow_network", 4},
		{"sock", fmt.Sprintf("command = [\"true\"]\nworkspace = %q\nunix_sockets = true\n", inside), "unix_sockets", "unix_sockets", 3},
		{"ws", fmt.Sprintf("command = [\"true\"]\nworkspace = %q\n", outside), "workspace", "workspace_roots", 2},
		{"writable", fmt.Sprintf("command = [\"true\"]\nworkspace = %q\nwritable = [%q]\n", inside, outside), "writable", "workspace_roots", 3},
	}
	for _, tc := range cases {
		want := fmt.Sprintf("%s.toml:%d: %s: refused by policy (%s)", tc.name, tc.line, tc.key, tc.ceiling)
		job := b.WriteJob(tc.name+".toml", tc.text)

		_, errOut, code := b.Run("submit", job)
		require.Equal(t, 2, code, tc.name)
		require.Contains(t, errOut, want, "submit")

		_, errOut, code = b.Run("run", job)
		require.Equal(t, 2, code, tc.name)
		require.Contains(t, errOut, want, "run")

		out, _, code := b.Run("check", job)
		require.Equal(t, 1, code, tc.name)
		require.Contains(t, out, "refused_by_policy", "check")
		require.Contains(t, out, want, "check")
	}

	// The inbox: each file is refused and moved aside with the reason.
	inbox := filepath.Join(b.State, "inbox")
	require.NoError(t, os.MkdirAll(inbox, 0o700))
	for _, tc := range cases {
		require.NoError(t, os.WriteFile(filepath.Join(inbox, tc.name+".toml"), []byte(tc.text), 0o600))
	}
	b.StartWorker()
	for _, tc := range cases {
		want := fmt.Sprintf("%s.toml:%d: %s: refused by policy (%s)", tc.name, tc.line, tc.key, tc.ceiling)
		require.Eventually(t, func() bool {
			log, _ := os.ReadFile(filepath.Join(b.Dir, "worker.log"))
			return strings.Contains(string(log), want)
		}, time.Minute, 50*time.Millisecond, "inbox refuses %s", tc.name)
	}
	require.Empty(t, b.List(), "nothing was enqueued")
}

// At run time: a job enqueued before the policy narrowed is refused when
// claimed, before its hooks, and recorded as denied with the ceiling and
// the job file and the line where the job starts.
func TestE2EPolicyCeilingAtRunTime(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	ws := t.TempDir()
	ids := b.Submit(b.WriteJob("w.toml", fmt.Sprintf("name = \"w\"\ncommand = [\"touch\", \"x\"]\nmode = \"workspace_write\"\nworkspace = %q\n", ws)))
	digest := setPolicy(t, b, "max_mode = \"read_only\"\n")
	b.StartWorker()
	j := b.WaitState(ids[0], time.Minute, "denied", "succeeded", "failed")
	require.Equal(t, "denied", j.State)
	require.Contains(t, j.Reason, `w.toml:1: job "w": mode: refused by policy (max_mode)`)
	require.Equal(t, digest, j.Attempts[0].PolicySHA256)
	require.NoFileExists(t, filepath.Join(ws, "x"))
}

// A worker that loaded one policy claims nothing once another is set: it
// stops with exit 2, saying to restart it, and the job waits for a worker
// under the new policy.
func TestE2EPolicyChangeStopsOldWorkers(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	setPolicy(t, b, "max_mode = \"workspace_write\"\n")
	w := b.StartWorker()
	require.Eventually(t, func() bool {
		log, _ := os.ReadFile(filepath.Join(b.Dir, "worker.log"))
		return strings.Contains(string(log), "policy")
	}, time.Minute, 20*time.Millisecond, "the worker started")
	setPolicy(t, b, "max_mode = \"read_only\"\n")
	ids := b.Submit(b.WriteJob("ro.toml", fmt.Sprintf("name = \"ro\"\nmode = \"read_only\"\nworkspace = %q\ncommand = [\"true\"]\n", t.TempDir())))
	err := w.Wait()
	require.Error(t, err)
	require.Equal(t, 2, w.ProcessState.ExitCode())
	log, _ := os.ReadFile(filepath.Join(b.Dir, "worker.log"))
	require.Contains(t, string(log), "restart the worker")
	require.Equal(t, "queued", b.Show(ids[0]).State, "nothing ran under the old policy")

	b.StartWorker()
	require.Equal(t, "succeeded", b.WaitState(ids[0], time.Minute, "succeeded", "failed", "denied").State)
}

// TestE2EPolicySetLoadsTheChain: policy set loads the chain as a worker
// would, so a module that is not WebAssembly, one that exports no hook
// ABI, or settings the hook refuses are refused there (exit 2), and the
// queue keeps the policy it had.
func TestE2EPolicySetLoadsTheChain(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	dir := t.TempDir()
	notWasm := filepath.Join(dir, "nw.wasm")
	require.NoError(t, os.WriteFile(notWasm, []byte("not wasm at all\n"), 0o644))
	empty := filepath.Join(dir, "empty.wasm")
	require.NoError(t, os.WriteFile(empty, []byte("\x00asm\x01\x00\x00\x00"), 0o644))
	deny := denylistWasm(t)
	for _, c := range []struct {
		path, settings, want string
	}{
		{notWasm, "", "invalid magic number"},
		{empty, "", "exports neither"},
		{deny, `settings = { deny = "curl" }` + "\n", `p.toml:5: hook "h": settings refused: settings: deny: expected a list of program names, got a string`},
	} {
		pol := filepath.Join(dir, "p.toml")
		require.NoError(t, os.WriteFile(pol, []byte(fmt.Sprintf("[[hook]]\nname = \"h\"\npath = %q\nsha256 = %q\n%s", c.path, fileSHA256(t, c.path), c.settings)), 0o644))
		_, errOut, code := b.Run("policy", "set", pol)
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, c.want)
	}
	out, _, code := b.Run("--json", "policy", "show")
	require.Equal(t, 0, code)
	require.Contains(t, out, `"set":false`, "no policy was stored")
}

// TestE2EConfigSettingsRefusedAtLine: settings a config's hook refuses
// stop check and the worker (exit 2) with the config file and the line of
// the hook's settings key, not a second copy of the file's name.
func TestE2EConfigSettingsRefusedAtLine(t *testing.T) {
	t.Parallel()
	cfg := fmt.Sprintf("[[hook]]\nname = \"deny\"\npath = %q\n\nsettings = { denny = [\"curl\"] }\n", denylistWasm(t))
	b := e2etest.Setup(t, cfg)
	job := b.WriteJob("ok.toml", "command = \"true\"\n")
	want := "paddock: " + b.Config + `:5: hook "deny": settings refused: settings: unknown key "denny" (this hook takes deny and strict)` + "\n"
	for _, args := range [][]string{{"check", job}, {"worker", "--drain"}} {
		_, errOut, code := b.Run(args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		// The worker's log lines (the queue it made) aside, the error
		// alone.
		var rest strings.Builder
		for _, l := range strings.SplitAfter(errOut, "\n") {
			if !strings.HasPrefix(l, "time=") {
				rest.WriteString(l)
			}
		}
		require.Equal(t, want, rest.String(), "%v", args)
	}
}

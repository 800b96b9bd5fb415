package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	examplesOnce sync.Once
	examplesDir  string
	examplesErr  error
)

// exampleHooks are the example hooks and how they are built, as the
// Makefile builds them.
var exampleHooks = map[string][]string{
	"denylist": nil, "minimal": nil,
	"tighten": {"-buildmode=c-shared"}, "minimal-reactor": {"-buildmode=c-shared"},
}

// exampleWasm returns examples/hooks/NAME built, building all of them once
// per test binary.
func exampleWasm(t *testing.T, name string) string {
	t.Helper()
	examplesOnce.Do(func() {
		if examplesDir, examplesErr = os.MkdirTemp("", "paddock-cmd-hook-"); examplesErr != nil {
			return
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for h, args := range exampleHooks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				args := append(append([]string{"build"}, args...), "-o", filepath.Join(examplesDir, h+".wasm"), "../../examples/hooks/"+h)
				cmd := exec.Command("go", args...)
				cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
				if out, err := cmd.CombinedOutput(); err != nil {
					mu.Lock()
					examplesErr = errors.New(string(out))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	})
	require.NoError(t, examplesErr)
	return filepath.Join(examplesDir, name+".wasm")
}

// denylistWasm is exampleWasm(t, "denylist").
func denylistWasm(t *testing.T) string { return exampleWasm(t, "denylist") }

func hookTest(t *testing.T, opts HookTestOptions, stdin string, args ...string) (map[string]any, error) {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 5e9
	}
	if opts.MemoryMiB == 0 {
		opts.MemoryMiB = 64
	}
	if opts.Mode == "" {
		opts.Mode = "workspace_write"
	}
	var out bytes.Buffer
	gopts := &GlobalOptions{StateDir: t.TempDir(), JSON: true}
	err := runHookTest(context.Background(), opts, gopts, args[0], args[1:], strings.NewReader(stdin), &out)
	if out.Len() == 0 {
		return nil, err
	}
	var msg map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &msg))
	require.Equal(t, "hook_decision", msg["message_type"])
	return msg, err
}

func TestHookTestAllowDeny(t *testing.T) {
	t.Parallel()
	wasm := denylistWasm(t)
	opts := HookTestOptions{Settings: `{"deny":["curl"]}`}

	msg, err := hookTest(t, opts, "", wasm, "echo", "curl")
	require.NoError(t, err)
	require.Equal(t, "allow", msg["decision"])
	require.Equal(t, "denylist", msg["hook"])
	require.Equal(t, "command", msg["abi"])

	msg, err = hookTest(t, opts, "", wasm, "nice", "-n", "5", "/usr/bin/curl", "x")
	var ec *exitCodeError
	require.ErrorAs(t, err, &ec)
	require.Equal(t, 1, ec.code)
	require.Equal(t, "deny", msg["decision"])
	require.Equal(t, `program "curl" is on the deny list via nice`, msg["reason"])
}

func TestHookTestSettingsFileAndRequest(t *testing.T) {
	t.Parallel()
	wasm := denylistWasm(t)
	settings := filepath.Join(t.TempDir(), "s.json")
	require.NoError(t, os.WriteFile(settings, []byte(`{"deny":["wget"]}`), 0o644))
	req := `{"version":1,"hook":{"name":"mine","settings":{"deny":["rm"]}},"job":{"argv":["sh","-c","wget x"]},"sandbox":{"grade":"full","executable":"/usr/bin/bwrap","argv":[]}}`

	// The request's settings deny rm only: allowed.
	msg, err := hookTest(t, HookTestOptions{Request: "-"}, req, wasm)
	require.NoError(t, err)
	require.Equal(t, "allow", msg["decision"])
	require.Equal(t, "mine", msg["hook"])

	// --settings @FILE overrides them.
	msg, err = hookTest(t, HookTestOptions{Request: "-", Settings: "@" + settings}, req, wasm)
	require.Error(t, err)
	require.Equal(t, "deny", msg["decision"])
}

func TestHookTestUsageErrors(t *testing.T) {
	t.Parallel()
	wasm := denylistWasm(t)
	for name, tc := range map[string]struct {
		opts HookTestOptions
		args []string
		want string
	}{
		"no argv":        {args: []string{wasm}, want: "give --request FILE or the job's argv"},
		"both":           {opts: HookTestOptions{Request: "-"}, args: []string{wasm, "ls"}, want: "not both"},
		"bad settings":   {opts: HookTestOptions{Settings: "[1]"}, args: []string{wasm, "ls"}, want: "--settings"},
		"missing module": {args: []string{filepath.Join(t.TempDir(), "x.wasm"), "ls"}, want: "cannot load module"},
		"not wasm":       {args: []string{"cmd_hook.go", "ls"}, want: "cannot load module"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := hookTest(t, tc.opts, "", tc.args...)
			var ue *usageError
			require.ErrorAs(t, err, &ue)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestHookTestExitCodes(t *testing.T) {
	wasm := denylistWasm(t)
	state := t.TempDir()
	require.Equal(t, exitFailure, run(context.Background(), []string{"--state-dir", state, "hook", "test", wasm, "--settings", `{"deny":["curl"]}`, "--", "curl"}))
	require.Equal(t, exitOK, run(context.Background(), []string{"--state-dir", state, "hook", "test", wasm, "--", "ls"}))
	require.Equal(t, exitUsage, run(context.Background(), []string{"--state-dir", state, "hook", "test", wasm}))
	require.Equal(t, exitUsage, run(context.Background(), []string{"--state-dir", state, "hook", "test", "a.wasm", "b.wasm", "--", "ls"}))
	entries, err := os.ReadDir(filepath.Join(state, "cache", "wazero"))
	require.NoError(t, err)
	require.NotEmpty(t, entries, "compilation cache under <state-dir>/cache/wazero")
}

// An adjusted job is printed as hooks see it: empty collections are []
// and {}, never null (examples/hooks/README.md).
func TestHookTestAdjustedJobHasNoNulls(t *testing.T) {
	t.Parallel()
	msg, err := hookTest(t, HookTestOptions{}, "", exampleWasm(t, "tighten"), "git", "log")
	require.NoError(t, err)
	require.Equal(t, "adjust", msg["decision"])
	job, ok := msg["job"].(map[string]any)
	require.True(t, ok, "%v", msg)
	for _, k := range []string{"argv", "env", "writable", "protect", "hide", "labels"} {
		require.Contains(t, job, k)
		require.NotNil(t, job[k], "%s is null", k)
	}
}

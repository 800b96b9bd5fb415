package hooks

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/testenv"
)

// Test modules: built from Go sources with GOOS=wasip1 GOARCH=wasm the first
// time a test needs one (all at once, two builds at a time), once per test
// binary, into a temporary directory, with the hand-written modules of
// testdata/wat (assembled by wat2wasm, from Debian's wabt, which `make test`
// installs). Plain `go test ./hooks/` is enough.
var testModules = map[string]struct {
	dir  string
	args []string
}{
	"denylist":        {"../examples/hooks/denylist", nil},
	"minimal":         {"../examples/hooks/minimal", nil},
	"tighten":         {"../examples/hooks/tighten", []string{"-buildmode=c-shared"}},
	"minimal-reactor": {"../examples/hooks/minimal-reactor", []string{"-buildmode=c-shared"}},
	"hostile":         {"./testdata/hostile", nil},
	"hostile-reactor": {"./testdata/hostile", []string{"-tags=reactor", "-buildmode=c-shared"}},
	"noabi":           {"./testdata/noabi", []string{"-buildmode=c-shared"}},
}

// watDir holds the hand-written modules; wasmPath(t, "wat/NAME") is
// testdata/wat/NAME.wat assembled.
const watDir = "testdata/wat"

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// trapWasm is a hand-assembled command module (not from Go) whose _start is
// `unreachable`: a trap from a non-Go toolchain.
var trapWasm = []byte{
	0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
	0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type section: () -> ()
	0x03, 0x02, 0x01, 0x00, // function section: func 0 has type 0
	0x07, 0x0a, 0x01, 0x06, '_', 's', 't', 'a', 'r', 't', 0x00, 0x00, // export "_start" = func 0
	0x0a, 0x05, 0x01, 0x03, 0x00, 0x00, 0x0b, // code: no locals, unreachable, end
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func buildModules() {
	buildDir, buildErr = os.MkdirTemp("", "paddock-hooks-test-")
	if buildErr != nil {
		return
	}
	if buildErr = os.WriteFile(filepath.Join(buildDir, "trap.wasm"), trapWasm, 0o644); buildErr != nil {
		return
	}
	sem := make(chan struct{}, max(2, runtime.NumCPU()))
	var wg sync.WaitGroup
	var mu sync.Mutex
	for name, mod := range testModules {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			args := append([]string{"build"}, mod.args...)
			args = append(args, "-o", filepath.Join(buildDir, name+".wasm"), mod.dir)
			cmd := exec.Command("go", args...)
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
			if out, err := cmd.CombinedOutput(); err != nil {
				mu.Lock()
				buildErr = fmt.Errorf("go %v: %v\n%s", args, err, out)
				mu.Unlock()
			}
		}()
	}
	if wat, err := exec.LookPath("wat2wasm"); err == nil {
		watFiles, _ := filepath.Glob(filepath.Join(watDir, "*.wat"))
		if err := os.Mkdir(filepath.Join(buildDir, "wat"), 0o755); err != nil {
			buildErr = err
			return
		}
		for _, f := range watFiles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				out := filepath.Join(buildDir, "wat", strings.TrimSuffix(filepath.Base(f), ".wat")+".wasm")
				if msg, err := exec.Command(wat, f, "-o", out).CombinedOutput(); err != nil {
					mu.Lock()
					buildErr = fmt.Errorf("wat2wasm %s: %v\n%s", f, err, msg)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
}

// requireWat2wasm skips the test when wat2wasm is missing (`make test`
// installs it), or fails it under PADDOCK_REQUIRE_BWRAP=1, which CI sets:
// there a hostile-module test must not be skipped.
func requireWat2wasm(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("wat2wasm"); err != nil {
		testenv.Unavailable(tb, "wat2wasm is missing: install Debian's wabt (make test does)")
	}
}

// wasmPath returns the path of the test module name, building all of them
// on first use.
func wasmPath(tb testing.TB, name string) string {
	tb.Helper()
	if strings.HasPrefix(name, "wat/") {
		requireWat2wasm(tb)
	}
	buildOnce.Do(buildModules)
	require.NoError(tb, buildErr)
	return filepath.Join(buildDir, name+".wasm")
}

// newTestChain builds a chain and closes it at the end of the test.
func newTestChain(tb testing.TB, o ChainOptions) *Chain {
	tb.Helper()
	c, err := NewChain(context.Background(), o)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, c.Close(context.Background())) })
	return c
}

// testJob is a typical job; labels pick the hostile module's behaviour.
func testJob(do string, argv ...string) Job {
	if len(argv) == 0 {
		argv = []string{"echo", "hello"}
	}
	return Job{
		ID: "j1", Name: "test", Argv: argv, Cwd: "/work", Workspace: "/work",
		Mode: "workspace_write", Network: true, Attempt: 1, Labels: map[string]string{"do": do},
	}
}

func decide(tb testing.TB, c *Chain, j Job, extra ...string) (Result, time.Duration) {
	tb.Helper()
	start := time.Now()
	res, err := c.Decide(context.Background(), DecideParams{Job: j, Extra: extra})
	require.NoError(tb, err)
	return res, time.Since(start)
}

package e2etest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/jobspec"
)

// The bad-input suite takes its inputs from the other packages' tests, so
// that a case added there is exercised here too: the malformed job files
// of jobspec's TestParseErrors table and fuzz corpus, and the hostile hook
// behaviours of hooks' TestHostileModules table, built from
// hooks/testdata.

// malformedJobFiles returns name → source of every malformed job file in
// jobspec's tests: the TestParseErrors table (read from its Go source) and
// the FuzzParse seed corpus entries that Parse refuses.
func malformedJobFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../jobspec/spec_test.go", nil, 0)
	require.NoError(t, err)
	var fn *ast.FuncDecl
	for _, d := range f.Decls {
		if d, ok := d.(*ast.FuncDecl); ok && d.Name.Name == "TestParseErrors" {
			fn = d
		}
	}
	require.NotNil(t, fn, "jobspec/spec_test.go has no TestParseErrors")
	// Local helpers of the form name := func(p string) string { return expr }.
	helpers := map[string]*ast.FuncLit{}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == 1 && len(as.Rhs) == 1 {
			if lit, ok := as.Rhs[0].(*ast.FuncLit); ok {
				helpers[as.Lhs[0].(*ast.Ident).Name] = lit
			}
		}
		return true
	})
	var eval func(e ast.Expr, env map[string]string) string
	eval = func(e ast.Expr, env map[string]string) string {
		switch e := e.(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(e.Value)
			require.NoError(t, err)
			return s
		case *ast.BinaryExpr:
			require.Equal(t, token.ADD, e.Op, "at %s", fset.Position(e.Pos()))
			return eval(e.X, env) + eval(e.Y, env)
		case *ast.ParenExpr:
			return eval(e.X, env)
		case *ast.Ident:
			v, ok := env[e.Name]
			require.True(t, ok, "unknown identifier %s at %s", e.Name, fset.Position(e.Pos()))
			return v
		case *ast.CallExpr:
			id, ok := e.Fun.(*ast.Ident)
			require.True(t, ok, "call at %s", fset.Position(e.Pos()))
			lit := helpers[id.Name]
			require.NotNil(t, lit, "unknown helper %s at %s", id.Name, fset.Position(e.Pos()))
			params := lit.Type.Params.List
			require.Len(t, params, 1)
			require.Len(t, e.Args, 1)
			require.Len(t, lit.Body.List, 1)
			ret := lit.Body.List[0].(*ast.ReturnStmt)
			return eval(ret.Results[0], map[string]string{params[0].Names[0].Name: eval(e.Args[0], env)})
		}
		t.Fatalf("cannot evaluate %T at %s", e, fset.Position(e.Pos()))
		return ""
	}
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		cl, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		if _, ok := cl.Type.(*ast.ArrayType); !ok {
			return true
		}
		for _, el := range cl.Elts {
			row, ok := el.(*ast.CompositeLit)
			if !ok || len(row.Elts) < 2 {
				continue
			}
			out["table-"+eval(row.Elts[0], nil)] = eval(row.Elts[1], nil)
		}
		return false
	})
	require.GreaterOrEqual(t, len(out), 40, "TestParseErrors changed shape: found only %d cases", len(out))

	corpus, err := filepath.Glob("../../jobspec/testdata/fuzz/FuzzParse/*")
	require.NoError(t, err)
	for _, p := range corpus {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		require.Equal(t, "go test fuzz v1", lines[0], p)
		lit, ok := strings.CutPrefix(lines[1], "[]byte(")
		require.True(t, ok, p)
		src, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		require.NoError(t, err, p)
		if _, err := jobspec.Parse("f.toml", []byte(src), "/d"); err != nil {
			out["corpus-"+filepath.Base(p)] = src
		}
	}
	return out
}

// TestBadJobFiles submits every malformed job file through the real
// binary (a clear error naming the file, exit 2, nothing enqueued) and
// drops each into a running worker's inbox (rejected with a .error file,
// the worker keeps going, the good jobs around them all run).
func TestBadJobFiles(t *testing.T) {
	t.Parallel()
	b := Setup(t, "")
	bad := malformedJobFiles(t)
	names := make([]string, 0, len(bad))
	for name := range bad {
		names = append(names, name)
	}
	sort.Strings(names)
	t.Logf("%d malformed job files", len(names))

	ws := t.TempDir()
	good := func(name string) string {
		return fmt.Sprintf("name = %q\nmode = \"workspace_write\"\nworkspace = %q\ncommand = [\"/bin/sh\", \"-c\", \"echo %s >> ran.log\"]\n", name, ws, name)
	}
	b.Submit(b.WriteJob("good-before.toml", good("good-before")))
	fileOf := func(name string) string { return strings.NewReplacer(" ", "-", "/", "-").Replace(name) + ".toml" }
	for _, name := range names {
		path := b.WriteJob(fileOf(name), bad[name])
		out, errOut, code := b.Run("submit", path)
		require.Equal(t, 2, code, "%s: submit must refuse it as bad input: %s%s", name, out, errOut)
		require.Contains(t, errOut, path, "%s: the error names the file", name)
		require.Contains(t, errOut, "nothing was enqueued", name)
		require.Empty(t, out, name)
	}
	require.Len(t, b.List(), 1, "only the good job is queued")

	w := b.StartWorker("--concurrency", "2")
	inbox := filepath.Join(b.State, "inbox")
	b.WaitState("good-before", time.Minute, "succeeded")
	for _, name := range names {
		require.NoError(t, os.WriteFile(filepath.Join(inbox, fileOf(name)), []byte(bad[name]), 0o600))
	}
	require.NoError(t, os.WriteFile(filepath.Join(inbox, "good-inbox.toml"), []byte(good("good-inbox")), 0o600))
	b.WaitState("good-inbox", time.Minute, "succeeded")
	deadline := time.Now().Add(time.Minute)
	for _, name := range names {
		p := filepath.Join(inbox, "rejected", fileOf(name))
		for {
			if _, err := os.Stat(p + ".error"); err == nil {
				break
			}
			require.False(t, time.Now().After(deadline), "%s was not rejected", name)
			time.Sleep(50 * time.Millisecond)
		}
		msg, err := os.ReadFile(p + ".error")
		require.NoError(t, err)
		require.NotEmpty(t, strings.TrimSpace(string(msg)), name)
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, bad[name], string(data), "%s: the rejected file is kept as it was", name)
	}
	// The worker kept going.
	require.NoError(t, w.Process.Signal(syscall.Signal(0)), "the worker must still be running")
	b.Submit(b.WriteJob("good-after.toml", good("good-after")))
	b.WaitState("good-after", time.Minute, "succeeded")
	jobs := b.List()
	require.Len(t, jobs, 3, "exactly the three good jobs are in the store")
	for _, j := range jobs {
		require.Equal(t, "succeeded", j.State, j.Name)
	}
	ran, err := os.ReadFile(filepath.Join(ws, "ran.log"))
	require.NoError(t, err)
	require.Equal(t, "good-before\ngood-inbox\ngood-after\n", string(ran))
}

// hostileCases returns the (do, only) rows of hooks' TestHostileModules
// table, read from its Go source.
func hostileCases(t *testing.T) [][2]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../hooks/hostile_test.go", nil, 0)
	require.NoError(t, err)
	var rows [][2]string
	ast.Inspect(f, func(n ast.Node) bool {
		cl, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		row := map[string]string{}
		for _, el := range cl.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, _ := kv.Key.(*ast.Ident)
			if key == nil {
				continue
			}
			switch v := kv.Value.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(v.Value); err == nil {
					row[key.Name] = s
				}
			case *ast.SelectorExpr, *ast.Ident:
				row[key.Name] = exprName(kv.Value)
			}
		}
		if do, ok := row["do"]; ok {
			only := row["only"]
			switch only {
			case "ABICommand":
				only = "command"
			case "ABIReactor":
				only = "reactor"
			}
			rows = append(rows, [2]string{do, only})
		}
		return true
	})
	require.GreaterOrEqual(t, len(rows), 15, "TestHostileModules changed shape: found only %d cases", len(rows))
	return rows
}

func exprName(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

var (
	hostileOnce sync.Once
	hostileDir  string
	hostileErr  error
)

// hostileModules builds hooks/testdata's hostile module as a command and
// as a reactor, and the module that exports neither ABI.
func hostileModules(t *testing.T) string {
	t.Helper()
	hostileOnce.Do(func() {
		hostileDir, hostileErr = os.MkdirTemp("", "paddock-hostile-")
		if hostileErr != nil {
			return
		}
		builds := map[string][]string{
			"hostile-command.wasm": {"../../hooks/testdata/hostile"},
			"hostile-reactor.wasm": {"-tags=reactor", "-buildmode=c-shared", "../../hooks/testdata/hostile"},
			"noabi.wasm":           {"-buildmode=c-shared", "../../hooks/testdata/noabi"},
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for name, args := range builds {
			wg.Add(1)
			go func() {
				defer wg.Done()
				argv := append([]string{"build", "-o", filepath.Join(hostileDir, name)}, args...)
				cmd := exec.Command("go", argv...)
				cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
				if out, err := cmd.CombinedOutput(); err != nil {
					mu.Lock()
					hostileErr = fmt.Errorf("go %v: %v\n%s", argv, err, out)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	})
	require.NoError(t, hostileErr)
	return hostileDir
}

// TestHostileHooks runs every hostile behaviour of hooks' tests through
// the real worker, as a command and as a reactor hook: each job is denied
// with the reason in its record, the allowed jobs around them run, the
// worker goes on and drains the queue, nothing is lost.
func TestHostileHooks(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	dir := hostileModules(t)
	cases := hostileCases(t)
	for _, abi := range []string{"command", "reactor"} {
		t.Run(abi, func(t *testing.T) {
			t.Parallel()
			b := Setup(t, DefaultConfig+fmt.Sprintf("[[hook]]\nname = \"hostile\"\npath = %q\ntimeout = \"1s\"\nmemory = \"24MiB\"\n",
				filepath.Join(dir, "hostile-"+abi+".wasm")))
			var file strings.Builder
			fmt.Fprintf(&file, "[defaults]\nmode = \"workspace_write\"\ncommand = [\"/bin/true\"]\n")
			var hostile []string
			allow := 0
			addAllow := func() {
				allow++
				fmt.Fprintf(&file, "[[job]]\nname = \"allow-%d\"\nlabels = { do = \"allow\" }\n", allow)
			}
			addAllow()
			for i, c := range cases {
				if c[1] != "" && c[1] != abi {
					continue
				}
				name := fmt.Sprintf("hostile-%02d-%s", i, c[0])
				hostile = append(hostile, name)
				fmt.Fprintf(&file, "[[job]]\nname = %q\nlabels = { do = %q }\n", name, c[0])
				addAllow()
			}
			ids := b.Submit(b.WriteJob("hostile.toml", file.String()))
			_, errOut, code := b.Run("worker", "--drain", "--concurrency", "2")
			require.Equal(t, 1, code, "drain exits 1: jobs were denied: %s", errOut)
			jobs := b.List()
			require.Len(t, jobs, len(ids), "nothing lost, nothing added")
			for _, name := range hostile {
				s := b.Show(name)
				require.Equal(t, "denied", s.State, name)
				require.Contains(t, s.Reason, "hook hostile: ", name)
				require.NotEmpty(t, s.Attempts, name)
				require.NotEmpty(t, s.Attempts[len(s.Attempts)-1].Trail, "%s: the trail is recorded", name)
			}
			for i := 1; i <= allow; i++ {
				s := b.Show(fmt.Sprintf("allow-%d", i))
				require.Equal(t, "succeeded", s.State, s.Reason)
			}
		})
	}
}

// TestHostileHookModules: a hook module that cannot be loaded (not
// WebAssembly, missing, wrong digest) stops the worker at start with an
// error naming the hook (exit 2) and the queued job waits; a module that
// exports neither ABI loads and denies every job, naming the reason; with
// the config fixed, the waiting job runs.
func TestHostileHookModules(t *testing.T) {
	t.Parallel()
	RequireBwrap(t)
	dir := hostileModules(t)
	b := Setup(t, "")
	job := "mode = \"workspace_write\"\ncommand = [\"/bin/true\"]\n"
	ids := b.Submit(b.WriteJob("one.toml", "name = \"waits\"\n"+job))
	notWasm := b.WriteJob("not.wasm", "hello")
	hookConfig := func(name, body string) {
		require.NoError(t, os.WriteFile(b.Config, []byte(DefaultConfig+"[[hook]]\nname = \""+name+"\"\n"+body+"\n"), 0o600))
	}
	for _, c := range []struct{ name, hook, want string }{
		{"not-wasm", fmt.Sprintf("path = %q", notWasm), "not.wasm"},
		{"missing", fmt.Sprintf("path = %q", filepath.Join(dir, "missing.wasm")), "missing.wasm"},
		{"digest", fmt.Sprintf("path = %q\nsha256 = %q", filepath.Join(dir, "hostile-command.wasm"), strings.Repeat("0", 64)), "sha256"},
	} {
		hookConfig("bad-"+c.name, c.hook)
		_, errOut, code := b.Run("worker", "--drain")
		require.Equal(t, 2, code, "%s: %s", c.name, errOut)
		require.Contains(t, errOut, `"bad-`+c.name+`"`, c.name)
		require.Contains(t, strings.ToLower(errOut), strings.ToLower(c.want), c.name)
		require.Equal(t, "queued", b.Show(ids[0]).State, "%s: the job waits", c.name)
	}

	require.NoError(t, os.WriteFile(b.Config, []byte(DefaultConfig), 0o600))
	_, errOut, code := b.Run("worker", "--drain")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "succeeded", b.Show(ids[0]).State)

	hookConfig("noabi", fmt.Sprintf("path = %q", filepath.Join(dir, "noabi.wasm")))
	b.Submit(b.WriteJob("two.toml", "name = \"meets-noabi\"\n"+job))
	_, errOut, code = b.Run("worker", "--drain")
	require.Equal(t, 1, code, errOut)
	s := b.Show("meets-noabi")
	require.Equal(t, "denied", s.State)
	require.Contains(t, s.Reason, "hook noabi: ")
	require.Contains(t, s.Reason, "neither")
	require.Len(t, b.List(), 2, "nothing lost, nothing added")
}

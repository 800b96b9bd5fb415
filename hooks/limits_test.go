package hooks

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
)

// TestCallStackMemoryBound: a decision that recurses 100 million calls
// deep (wazero alone would grow its host-side stack to its own ceiling,
// about 180 MB of RSS in `paddock hook test`) is stopped at the call-stack
// limit with the process's peak RSS less than 48 MiB above where it was.
func TestCallStackMemoryBound(t *testing.T) {
	const maxGrowthMiB = 48
	for _, mod := range []string{"deep-command", "deep-reactor"} {
		t.Run(mod, func(t *testing.T) {
			c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: mod, Path: wasmPath(t, "wat/"+mod)}}})
			decide(t, c, testJob("", "echo", "warm")) // the first instance, outside the measure
			var res Result
			growth := peakRSSGrowthMiB(func() { res, _ = decide(t, c, testJob("", "echo", "~deep")) })
			t.Logf("%s: peak RSS +%.1f MiB: %s", mod, growth, res.Reason)
			require.Equal(t, VerdictDeny, res.Verdict)
			require.ErrorContains(t, errorText(res.Trail[0].Error), ErrCallStack.Error())
			require.Less(t, growth, float64(maxGrowthMiB))
		})
	}
}

// TestCallStackManyResults: a function's frame holds the results of the
// calls it makes, so a recursion that passes 500 results up each level
// (a few instructions a frame, but 4 KB of stack) is stopped at the
// call-stack limit too, not at wazero's own ceiling (100 MB and more).
func TestCallStackManyResults(t *testing.T) {
	const maxGrowthMiB = 48
	results := strings.Repeat(" i32", 500)
	wat := `(module
  (func $zeros (result` + results + `)` + strings.Repeat(" i32.const 0", 500) + `)
  (func $down (param $n i32) (result` + results + `)
    local.get $n
    i32.eqz
    if (result` + results + `)
      call $zeros
    else
      local.get $n
      i32.const 1
      i32.sub
      call $down
    end)
  (func (export "_start")
    i32.const 100000000
    call $down` + strings.Repeat(" drop", 500) + `))`
	mod := assembleWat(t, wat)
	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "results", Path: mod}}})
	var res Result
	growth := peakRSSGrowthMiB(func() { res, _ = decide(t, c, testJob("")) })
	t.Logf("peak RSS +%.1f MiB: %s", growth, res.Reason)
	require.Equal(t, VerdictDeny, res.Verdict)
	require.ErrorContains(t, errorText(res.Trail[0].Error), ErrCallStack.Error())
	require.Less(t, growth, float64(maxGrowthMiB))
}

// assembleWat assembles the module text wat with wat2wasm and returns the
// module's path, for hostile modules a test writes out.
func assembleWat(t *testing.T, wat string) string {
	t.Helper()
	requireWat2wasm(t)
	dir := t.TempDir()
	src, mod := filepath.Join(dir, "mod.wat"), filepath.Join(dir, "mod.wasm")
	require.NoError(t, os.WriteFile(src, []byte(wat), 0o600))
	out, err := exec.Command("wat2wasm", src, "-o", mod).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return mod
}

// TestReservedExportRefused: a module exporting a name of meter's stack
// globals is refused at load, uncompiled, naming the hook and the name
// (it could otherwise hand the host a depth of its own).
func TestReservedExportRefused(t *testing.T) {
	t.Parallel()
	mod := assembleWat(t, `(module
  (global (export "`+exportDeepest+`") (mut i32) (i32.const 0))
  (func (export "_start")))`)
	_, err := NewChain(context.Background(), ChainOptions{Hooks: []Config{{Name: "reserved", Path: mod}}})
	require.ErrorIs(t, err, ErrLoad)
	require.ErrorContains(t, err, `hook "reserved"`)
	require.ErrorContains(t, err, `exports "paddock:stack_deepest", a name paddock reserves`)
	require.NotContains(t, err.Error(), "compile: ")
}

// errorText turns a trail's error text back into an error, for ErrorContains.
func errorText(s string) error {
	if s == "" {
		return nil
	}
	return &textError{s}
}

type textError struct{ s string }

func (e *textError) Error() string { return e.s }

// TestDeepInstanceIsNotPooled: a reactor instance whose call went deeper
// than keepStackUnits (wazero keeps the grown stack with the instance) is
// closed after its decision instead of going back to the idle pool; an
// instance that stayed shallow goes back.
func TestDeepInstanceIsNotPooled(t *testing.T) {
	t.Parallel()
	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "deep", Path: wasmPath(t, "wat/deep-reactor")}}})
	h := c.hooks[0]
	res, _ := decide(t, c, testJob("", "echo", "shallow"))
	require.Equal(t, VerdictAllow, res.Verdict, res.Reason)
	require.Len(t, h.idle, 1, "a shallow instance is pooled")

	res, _ = decide(t, c, testJob("", "echo", "^deep"))
	require.Equal(t, VerdictAllow, res.Verdict, "20,000 calls deep is within the limit: %s", res.Reason)
	require.Empty(t, h.idle, "the instance that went deep is closed")

	res, _ = decide(t, c, testJob("", "echo", "shallow"))
	require.Equal(t, VerdictAllow, res.Verdict, res.Reason)
	require.Len(t, h.idle, 1)
}

// testModule assembles a module of one function type (params i32
// parameters, no results) and nf functions of that type, each with locals
// i32 locals and the body body (its final end added). For modules too
// large to write as text.
func testModule(nf int, params, locals uint32, body []byte) []byte {
	out := append([]byte{}, wasmHeader...)
	sec := func(id byte, b []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(b)))
		out = append(out, b...)
	}
	typ := []byte{1, 0x60}
	typ = appendU32(typ, params)
	for range params {
		typ = append(typ, 0x7f)
	}
	sec(secType, append(typ, 0))
	funcs := appendU32(nil, uint32(nf))
	for range nf {
		funcs = append(funcs, 0)
	}
	sec(secFunction, funcs)
	var fb []byte
	if locals > 0 {
		fb = append(appendU32([]byte{1}, locals), 0x7f)
	} else {
		fb = []byte{0}
	}
	fb = append(append(fb, body...), 0x0b)
	code := appendU32(nil, uint32(nf))
	for range nf {
		code = appendU32(code, uint32(len(fb)))
		code = append(code, fb...)
	}
	sec(secCode, code)
	return out
}

// repeat is n copies of ins.
func repeat(n int, ins ...byte) []byte {
	b := make([]byte, 0, n*len(ins))
	for range n {
		b = append(b, ins...)
	}
	return b
}

// nested is n nested empty blocks.
func nested(n int) []byte {
	return append(repeat(n, 0x02, 0x40), repeat(n, 0x0b)...)
}

// brTable is a br_table of n labels (all 0) on i32.const 0.
func brTable(n int) []byte {
	b := append([]byte{0x41, 0x00, 0x0e}, appendU32(nil, uint32(n))...)
	return append(b, repeat(n+1, 0x00)...)
}

// TestCompileLimits: a module past each compile limit is refused with
// ErrTooLarge naming the function and the limit; one at the limit is
// rewritten. (A function's count includes its final end.)
func TestCompileLimits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		at, past  []byte
		wantInErr string
	}{
		{"functions", testModule(MaxFunctions, 0, 0, nil), testModule(MaxFunctions+1, 0, 0, nil),
			"20001 functions, more than 20000"},
		{"instructions", testModule(1, 0, 0, repeat(MaxFunctionInstructions-1, 0x01)),
			testModule(1, 0, 0, repeat(MaxFunctionInstructions, 0x01)),
			"function 0 has more than 100000 instructions"},
		{"br_table labels", testModule(1, 0, 0, append(brTable(MaxFunctionInstructions-4), 0x1a)),
			testModule(1, 0, 0, append(brTable(MaxFunctionInstructions-3), 0x1a)),
			"function 0 has more than 100000 instructions"},
		{"locals", testModule(1, 10, MaxFunctionLocals-10, nil), testModule(1, 10, MaxFunctionLocals-9, nil),
			"function 0 has more than 50000 locals"},
		{"nesting", testModule(1, 0, 0, nested(MaxNesting)), testModule(1, 0, 0, nested(MaxNesting+1)),
			"function 0 has blocks nested more than 2048 deep"},
		{"blocks", testModule(1, 0, 0, repeat(MaxFunctionBlocks/2-1, 0x41, 0x01, 0x04, 0x40, 0x0b)),
			testModule(1, 0, 0, repeat(MaxFunctionBlocks/2, 0x41, 0x01, 0x04, 0x40, 0x0b)),
			"function 0 has more than 8192 blocks and branches"},
		{"values", testModule(1, 0, 1000, repeat(MaxFunctionValues/1000, 0x02, 0x40, 0x0b)),
			testModule(1, 0, 1000, repeat(MaxFunctionValues/1000+1, 0x02, 0x40, 0x0b)),
			"function 0 has more than 262144 block and call values"},
		{"module cost", testModule(MaxModuleCost/MaxFunctionInstructions, 0, 0, repeat(MaxFunctionInstructions-1, 0x01)),
			testModule(MaxModuleCost/MaxFunctionInstructions+1, 0, 0, repeat(MaxFunctionInstructions-1, 0x01)),
			"an estimated compile cost of more than 24000000 instructions' worth in all (functions 0 to 240)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := meter(tc.at, 16)
			require.NoError(t, err, "at the limit")
			_, err = meter(tc.past, 16)
			require.ErrorIs(t, err, ErrTooLarge)
			require.ErrorContains(t, err, tc.wantInErr)
		})
	}
}

// TestTooLargeModuleRefusedAtLoad: the chain refuses a module past a
// compile limit (ErrLoad and ErrTooLarge), naming the hook and its path.
func TestTooLargeModuleRefusedAtLoad(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nest.wasm")
	require.NoError(t, os.WriteFile(path, testModule(1, 0, 0, nested(100_000)), 0o644))
	_, err := NewChain(context.Background(), ChainOptions{Hooks: []Config{{Name: "nest", Path: path}}})
	require.ErrorIs(t, err, ErrLoad)
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorContains(t, err, `hook "nest" (`+path+`)`)
	require.ErrorContains(t, err, "blocks nested more than 2048 deep")
}

// atLimitModules are modules at the per-function compile limits in the
// shapes that cost wazero's compiler most per instruction.
func atLimitModules() map[string][]byte {
	half := MaxFunctionInstructions/2 - 10
	live := append(repeat(half, 0x41, 0x01), repeat(half-1, 0x6a)...) // consts, then their sum
	live = append(live, 0x1a)
	var locals []byte
	n := MaxFunctionInstructions / 7 // of MaxFunctionLocals: each set, then all summed
	for i := range n {
		locals = append(append(locals, 0x41, 0x01, 0x21), appendU32(nil, uint32(i))...)
	}
	locals = append(locals, 0x41, 0x00)
	for i := range n {
		locals = append(append(append(locals, 0x20), appendU32(nil, uint32(i))...), 0x6a)
	}
	locals = append(locals, 0x1a)
	var values []byte
	const valueLocals = 128
	for i := range valueLocals { // set each local, blocks in a row, then sum the locals
		values = append(append(values, 0x41, 0x01, 0x21), appendU32(nil, uint32(i))...)
	}
	values = append(append(values, repeat(MaxFunctionValues/valueLocals-1, 0x02, 0x40, 0x0b)...), 0x41, 0x00)
	for i := range valueLocals {
		values = append(append(append(values, 0x20), appendU32(nil, uint32(i))...), 0x6a)
	}
	values = append(values, 0x1a)
	return map[string][]byte{
		"nesting": testModule(1, 0, 0, nested(MaxNesting)),
		"ifs":     testModule(1, 0, 0, repeat(MaxFunctionBlocks/2-1, 0x41, 0x01, 0x04, 0x40, 0x0b)),
		"values":  testModule(1, 0, valueLocals, values),
		"live":    testModule(1, 0, 0, live),
		"locals":  testModule(1, 0, MaxFunctionLocals, locals),
	}
}

// TestCompileAtLimitsBounded: compiling a module at a per-function limit
// (rewritten, as the chain compiles it) raises the process's peak RSS by
// less than 256 MiB (a function of a million instructions takes about
// 350 MiB; 100,000 nested blocks, minutes).
func TestCompileAtLimitsBounded(t *testing.T) {
	const maxGrowthMiB = 256
	for name, wasm := range atLimitModules() {
		t.Run(name, func(t *testing.T) {
			metered, err := meter(wasm, 16)
			require.NoError(t, err)
			rt := wazero.NewRuntime(context.Background())
			defer rt.Close(context.Background())
			growth := peakRSSGrowthMiB(func() { _, err = rt.CompileModule(context.Background(), metered) })
			require.NoError(t, err)
			t.Logf("%s: peak RSS +%.1f MiB", name, growth)
			require.Less(t, growth, float64(maxGrowthMiB))
		})
	}
}

// BenchmarkCompileAtLimits is the compile time of each atLimitModules
// module, rewritten; reported with its peak RSS growth.
func BenchmarkCompileAtLimits(b *testing.B) {
	for name, wasm := range atLimitModules() {
		b.Run(name, func(b *testing.B) {
			metered, err := meter(wasm, 16)
			require.NoError(b, err)
			peak := 0.0
			for b.Loop() {
				rt := wazero.NewRuntime(context.Background())
				peak = max(peak, peakRSSGrowthMiB(func() { _, err = rt.CompileModule(context.Background(), metered) }))
				require.NoError(b, err)
				_ = rt.Close(context.Background())
			}
			b.ReportMetric(peak, "peak-MiB")
		})
	}
}

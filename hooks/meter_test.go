package hooks

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// instantiateRaw compiles and instantiates wasm on a plain wazero runtime
// (the features paddock enables, no limits), closed at the end of the test.
func instantiateRaw(t *testing.T, wasm []byte) api.Module {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	t.Cleanup(func() { _ = rt.Close(ctx) })
	mod, err := rt.Instantiate(ctx, wasm)
	require.NoError(t, err)
	return mod
}

// callAll calls each of calls ("export(arg)") in order and records the
// result or the first line of the error.
func callAll(t *testing.T, mod api.Module, calls []string) []string {
	t.Helper()
	var out []string
	for _, c := range calls {
		var name string
		var arg int32
		_, err := fmt.Sscanf(strings.NewReplacer("(", " ", ")", "").Replace(c), "%s %d", &name, &arg)
		require.NoError(t, err, c)
		f := mod.ExportedFunction(name)
		require.NotNil(t, f, name)
		res, err := f.Call(context.Background(), api.EncodeI32(arg))
		if err != nil {
			out = append(out, c+" = error: "+firstLine(err))
			continue
		}
		out = append(out, fmt.Sprintf("%s = %d", c, api.DecodeI32(res[0])))
	}
	return out
}

// TestMeterPreservesMeaning runs the exports of testdata/wat/control.wat
// (br_table to the function's label, nested branches carrying values,
// multi-value blocks and loops with parameters, call_indirect, traps,
// memory.fill and memory.copy, memory.grow, SIMD lanes, and fib(25): about
// 250,000 calls, which spend the budget several times) on the original
// module and on the rewritten one: every result and trap must be the same.
func TestMeterPreservesMeaning(t *testing.T) {
	t.Parallel()
	orig, err := os.ReadFile(wasmPath(t, "wat/control"))
	require.NoError(t, err)
	metered, err := meter(orig, DefaultMemoryBytes/pageBytes)
	require.NoError(t, err)
	require.NotEqual(t, orig, metered)

	calls := []string{
		"table(0)", "table(1)", "table(2)", "table(3)", "table(99)", "table(-1)",
		"nested(0)", "nested(4)", "nested(6)", "nested(11)", "nested(-5)",
		"sumloop(1)", "sumloop(10)", "sumloop(1000)",
		"multi(0)", "multi(65537)", "multi(196610)",
		"indirect(0)", "indirect(1)", "indirect(2)", "indirect(4)", "indirect(-1)",
		"fact(1)", "fact(5)", "fact(10)", "calls(0)",
		"fib(1)", "fib(20)", "fib(25)",
		"bulk(0)", "bulk(1)", "bulk(255)",
		"grow(0)", "grow(1)", "grow(2)", "grow(1)", "grow(0)",
		"simd(0)", "simd(5)", "simd(-3)",
	}
	want := callAll(t, instantiateRaw(t, orig), calls)
	got := callAll(t, instantiateRaw(t, metered), calls)
	require.Equal(t, want, got)
	// The cases do what they say: traps and a refused grow among them.
	require.Contains(t, want, "indirect(4) = error: wasm error: invalid table access")
	require.Contains(t, want, "table(2) = 100") // the br_table target that is the function itself
	require.Contains(t, want, "grow(1) = -1")
	require.Contains(t, want, "fib(25) = 75025")
}

// TestMeterCapsTables: a table.grow that would hold the host's memory past
// maxTableElements fails in the guest; a module whose tables start larger
// is refused at load.
func TestMeterCapsTables(t *testing.T) {
	t.Parallel()
	orig, err := os.ReadFile(wasmPath(t, "wat/tablegrow"))
	require.NoError(t, err)
	metered, err := meter(orig, 16)
	require.NoError(t, err)
	big := fmt.Sprintf("grow(%d)", 2*maxTableElements)
	require.Equal(t, []string{big + " = 1"}, callAll(t, instantiateRaw(t, orig), []string{big}))
	require.Equal(t, []string{big + " = -1", "grow(1000) = 1"}, callAll(t, instantiateRaw(t, metered), []string{big, "grow(1000)"}))

	_, err = NewChain(context.Background(), ChainOptions{Hooks: []Config{{Name: "big", Path: wasmPath(t, "wat/bigtable")}}})
	require.ErrorIs(t, err, ErrLoad)
	require.Contains(t, err.Error(), `hook "big"`)
	require.Contains(t, err.Error(), "tables start with 2097152 elements in all, more than 1048576")
}

// TestMeterCapsElementSegments: a module whose element segments hold
// more references than all its tables could is refused at load, before
// wazero decodes them into host memory; one under the cap loads.
func TestMeterCapsElementSegments(t *testing.T) {
	t.Parallel()
	_, err := meter(handmadeReactorElems(nil, 1000), 16)
	require.NoError(t, err)
	big := handmadeReactorElems(nil, maxElementEntries+1)
	_, err = meter(big, 16)
	require.ErrorIs(t, err, ErrTooLarge)
	path := t.TempDir() + "/elems.wasm"
	require.NoError(t, os.WriteFile(path, big, 0o644))
	_, err = NewChain(context.Background(), ChainOptions{Hooks: []Config{{Name: "elems", Path: path}}})
	require.ErrorIs(t, err, ErrLoad)
	require.ErrorIs(t, err, ErrTooLarge)
	require.Contains(t, err.Error(), `hook "elems"`)
	require.Contains(t, err.Error(), "element segments hold more than 1048576 references in all")
}

// TestMeterRefusesWhatItCannotDecode: an instruction of a feature paddock
// does not enable (a tail call) is refused by meter; the hook is refused
// at load with wazero's own message, since the module is invalid for it too.
func TestMeterRefusesWhatItCannotDecode(t *testing.T) {
	t.Parallel()
	wasm := handmadeReactor([]byte{0x12, 0x00}) // _initialize: return_call 0
	_, err := meter(wasm, 16)
	require.ErrorIs(t, err, errMeter)
	require.Contains(t, err.Error(), "unknown or disabled instruction 0x12")

	path := t.TempDir() + "/tail.wasm"
	require.NoError(t, os.WriteFile(path, wasm, 0o644))
	_, err = NewChain(context.Background(), ChainOptions{Hooks: []Config{{Name: "tail", Path: path}}})
	require.ErrorIs(t, err, ErrLoad)
	require.Contains(t, err.Error(), "compile: ")
}

// FuzzMeter: meter never panics, and whatever it accepts of a module
// wazero compiles still compiles.
func FuzzMeter(f *testing.F) {
	for _, name := range []string{"wat/control", "wat/fib-command", "wat/grow-reactor", "wat/bulk-reactor", "wat/tablegrow", "trap"} {
		wasm, err := os.ReadFile(wasmPath(f, name))
		require.NoError(f, err)
		f.Add(wasm)
	}
	f.Add(handmadeReactor(nil))
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	f.Cleanup(func() { _ = rt.Close(ctx) })
	f.Fuzz(func(t *testing.T, wasm []byte) {
		metered, err := meter(wasm, 16)
		if err != nil {
			return
		}
		c, err := rt.CompileModule(ctx, wasm)
		if err != nil {
			return
		}
		_ = c.Close(ctx)
		c, err = rt.CompileModule(ctx, metered)
		require.NoError(t, err)
		_ = c.Close(ctx)
	})
}

// TestMeterRefusesTheBudgetsIndices: an original that names a global or
// a local past its own (invalid as it is) would name the budget or the
// scratch local once rewritten, and could reset the budget so that no
// deadline check ever runs: meter refuses it, and the hook fails to load.
func TestMeterRefusesTheBudgetsIndices(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		body []byte
		want string
	}{
		// i32.const 0x7fffffff; global.set 0 (the module has no globals)
		{"global", []byte{0x41, 0xff, 0xff, 0xff, 0xff, 0x07, 0x24, 0x00}, "global 0 of 0"},
		// local.get 0; drop (the function has no params or locals)
		{"local", []byte{0x20, 0x00, 0x1a}, "local 0 of 0"},
	} {
		wasm := handmadeReactor(c.body)
		_, err := meter(wasm, 16)
		require.ErrorIs(t, err, errMeter, c.name)
		require.Contains(t, err.Error(), c.want, c.name)
		path := t.TempDir() + "/" + c.name + ".wasm"
		require.NoError(t, os.WriteFile(path, wasm, 0o644))
		_, err = NewChain(context.Background(), ChainOptions{Hooks: []Config{{Name: c.name, Path: path}}})
		require.ErrorIs(t, err, ErrLoad, c.name)
	}
}

// TestSettingsCheckThatTimesOutRefuses: a command module whose settings
// check runs out of time has not said whether it checks its settings: the
// hook is refused at load, not loaded as one that does not check.
func TestSettingsCheckThatTimesOutRefuses(t *testing.T) {
	t.Parallel()
	_, err := NewChain(context.Background(), ChainOptions{Hooks: []Config{{
		Name: "slow", Path: wasmPath(t, "hostile"), Timeout: 200 * time.Millisecond,
		Settings: map[string]any{"do": "sleep"},
	}}})
	require.ErrorIs(t, err, ErrSettings)
	require.Contains(t, err.Error(), "the settings check did not finish")
}

// TestMeterCapsDeclarations: a module declaring more types, imports,
// element segments or data segments than the caps is refused at load,
// before wazero decodes them into host memory; a name section past
// maxNameSection is dropped, not kept for trap messages.
func TestMeterCapsDeclarations(t *testing.T) {
	t.Parallel()
	module := func(id byte, n int, item []byte, prefix ...[]byte) []byte {
		m := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
		for _, p := range prefix {
			m = append(m, p...)
		}
		body := uleb(uint64(n))
		for range n {
			body = append(body, item...)
		}
		return append(append(append(m, id), uleb(uint64(len(body)))...), body...)
	}
	oneType := module(1, 1, []byte{0x60, 0x00, 0x00})
	for name, tc := range map[string]struct {
		wasm []byte
		want string
	}{
		"types":            {module(1, maxTypes+1, []byte{0x60, 0x00, 0x00}), "types, more than"},
		"imports":          {module(2, maxImports+1, []byte{0x01, 'm', 0x01, 'f', 0x00, 0x00}, oneType[8:]), "imports, more than"},
		"element segments": {module(9, maxElementSegments+1, []byte{0x01, 0x00, 0x00}), "element segments, more than"},
		"data segments":    {module(11, maxDataSegments+1, []byte{0x01, 0x00}), "data segments, more than"},
		"exports":          {module(7, maxExports+1, []byte{0x01, 'e', 0x00, 0x00}), "exports, more than"},
		"parameters":       {module(1, 1, append(append([]byte{0x60}, uleb(maxTypeValues+1)...), append(make([]byte, 0), append(bytesOf(0x7f, maxTypeValues+1), 0x00)...)...)), "parameters, more than"},
	} {
		_, err := meter(tc.wasm, 16)
		require.ErrorIs(t, err, ErrTooLarge, name)
		require.ErrorContains(t, err, tc.want, name)
	}
	_, err := meter(module(1, maxTypes, []byte{0x60, 0x00, 0x00}), 16)
	require.NoError(t, err, "at the cap")

	_, err = meter(module(1, 70, append([]byte{0x60}, append(append(uleb(1000), bytesOf(0x7f, 1000)...), 0x00)...)), 16)
	require.ErrorIs(t, err, ErrTooLarge, "70 types of 1,000 parameters")
	require.ErrorContains(t, err, "parameters and results in all")

	// A name section claiming 2^32 function names in 24 bytes: dropped,
	// so that the module loads rather than running paddock out of memory.
	sub := append(uleb(1), append(uleb(0), uleb(0xFFFFFFFF)...)...) // local names: function 0 claims 2^32-1 locals
	names := append(append(uleb(4), "name"...), append([]byte{2}, append(uleb(uint64(len(sub))), sub...)...)...)
	lying := append(handmadeReactor(nil), append(append([]byte{0}, uleb(uint64(len(names)))...), names...)...)
	path := t.TempDir() + "/lying.wasm"
	require.NoError(t, os.WriteFile(path, lying, 0o644))
	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "lying", Path: path}}})
	res, _ := decide(t, c, testJob(""))
	require.Equal(t, VerdictAllow, res.Verdict, res.Reason)
	metered, err := meter(lying, 16)
	require.NoError(t, err)
	plainMetered, err := meter(handmadeReactor(nil), 16)
	require.NoError(t, err)
	require.Equal(t, len(plainMetered), len(metered), "the name section is dropped")

	// Other custom sections, empty ones included, are dropped whatever
	// their number.
	many := handmadeReactor(nil)
	plain := plainMetered
	for range 1000 {
		many = append(many, 0x00, 0x01, 0x00)
	}
	metered, err = meter(many, 16)
	require.NoError(t, err)
	require.Equal(t, len(plain), len(metered))
}

// bytesOf is n copies of b.
func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

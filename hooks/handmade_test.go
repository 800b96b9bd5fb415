package hooks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// handmadeReactor assembles a tiny reactor by hand (no toolchain): one page
// of memory, the decision {"decision":"allow"} in a data segment at 16,
// paddock_alloc returning 1024, paddock_decide returning (16<<32)|20, and an
// _initialize whose body is initBody (for example {0x00} for unreachable).
func handmadeReactor(initBody []byte) []byte { return handmadeReactorElems(initBody, 0) }

// handmadeReactorElems is handmadeReactor with, when elems > 0, a passive
// element segment of elems references to function 0 (one byte each).
func handmadeReactorElems(initBody []byte, elems int) []byte {
	sleb := func(v int64) []byte {
		var b []byte
		for {
			c := byte(v & 0x7f)
			v >>= 7
			if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
				return append(b, c)
			}
			b = append(b, c|0x80)
		}
	}
	vec := func(items ...[]byte) []byte {
		out := uleb(uint64(len(items)))
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	section := func(id byte, body []byte) []byte {
		return append(append([]byte{id}, uleb(uint64(len(body)))...), body...)
	}
	name := func(s string) []byte { return append(uleb(uint64(len(s))), s...) }
	body := func(code ...byte) []byte { // no locals
		b := append([]byte{0x00}, code...)
		return append(uleb(uint64(len(b))), b...)
	}
	const decision = `{"decision":"allow"}`
	decideRet := append([]byte{0x42}, sleb(16<<32|int64(len(decision)))...)
	m := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	m = append(m, section(1, vec(
		[]byte{0x60, 0x00, 0x00},                   // () -> ()
		[]byte{0x60, 0x01, 0x7f, 0x01, 0x7f},       // (i32) -> i32
		[]byte{0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7e}, // (i32, i32) -> i64
	))...)
	m = append(m, section(3, vec([]byte{0}, []byte{1}, []byte{2}))...)
	m = append(m, section(5, vec([]byte{0x00, 0x01}))...) // memory: min 1 page
	m = append(m, section(7, vec(
		append(name("memory"), 0x02, 0x00),
		append(name("_initialize"), 0x00, 0x00),
		append(name("paddock_alloc"), 0x00, 0x01),
		append(name("paddock_decide"), 0x00, 0x02),
	))...)
	if elems > 0 {
		seg := append([]byte{0x01, 0x00}, uleb(uint64(elems))...) // passive, funcref kind
		seg = append(seg, make([]byte, elems)...)                 // funcidx 0 each
		m = append(m, section(9, vec(seg))...)
	}
	m = append(m, section(10, vec(
		body(append(initBody, 0x0b)...),
		body(0x41, 0x80, 0x08, 0x0b), // i32.const 1024
		body(append(decideRet, 0x0b)...),
	))...)
	m = append(m, section(11, vec(append([]byte{0x00, 0x41, 0x10, 0x0b}, name(decision)...)))...)
	return m
}

func TestHandmadeReactor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok, trap := filepath.Join(dir, "ok.wasm"), filepath.Join(dir, "trap.wasm")
	require.NoError(t, os.WriteFile(ok, handmadeReactor(nil), 0o644))
	require.NoError(t, os.WriteFile(trap, handmadeReactor([]byte{0x00}), 0o644))

	c := newTestChain(t, ChainOptions{Hooks: []Config{{Name: "ok", Path: ok}}})
	require.Equal(t, ABIReactor, c.Hooks()[0].ABI)
	for i := 0; i < 3; i++ {
		res, _ := decide(t, c, testJob(""))
		require.Equal(t, VerdictAllow, res.Verdict, res.Reason)
	}

	c = newTestChain(t, ChainOptions{Hooks: []Config{{Name: "trap", Path: trap}}})
	res, _ := decide(t, c, testJob(""))
	require.Equal(t, VerdictDeny, res.Verdict)
	require.True(t, strings.HasPrefix(res.Trail[0].Error, ErrTrap.Error()), res.Trail[0].Error)
	require.Contains(t, res.Trail[0].Error, "(in _initialize)")
}

// uleb is v in LEB128, unsigned, as the binary format writes counts.
func uleb(v uint64) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

package tomlfile_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/internal/tomlfile"
)

// requireTooDeep asserts that src is refused, before decoding, at line
// with key.
func requireTooDeep(t *testing.T, src string, line int, key string) {
	t.Helper()
	err := tomlfile.CheckDepth([]byte(src))
	require.Error(t, err)
	var te *tomlfile.Error
	require.True(t, errors.As(err, &te), "%T", err)
	require.Equal(t, line, te.Line)
	require.Equal(t, key, te.Key)
	require.True(t, te.Syntax)
	require.Contains(t, te.Msg, "nesting deeper than 256 levels")
	// Decode refuses it the same way, without reaching the decoder.
	var m map[string]any
	_, derr := tomlfile.Decode([]byte(src), &m, nil)
	require.Equal(t, err, derr)
}

// requireDecodes asserts that src passes the scan and is TOML the
// decoder takes.
func requireDecodes(t *testing.T, src string) map[string]any {
	t.Helper()
	require.NoError(t, tomlfile.CheckDepth([]byte(src)))
	var m map[string]any
	_, err := tomlfile.Decode([]byte(src), &m, nil)
	require.NoError(t, err)
	return m
}

// Five million "[" (the attack: a stack overflow in the decoder, which
// no recover catches) are refused on their line.
func TestCheckDepthHugeArray(t *testing.T) {
	t.Parallel()
	src := "name = \"a\"\n# [[[[\nx = " + strings.Repeat("[", 5_000_000) + "\n"
	requireTooDeep(t, src, 3, "x")
}

// The limit is passed on the line of the level past it, wherever the
// nesting began; every kind of level counts.
func TestCheckDepthLine(t *testing.T) {
	t.Parallel()
	max := tomlfile.MaxDepth
	t.Run("ArraysOnePerLine", func(t *testing.T) {
		t.Parallel()
		// x is level 1, its array 2, the array on line L (L >= 2) is
		// level L+1: level 257 is on line 256.
		src := "x = [\n" + strings.Repeat("[\n", max) + strings.Repeat("]\n", max+1)
		requireTooDeep(t, src, max, "")
	})
	t.Run("InlineTables", func(t *testing.T) {
		t.Parallel()
		// x, then each "{" and its key "a": 1 + 2k levels.
		src := "n = 1\nx = " + strings.Repeat("{a = ", max/2) + "1" + strings.Repeat("}", max/2) + "\n"
		requireTooDeep(t, src, 2, "x")
	})
	t.Run("InlineTablesInArrays", func(t *testing.T) {
		t.Parallel()
		src := "[t]\nx = [\n" + strings.Repeat("{a = [", max/3+1) + "\n"
		requireTooDeep(t, src, 3, "")
	})
	t.Run("DottedKey", func(t *testing.T) {
		t.Parallel()
		src := "a = 1\n" + strings.Repeat("k.", max) + "k = 1\n"
		requireTooDeep(t, src, 2, strings.Repeat("k.", 32)+"...")
	})
	t.Run("QuotedKeyParts", func(t *testing.T) {
		t.Parallel()
		src := "\n\n" + strings.Repeat(`"a.b".'c'.`, max/2) + "k = 1\n"
		requireTooDeep(t, src, 3, strings.Repeat("a.b.c.", 10)+"a.b."+"...")
	})
	t.Run("TableHeader", func(t *testing.T) {
		t.Parallel()
		src := "a = 1\n[" + strings.Repeat("t.", max) + "t]\n"
		requireTooDeep(t, src, 2, "")
	})
	t.Run("ArrayTableHeaderAndKeys", func(t *testing.T) {
		t.Parallel()
		// The header's levels count under every key of its table.
		src := "[[" + strings.Repeat("t.", max-2) + "t]]\na = 1\nb.c = 2\n"
		requireTooDeep(t, src, 3, "b.c")
	})
	t.Run("InlineTableSpanningLines", func(t *testing.T) {
		t.Parallel()
		// x and its array, then "{", "a" and "[" on two lines each time:
		// level 257 is the 85th "[", on line 170.
		src := "x = [" + strings.Repeat("{\n a = [\n", max/3) + "\n" + strings.Repeat("[", 10) + "\n"
		requireTooDeep(t, src, 2*(max/3), "a")
	})
}

// A file exactly at the limit decodes; one level more is refused.
func TestCheckDepthAtLimit(t *testing.T) {
	t.Parallel()
	max := tomlfile.MaxDepth
	arrays := func(n int) string {
		return "x = " + strings.Repeat("[", n) + "1" + strings.Repeat("]", n) + "\n"
	}
	requireDecodes(t, arrays(max-1)) // x and 255 arrays
	requireTooDeep(t, arrays(max), 1, "x")

	// A table of 253 levels, a key, an inline table, its key.
	header := "[" + strings.Repeat("t.", max-4) + "t]\n"
	requireDecodes(t, header+"x = {a = 1}\n")
	requireTooDeep(t, header+"x = {a = [1]}\n", 2, "x")

	// Closed levels are given back: siblings each reach the limit.
	sib := "x = [" + strings.Repeat("["+strings.Repeat("[", max-3)+strings.Repeat("]", max-3)+"], ", 3) + "]\n"
	requireDecodes(t, sib)
	requireDecodes(t, strings.Repeat(strings.Repeat("k.", max-1)+"k = 1\n", 1)+strings.Repeat("j.", max-1)+"j = 2\n")
}

// Brackets inside strings of every kind, in keys and in comments are
// not levels; lines inside multi-line strings still count.
func TestCheckDepthIgnoresStringsAndComments(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[{", 300)
	src := strings.Join([]string{
		"# " + deep,
		`basic = "` + deep + `\" ` + deep + `\\"` + " # " + deep,
		`literal = '` + deep + `\'`,
		`ml = """` + deep + "\n" + deep + `\"""` + deep + `\\` + "\n" + `"" ` + deep + `"""`,
		`ml2 = """` + deep + `"""""`,
		`mllit = '''` + deep + `\'''`,
		`mllit2 = '''` + deep + "\n" + `'' '` + deep + `'''''`,
		`"key ` + deep + `".'` + deep + `' = [ "` + deep + `", '` + deep + `', """` + deep + `""", # ` + deep,
		`  '''` + deep + `''', ]`,
		`[ "` + deep + `" . 'x' ]`,
		`v = { a = "` + deep + `", b = [ '` + deep + `' ] }`,
		`when = 1979-05-27 07:32:00Z`,
		`cont = """\`,
		`  ` + deep + `"""`,
		`after = 1`,
	}, "\n") + "\n"
	m := requireDecodes(t, src)
	require.Equal(t, deep+`" `+deep+`\`, m["basic"])
	require.Equal(t, deep+`\`, m["literal"])
	require.Equal(t, deep+`""`, m["ml2"])
	require.Equal(t, deep+`\`, m["mllit"])
	require.Equal(t, deep+"\n"+`'' '`+deep+`''`, m["mllit2"])
	require.Contains(t, m, "key "+deep)
	// The scan is in step after them all: a deep array on the next line
	// is refused on its own line.
	lines := strings.Count(src, "\n")
	for _, y := range []string{"y = ", `y = ["""a"""", `, "y = ['''a'''', "} {
		requireTooDeep(t, src+y+strings.Repeat("[", 300)+"\n", lines+1, "y")
	}
}

// Text that is not TOML is the decoder's to refuse, however the scan
// reads it: the scan neither fails on it nor lets nesting through.
func TestCheckDepthNotTOML(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"x = \"unterminated\ny = 1\n",
		"x = '''never closed [[[[",
		"x = 1 [[[[\n",
		"]]]]}}}}\n= = =\n{{",
		"x = [1,,2]\n",
		"[[[a]]]\n",
		"x = {a = 1 b = 2}\n",
		"\"\\",
	} {
		require.NoError(t, tomlfile.CheckDepth([]byte(src)), "%q", src)
		var m map[string]any
		_, err := tomlfile.Decode([]byte(src), &m, nil)
		require.Error(t, err, "%q", src)
	}
	// Brackets after a value are counted anyway.
	requireTooDeep(t, "x = 1 "+strings.Repeat("[", 300)+"\n", 1, "x")
	// A string that never ends hides nothing after it from the decoder.
	require.NoError(t, tomlfile.CheckDepth([]byte("x = \"\"\"a\n"+strings.Repeat("[", 1000))))
}

// BenchmarkCheckDepth scans a file of 10,000 [[job]] tables (1 MB, as
// queue/sqlite's BenchmarkParse10k) beside decoding it: the scan's share
// of Decode.
func BenchmarkCheckDepth(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("[defaults]\nmode = \"workspace_write\"\nretries = 2\nlabels = { batch = \"bench\" }\n\n")
	for i := range 10_000 {
		fmt.Fprintf(&sb, "[[job]]\nname = \"j%d\"\ncommand = [\"/usr/bin/env\", \"echo\", \"job %d\"]\ntimeout = \"5m\"\npriority = %d\n\n", i, i, i%4)
	}
	data := []byte(sb.String())
	b.Run("Scan", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if err := tomlfile.CheckDepth(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Decode", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			var m map[string]any
			if _, err := tomlfile.Decode(data, &m, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A text of more keys and values than MaxItems, or whose keys' paths sum
// to more than MaxKeyLevels levels, is refused at the line where it
// passes the limit (the decoder would take a gigabyte or more); one
// just within both decodes.
func TestCheckDepthBoundsWhatTheDecoderBuilds(t *testing.T) {
	t.Parallel()
	refused := func(src string, line int, msg string) {
		t.Helper()
		err := tomlfile.CheckDepth([]byte(src))
		var te *tomlfile.Error
		require.True(t, errors.As(err, &te), "%v", err)
		require.Equal(t, line, te.Line)
		require.Contains(t, te.Msg, msg)
	}
	// Values: "x = [1,1,...]" on line 2, one item for x and one for the
	// array.
	n := tomlfile.MaxItems - 2
	refused("a = 1\nx = ["+strings.Repeat("1,", n)+"1]\n", 2, fmt.Sprintf("more than %d keys and values", tomlfile.MaxItems))
	requireDecodes(t, "x = ["+strings.Repeat("1,", n-1)+"1]\n")

	// Key levels: a 250-part header, then keys of 251 levels each.
	var b strings.Builder
	b.WriteString("[" + strings.Repeat("t.", 249) + "t]\n")
	keys := (tomlfile.MaxKeyLevels - 250) / 251
	for i := range keys {
		fmt.Fprintf(&b, "k%d = 1\n", i)
	}
	within := b.String()
	requireDecodes(t, within)
	refused(within+"over = 1\n", keys+2, fmt.Sprintf("more than %d levels of keys", tomlfile.MaxKeyLevels))
}

package tomlfile_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/tomlfile"
)

type dur struct{ time.Duration }

func (d *dur) UnmarshalText(b []byte) (err error) {
	d.Duration, err = time.ParseDuration(string(b))
	return err
}

type conf struct {
	N    int                `toml:"n"`
	D    dur                `toml:"d"`
	Hook []struct{ A bool } `toml:"hook"`
}

// Every decoding error is placed: its line, its key, and words of TOML
// types rather than Go's.
func TestDecodeErrorsArePlaced(t *testing.T) {
	t.Parallel()
	want := map[string]string{"integer": "an integer", "boolean": "a boolean"}
	for _, tt := range []struct {
		src, key, msg string
		line          int
		syntax        bool
	}{
		{"n = = 1\n", "n", "invalid TOML: expected value but found '=' instead", 1, true},
		{"\xef\xbb\xbfn = 1\nd = \"x\nn = 2\n", "d", "invalid TOML: strings cannot contain newlines", 2, true},
		{"n = \"two\"\n", "n", "expected an integer, got a TOML string", 1, false},
		{"n = 1\n[[hook]]\na = 3\n", "hook.a", "expected a boolean, got a TOML integer", 3, false},
		{"n = 1\nd = \"soon\"\n", "d", `time: invalid duration "soon"`, 2, false},
	} {
		var c conf
		_, err := tomlfile.Decode([]byte(tt.src), &c, want)
		var te *tomlfile.Error
		require.True(t, errors.As(err, &te), "%q: %v", tt.src, err)
		require.Equal(t, tt.line, te.Line, tt.src)
		require.Equal(t, tt.key, te.Key, tt.src)
		require.Equal(t, tt.msg, te.Msg, tt.src)
		require.Equal(t, tt.syntax, te.Syntax, tt.src)
		require.Equal(t, fmt.Sprintf("line %d: %s: %s", tt.line, tt.key, tt.msg), te.Error())
	}
}

// Locate indexes every array of tables, and the tables that extend one.
func TestLocate(t *testing.T) {
	t.Parallel()
	src := "top = 1\n[[hook]]\nname = \"a\"\n[[hook]]\nname = \"b\"\n[hook.settings]\nx = 1\n[defaults]\nenv = { A = \"1\" }\n"
	kl := tomlfile.Locate([]byte(src), true)
	for path, line := range map[string]int{"top": 1, "hook": 2, "hook.0": 2, "hook.0.name": 3, "hook.1": 4, "hook.1.name": 5,
		"hook.1.settings": 6, "hook.1.settings.x": 7, "defaults": 8, "defaults.env": 9, "defaults.env.A": 9} {
		require.Equal(t, line, kl.Lookup(path), path)
	}
	require.Equal(t, 0, tomlfile.Locate([]byte(src), false)["hook.0.name"], "headers only")
	require.Equal(t, "hook.1.name", "hook.1."+tomlfile.KeyOnLine([]byte(src), 5))
}

// Locate reads strings as the depth scan does: an escaped quote does
// not close a multi-line basic string, so a "[t]" inside one is no
// header.
func TestLocateEscapedQuoteInMultiLineString(t *testing.T) {
	t.Parallel()
	src := "a = \"\"\"x\\\"\"\"\n[t]\n\"\"\"\nb = 1\n"
	var m map[string]any
	_, err := tomlfile.Decode([]byte(src), &m, nil)
	require.NoError(t, err)
	require.Equal(t, "x\"\"\"\n[t]\n", m["a"])
	kl := tomlfile.Locate([]byte(src), true)
	require.Equal(t, 4, kl["b"])
	require.NotContains(t, kl, "t")
}

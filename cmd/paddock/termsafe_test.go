package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
)

func TestTermSafe(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain text, ünïcode 中文\n\tand tabs": "plain text, ünïcode 中文\n\tand tabs",
		"\x1b]0;pwned\x07":                   `\u001b]0;pwned\u0007`,
		"a\rb\x7fc":                          `a\u000db\u007fc`,
		"csi \u009b2J":                       `csi \u009b2J`,
		"bidi \u202egnp.exe \u2066x\u2069":   `bidi \u202egnp.exe \u2066x\u2069`,
		"bad \xff\xfe utf-8":                 `bad \xff\xfe utf-8`,
		"\uFFFD stays":                       "\uFFFD stays",
	} {
		require.Equal(t, want, termSafe(in), "%q", in)
	}
	var b bytes.Buffer
	n, err := termSafeWriter{&b}.Write([]byte("x\x1b[2Jy"))
	require.NoError(t, err)
	require.Equal(t, 6, n, "the bytes given, not the bytes written")
	require.Equal(t, `x\u001b[2Jy`, b.String())
	require.Same(t, &b, rawOut(termSafeWriter{&b}))
}

// TestShellQuoteANSIC: a word holding a control character is printed as
// $'...', which a shell reads back as the same word.
func TestShellQuoteANSIC(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	require.NoError(t, err, "bash reads the $'...' words back")
	words := []string{"plain", "with space", "it's", "\x1b]0;pwned\x07", "a\\b'c\nd\te\r", "\u202egnp", "\xff\xferaw", "\x1b1f"}
	for _, w := range words {
		q := shellQuote(w)
		require.Equal(t, q, termSafe(q), "%q quoted as %s holds a control character", w, q)
		for _, locale := range []string{"C", "C.UTF-8"} {
			cmd := exec.Command(bash, "-c", `printf %s `+q)
			cmd.Env = append(os.Environ(), "LC_ALL="+locale)
			out, err := cmd.Output()
			require.NoError(t, err, q)
			require.Equal(t, w, string(out), "%q quoted as %s, LC_ALL=%s", w, q, locale)
		}
	}
}

// TestE2EOutputIsInertOnATerminal: what a job file says (argv, env,
// labels, cwd) and what its hook says reach show, ls, check and errors
// with their control characters written out, while logs gives the job's
// output byte for byte.
func TestE2EOutputIsInertOnATerminal(t *testing.T) {
	t.Parallel()
	b := e2etest.Setup(t, "")
	ws := filepath.Join(b.Dir, "w\x1b[2J")
	require.NoError(t, os.Mkdir(ws, 0o755))
	job := b.WriteJob("esc.toml", `name = "esc"
command = ["printf", "%s", "\u001b]0;pwned\u0007"]
workspace = "`+strings.ReplaceAll(ws, "\x1b", `\u001b`)+`"
env = { "X\u001b[2J" = "\u009b31m" }
labels = { k = "\u202egnp.exe" }
`)
	ids := b.Submit(job)
	b.StartWorker()
	b.WaitState(ids[0], time.Minute, "succeeded", "failed", "denied")
	for _, args := range [][]string{{"show", ids[0]}, {"ls"}, {"check", job}, {"submit", b.WriteJob("bad.toml", "command = \"true\"\n\"k\u001b]0;x\u0007\" = 1\n")}} {
		out, errOut, _ := b.Run(args...)
		for _, text := range []string{out, errOut} {
			require.Equal(t, text, termSafe(text), "paddock %v printed a control character:\n%q", args, text)
		}
		if args[0] == "show" {
			require.Contains(t, out, `$'\x1b]0;pwned\x07'`, "the argv word, as a shell reads it back")
			require.Contains(t, out, `w\u001b[2J`, "the workspace")
		}
		if args[0] == "submit" {
			require.Contains(t, errOut, `k\u001b]0;x\u0007`)
		}
	}
	// JSON on stderr too: encoding/json leaves DEL, C1 and the
	// bidirectional overrides raw; the escapes keep it valid JSON.
	_, errOut, code := b.Run("--json", "submit", b.WriteJob("bidi.toml", "command = \"true\"\n\"k\u202e\u009b\u007f\" = 1\n"))
	require.Equal(t, 2, code)
	require.Equal(t, errOut, termSafe(errOut), "raw control characters in %q", errOut)
	var exitErr struct{ Message string }
	require.NoError(t, json.Unmarshal([]byte(errOut), &exitErr), errOut)
	require.Contains(t, exitErr.Message, "k\u202e\u009b\u007f", "the JSON says what the file said")

	out, _, code := b.Run("logs", ids[0])
	require.Equal(t, 0, code)
	require.Equal(t, "\x1b]0;pwned\x07", out, "the job's own output, as written")
	require.False(t, strings.Contains(out, `\u001b`))
}

package layout_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHookREADMESnippetsBuild: each Go hook in examples/hooks/README.md
// builds, in an empty directory outside any module, with the command its
// first line gives, as a reader would run it.
func TestHookREADMESnippetsBuild(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../examples/hooks/README.md")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```go\n// (GOOS=\\S+ GOARCH=\\S+ go build [^\n]*)\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	require.Len(t, blocks, 2, "the command and the reactor example")
	for _, b := range blocks {
		t.Run(b[1], func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			words := strings.Fields(b[1])
			file := words[len(words)-1]
			require.True(t, strings.HasSuffix(file, ".go"), "the command names the file to save")
			require.NoError(t, os.WriteFile(filepath.Join(dir, file), []byte("// "+b[1]+"\n"+b[2]), 0o600))
			cmd := exec.Command("go", words[3:]...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), words[0], words[1], "GOFLAGS=")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s:\n%s", b[1], out)
			_, err = os.Stat(filepath.Join(dir, "hook.wasm"))
			require.NoError(t, err)
		})
	}
}

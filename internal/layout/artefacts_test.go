package layout_test

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
)

// TestNoTrackedArtefacts: no built artefact is tracked: no executable
// (ELF) and no WebAssembly module, whatever its name. Skipped outside a
// git checkout.
func TestNoTrackedArtefacts(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		e2etest.Unavailable(t, "not a git checkout (git ls-files: %v)", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		f, err := os.Open(filepath.Join("../..", name))
		if err != nil {
			continue // deleted in the working tree
		}
		head := make([]byte, 4)
		n, _ := io.ReadFull(f, head)
		f.Close()
		head = head[:n]
		require.False(t, bytes.Equal(head, []byte("\x7fELF")), "%s is an executable: built artefacts are not tracked", name)
		require.False(t, bytes.Equal(head, []byte("\x00asm")), "%s is a WebAssembly module: built artefacts are not tracked", name)
	}
}

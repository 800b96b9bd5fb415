package layout_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"paddock/internal/e2etest"
)

// TestMakeBwrapNeverFails: `make bwrap` never fails the build by itself
// (the tests decide), also when its install does not produce bwrap. The
// host's bwrap is hidden by a PATH without it, and apt-get is a stand-in
// that installs nothing: a failed install cannot be caused otherwise.
func TestMakeBwrapNeverFails(t *testing.T) {
	t.Parallel()
	mk, err := exec.LookPath("make")
	if err != nil {
		e2etest.Unavailable(t, "make is not installed")
	}
	bin := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bin, "apt-get"), []byte("#!/bin/sh\nexit 0\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "sudo"), []byte("#!/bin/sh\nexec \"$@\"\n"), 0o755))
	id, err := exec.LookPath("id")
	require.NoError(t, err)
	require.NoError(t, os.Symlink(id, filepath.Join(bin, "id")))
	cmd := exec.Command(mk, "-s", "-C", "../..", "bwrap")
	cmd.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make bwrap failed:\n%s", out)
	require.Contains(t, string(out), "bubblewrap did not install", "it says why bwrap is still missing")
}

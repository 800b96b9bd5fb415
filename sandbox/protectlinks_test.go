package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRestoreLinksStaysInItsDirectory: a job that replaced a protected
// symlink's directory with a symlink to elsewhere gets no restore there:
// the worker (root, perhaps) neither renames nor creates anything outside
// the workspace. A link replaced in place is put back, and what the job
// left is moved aside.
func TestRestoreLinksStaysInItsDirectory(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	ws, real, outside := filepath.Join(root, "ws"), filepath.Join(root, "real.git"), filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(ws, "repo"), filepath.Join(ws, "top"), filepath.Join(real, "hooks"), filepath.Join(outside, ".git")} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, os.Symlink(real, filepath.Join(ws, "repo", ".git")))
	require.NoError(t, os.Symlink(real, filepath.Join(ws, "top", ".git")))
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws,
		Protect: []string{"repo/.git/hooks/", "top/.git/hooks/"}})
	require.NoError(t, err)
	links := p.protectedLinks()
	require.Len(t, links, 2)

	// The job: repo/ becomes a symlink to a directory outside that has a
	// .git of its own; top/.git becomes a directory.
	require.NoError(t, os.Rename(filepath.Join(ws, "repo"), filepath.Join(ws, "repo.old")))
	require.NoError(t, os.Symlink(outside, filepath.Join(ws, "repo")))
	require.NoError(t, os.Remove(filepath.Join(ws, "top", ".git")))
	require.NoError(t, os.Mkdir(filepath.Join(ws, "top", ".git"), 0o755))

	msg := restoreLinks(links, "J1")
	require.Contains(t, msg, "no longer the one it was")
	entries, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing renamed or created outside")
	fi, err := os.Lstat(filepath.Join(outside, ".git"))
	require.NoError(t, err)
	require.True(t, fi.IsDir(), "the outside .git is untouched")

	target, err := os.Readlink(filepath.Join(ws, "top", ".git"))
	require.NoError(t, err, msg)
	require.Equal(t, real, target)
	fi, err = os.Lstat(filepath.Join(ws, "top", ".git.paddock-replaced-J1"))
	require.NoError(t, err)
	require.True(t, fi.IsDir())
}

// TestRestoreLinkWithALongName: a link whose name leaves no room for the
// usual aside suffix (NAME_MAX) is still put back; what the job left
// gets a short name.
func TestRestoreLinkWithALongName(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	ws, real := filepath.Join(root, "ws"), filepath.Join(root, "real.git")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "hooks"), 0o755))
	require.NoError(t, os.MkdirAll(ws, 0o755))
	long := strings.Repeat("L", 240)
	require.NoError(t, os.Symlink(real, filepath.Join(ws, long)))
	require.NoError(t, os.Symlink(long, filepath.Join(ws, ".git")))
	p, err := NewPolicy(PolicyParams{Mode: ModeWorkspaceWrite, Workspace: ws, Protect: []string{".git/hooks/"}})
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(ws, long)))
	require.NoError(t, os.MkdirAll(filepath.Join(ws, long, "hooks"), 0o755))

	msg := restoreLinks(p.protectedLinks(), "J2")
	require.Contains(t, msg, "paddock put the link back", msg)
	target, err := os.Readlink(filepath.Join(ws, long))
	require.NoError(t, err)
	require.Equal(t, real, target)
	fi, err := os.Lstat(filepath.Join(ws, ".paddock-replaced-J2"))
	require.NoError(t, err)
	require.True(t, fi.IsDir())
}

package hooks

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// cacheEntries returns the regular files under dir with their contents.
func cacheEntries(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		if d.Type().IsRegular() {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			out[path] = b
		}
		return nil
	}))
	return out
}

// TestCacheSealRefusesTamperedEntries: an entry of the compilation cache
// that changed since the chain that compiled it recorded it (rewritten in
// place with its mtime restored, or replaced by rename) is removed and
// compiled again, never loaded; so is every entry when the manifest's MAC
// does not hold, and a symlink planted in the cache. Untouched entries are
// reused.
func TestCacheSealRefusesTamperedEntries(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "wazero")
	load := func() {
		c, err := NewChain(context.Background(), ChainOptions{CacheDir: dir, Hooks: []Config{{Name: "m", Path: wasmPath(t, "minimal")}}})
		require.NoError(t, err)
		require.NoError(t, c.Close(context.Background()))
	}
	load()
	first := cacheEntries(t, dir)
	require.Len(t, first, 1, "one module, one entry")
	var entry string
	var compiled []byte
	for p, b := range first {
		entry, compiled = p, b
	}
	fi, err := os.Stat(entry)
	require.NoError(t, err)

	// Reused as it is.
	_, removed, err := openCacheSeal(dir)
	require.NoError(t, err)
	require.Equal(t, 0, removed)

	// Rewritten in place, same size, mtime restored: removed.
	tampered := append([]byte(nil), compiled...)
	tampered[len(tampered)/2] ^= 0xff
	require.NoError(t, os.WriteFile(entry, tampered, 0o600))
	require.NoError(t, os.Chtimes(entry, fi.ModTime(), fi.ModTime()))
	_, removed, err = openCacheSeal(dir)
	require.NoError(t, err)
	require.Equal(t, 1, removed)
	require.NoFileExists(t, entry)
	load()
	require.Equal(t, compiled, cacheEntries(t, dir)[entry], "compiled again from the module")

	// Replaced by rename with the same bytes: a new inode, removed.
	other := entry + ".new"
	require.NoError(t, os.WriteFile(other, compiled, 0o600))
	require.NoError(t, os.Rename(other, entry))
	_, removed, err = openCacheSeal(dir)
	require.NoError(t, err)
	require.Equal(t, 1, removed)
	load()

	// A manifest whose MAC does not hold (or another key) vouches for
	// nothing.
	keyFile, manifest := sealPaths(dir)
	require.NoError(t, os.WriteFile(keyFile, make([]byte, cacheSealKeyBytes), 0o600))
	_, removed, err = openCacheSeal(dir)
	require.NoError(t, err)
	require.Equal(t, 1, removed)
	load()
	b, err := os.ReadFile(manifest)
	require.NoError(t, err)
	// Flip the MAC's last hex digit, whatever it is.
	last := b[len(b)-3]
	flipped := byte('0')
	if last == '0' {
		flipped = '1'
	}
	require.NoError(t, os.WriteFile(manifest, append(b[:len(b)-3:len(b)-3], flipped, '"', '}'), 0o600))
	_, removed, err = openCacheSeal(dir)
	require.NoError(t, err)
	require.Equal(t, 1, removed)

	// A symlink planted in the cache is removed, not followed.
	load()
	outside := filepath.Join(t.TempDir(), "target")
	require.NoError(t, os.WriteFile(outside, []byte("x"), 0o600))
	link := filepath.Join(filepath.Dir(entry), "planted")
	require.NoError(t, os.Symlink(outside, link))
	_, _, err = openCacheSeal(dir)
	require.NoError(t, err)
	_, err = os.Lstat(link)
	require.True(t, os.IsNotExist(err))
	require.FileExists(t, outside)
}

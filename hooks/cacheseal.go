package hooks

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// The compilation cache holds native code that wazero maps executable
// and runs: a replaced entry is code run by the next worker, `run` or
// `check`. wazero checks only a CRC of each entry. So the chain seals
// the cache: a manifest beside it lists each entry file with its inode,
// size, modification and change times, under an HMAC-SHA256 whose key
// lives in a file of its own (0600) outside the cache directory. Before
// wazero reads the cache, every entry that the manifest does not list as
// it is now is removed, and wazero compiles that module again. Writing
// an entry, renaming one into place or restoring its mtime all change its
// change time (ctime), which no unprivileged process can set.

// cacheSealKeyBytes is the size of the HMAC key.
const cacheSealKeyBytes = 32

// cacheEntry is what the manifest records of one entry file.
type cacheEntry struct {
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MtimeNS int64  `json:"mtime_ns"`
	CtimeNS int64  `json:"ctime_ns"`
}

// cacheManifest is the manifest file: the entries by path relative to the
// cache directory, and the HMAC of their canonical JSON encoding.
type cacheManifest struct {
	Entries map[string]cacheEntry `json:"entries"`
	MAC     string                `json:"mac"`
}

// cacheSeal verifies and records one cache directory's entries.
type cacheSeal struct {
	dir, keyFile, manifestFile string
	key                        []byte
}

// sealPaths returns the key and manifest files of cache directory dir:
// siblings of it, named after it.
func sealPaths(dir string) (keyFile, manifestFile string) {
	clean := filepath.Clean(dir)
	return clean + ".key", clean + ".seal"
}

// openCacheSeal reads (or creates) the key of dir's seal and removes
// every entry of dir that the manifest does not vouch for. The count of
// entries removed is returned for tests and logs.
func openCacheSeal(dir string) (*cacheSeal, int, error) {
	s := &cacheSeal{dir: dir}
	s.keyFile, s.manifestFile = sealPaths(dir)
	key, err := readOrCreateKey(s.keyFile)
	if err != nil {
		return nil, 0, err
	}
	s.key = key
	trusted := s.readManifest()
	removed := 0
	err = s.walk(func(rel, path string, e cacheEntry) {
		if want, ok := trusted[rel]; !ok || want != e {
			if os.Remove(path) == nil {
				removed++
			}
		}
	})
	return s, removed, err
}

// record rewrites the manifest with dir's entries as they are now (after
// wazero wrote what it compiled), through a temporary file and a rename.
func (s *cacheSeal) record() error {
	m := cacheManifest{Entries: map[string]cacheEntry{}}
	if err := s.walk(func(rel, _ string, e cacheEntry) { m.Entries[rel] = e }); err != nil {
		return err
	}
	m.MAC = s.mac(m.Entries)
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.manifestFile), "."+filepath.Base(s.manifestFile)+".tmp-")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), s.manifestFile); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}

// readManifest returns the manifest's entries when its MAC holds, else
// none (everything in the cache is then removed).
func (s *cacheSeal) readManifest() map[string]cacheEntry {
	b, err := readRegular(s.manifestFile, 16<<20)
	if err != nil {
		return nil
	}
	var m cacheManifest
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	want, err := hex.DecodeString(m.MAC)
	if err != nil || !hmac.Equal(want, s.macBytes(m.Entries)) {
		return nil
	}
	return m.Entries
}

func (s *cacheSeal) macBytes(entries map[string]cacheEntry) []byte {
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)
	h := hmac.New(sha256.New, s.key)
	for _, n := range names {
		e := entries[n]
		fmt.Fprintf(h, "%q %d %d %d %d\n", n, e.Ino, e.Size, e.MtimeNS, e.CtimeNS)
	}
	return h.Sum(nil)
}

func (s *cacheSeal) mac(entries map[string]cacheEntry) string {
	return hex.EncodeToString(s.macBytes(entries))
}

// walk calls f for every regular file under the cache directory (hidden
// temporary files included: wazero writes entries through them). Anything
// that is not a regular file or a directory (a symlink, a FIFO) is
// removed: wazero would follow it.
func (s *cacheSeal) walk(f func(rel, path string, e cacheEntry)) error {
	return filepath.WalkDir(s.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return os.Remove(path)
		}
		fi, err := d.Info()
		if err != nil {
			return nil // gone meanwhile
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		rel, err := filepath.Rel(s.dir, path)
		if err != nil {
			return err
		}
		f(rel, path, cacheEntry{Ino: st.Ino, Size: st.Size, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano()})
		return nil
	})
}

// readOrCreateKey returns the key in path, creating it (0600, random)
// when it does not exist. A key file that is not a regular file of the
// right size is replaced (the manifest then no longer verifies, and the
// cache is emptied).
func readOrCreateKey(path string) ([]byte, error) {
	if b, err := readRegular(path, cacheSealKeyBytes+1); err == nil && len(b) == cacheSealKeyBytes {
		return b, nil
	}
	key := make([]byte, cacheSealKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return nil, err
	}
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return nil, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return nil, err
	}
	return key, nil
}

// readRegular reads path when it is a regular file (not a symlink) of at
// most limit bytes.
func readRegular(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > limit {
		return nil, errors.New("not a small regular file")
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && fi.Size() > 0 {
		return nil, err
	}
	return b, nil
}

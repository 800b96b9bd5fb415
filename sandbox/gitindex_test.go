package sandbox

import (
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// gitIndexRepo is a repository made by real git for the index tests.
type gitIndexRepo struct {
	t        testing.TB
	dir      string
	hashSize int
	blob     string // the empty blob, written to the object store
	commit   string // an object name of the repository's length, for gitlinks
}

// newGitIndexRepo runs "git init" with args in a new directory, with
// git's system and global configuration kept out.
func newGitIndexRepo(t testing.TB, args ...string) *gitIndexRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		unavailableTB(t, "git is not installed: nothing to write an index")
	}
	r := &gitIndexRepo{t: t, dir: t.TempDir(), hashSize: 20}
	r.git(append([]string{"init", "-q"}, args...)...)
	if slices.Contains(args, "--object-format=sha256") {
		r.hashSize = 32
	}
	r.blob = strings.TrimSpace(r.gitIn("", "hash-object", "-w", "--stdin"))
	r.commit = strings.Repeat("c", 2*r.hashSize)
	return r
}

// unavailableTB is [unavailable] for benchmarks and fuzz targets too.
func unavailableTB(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		unavailable(t, format, args...)
		return
	}
	tb.Skipf(format, args...)
}

func (r *gitIndexRepo) git(args ...string) string {
	r.t.Helper()
	return r.gitIn("", args...)
}

// gitIn runs git in the repository with stdin as its input.
func (r *gitIndexRepo) gitIn(stdin string, args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", r.dir}, args...)...)
	env := []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=" + r.dir,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(r.t, err, "git %q: %s", args, stderr.String())
	return string(out)
}

// add puts entries in the index at once ("git update-index
// --index-info"): each path with a "/" suffix-free name; a path in
// gitlinks is a gitlink, the others are empty files.
func (r *gitIndexRepo) add(files []string, gitlinks []string) {
	r.t.Helper()
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "100644 %s\t%s\n", r.blob, f)
	}
	for _, g := range gitlinks {
		fmt.Fprintf(&b, "160000 %s\t%s\n", r.commit, g)
	}
	r.gitIn(b.String(), "update-index", "--index-info")
}

func (r *gitIndexRepo) gitdir() string    { return filepath.Join(r.dir, ".git") }
func (r *gitIndexRepo) indexPath() string { return filepath.Join(r.dir, ".git", "index") }

func (r *gitIndexRepo) index() []byte {
	r.t.Helper()
	b, err := os.ReadFile(r.indexPath())
	require.NoError(r.t, err)
	return b
}

// gitlinks returns the gitlinks git lists, sorted, each once: "git
// ls-files --stage" with extra arguments, filtered to mode 160000.
func (r *gitIndexRepo) gitlinks(args ...string) []string {
	r.t.Helper()
	return r.gitlinksWith(nil, args...)
}

// gitlinksWith is gitlinks with git's options opts ("-c", "k=v").
func (r *gitIndexRepo) gitlinksWith(opts []string, args ...string) []string {
	r.t.Helper()
	var out []string
	for _, rec := range strings.Split(r.git(slices.Concat(opts, []string{"ls-files", "--stage", "-z"}, args)...), "\x00") {
		if mode, rest, ok := strings.Cut(rec, " "); ok && mode == "160000" {
			_, path, _ := strings.Cut(rest, "\t")
			out = append(out, path)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// read calls readGitlinks on the repository's index.
func (r *gitIndexRepo) read() ([]string, error) {
	return readGitlinks(r.gitdir(), r.indexPath(), r.hashSize)
}

func (r *gitIndexRepo) indexVersion() uint32 {
	return binary.BigEndian.Uint32(r.index()[4:])
}

// manyPaths returns n paths sharing long prefixes, as a source tree's.
func manyPaths(n int) []string {
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, fmt.Sprintf("src/module%02d/pkg%03d/file%04d.go", i%17, i%113, i))
	}
	return out
}

// TestReadGitlinksAgreesWithGit: on indexes real git writes, in each
// version and object format, readGitlinks lists the gitlinks "git
// ls-files --stage" lists.
func TestReadGitlinksAgreesWithGit(t *testing.T) {
	t.Parallel()
	gitlinks := []string{"a", "deps/lib", "deps/lib2", "deps/lib2x/deep/er", "src/module03/pkg003/vendored", "zz/last"}
	for _, tc := range []struct {
		name    string
		init    []string
		version string // for "git update-index --index-version"
		ita     bool   // add an intent-to-add entry, which makes git write v3
		want    uint32 // the version git must have written
	}{
		{name: "v2", want: 2},
		{name: "v3", ita: true, want: 3},
		{name: "v4", version: "4", want: 4},
		{name: "v4 intent-to-add", version: "4", ita: true, want: 4},
		{name: "sha256 v2", init: []string{"--object-format=sha256"}, want: 2},
		{name: "sha256 v3", init: []string{"--object-format=sha256"}, ita: true, want: 3},
		{name: "sha256 v4", init: []string{"--object-format=sha256"}, version: "4", want: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newGitIndexRepo(t, tc.init...)
			// A gitlink at stage 1 and 2 (a conflict) is listed once.
			r.add(manyPaths(300), gitlinks)
			r.gitIn(fmt.Sprintf("160000 %s 1\tconflict/sub\n160000 %s 2\tconflict/sub\n", r.commit, r.commit), "update-index", "--index-info")
			// A name of 0xfff bytes or more is not counted in the flags;
			// up to maxGitIndexPathBytes, it is read.
			r.add([]string{"x/" + strings.Repeat("l", 4093)}, []string{"y/" + strings.Repeat("l", 4094)})
			if tc.ita {
				require.NoError(t, os.WriteFile(filepath.Join(r.dir, "new.txt"), []byte("x"), 0o644))
				r.git("add", "-N", "new.txt")
			}
			if tc.version != "" {
				r.git("update-index", "--index-version", tc.version)
			}
			require.Equal(t, tc.want, r.indexVersion())
			want := r.gitlinks()
			require.Len(t, want, len(gitlinks)+2)
			got, err := r.read()
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

// TestReadGitlinksSplitIndex: a split index, whose entries are in two
// files, the shared one replaced, deleted and added to by the other:
// readGitlinks lists what git does, in both object formats and with the
// index in v2 and v4.
func TestReadGitlinksSplitIndex(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		init    []string
		version string
	}{
		{name: "sha1"},
		{name: "sha1 v4", version: "4"},
		{name: "sha256", init: []string{"--object-format=sha256"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newGitIndexRepo(t, tc.init...)
			// Never rewrite the shared index, so that both files keep entries.
			r.git("config", "splitIndex.maxPercentChange", "100")
			if tc.version != "" {
				r.git("config", "index.version", tc.version)
			}
			r.add(append(manyPaths(40), "file-becomes-gitlink"), []string{"kept", "replaced", "removed", "gitlink-becomes-file"})
			r.git("update-index", "--split-index")
			r.add([]string{"gitlink-becomes-file", "added-file"}, []string{"file-becomes-gitlink", "added", "zz/added"})
			r.gitIn(fmt.Sprintf("160000 %s\treplaced\n", strings.Repeat("d", 2*r.hashSize)), "update-index", "--index-info")
			r.git("update-index", "--force-remove", "removed", manyPaths(1)[0])

			shared, err := filepath.Glob(filepath.Join(r.gitdir(), "sharedindex.*"))
			require.NoError(t, err)
			require.Len(t, shared, 1)
			// The split file replaces 3 shared entries (a gitlink by a
			// gitlink, a gitlink by a file, a file by a gitlink), deletes 2
			// and adds 3.
			var names []string
			end, err := walkGitIndex("index", r.index(), r.hashSize, true, func(_, _ int, name []byte, _ uint32) error {
				names = append(names, string(name))
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, []string{"", "", "", "added", "added-file", "zz/added"}, names)
			link, _, err := findGitIndexExtension("index", r.index(), end, r.hashSize, gitIndexLinkExt)
			require.NoError(t, err)
			require.Greater(t, len(link), r.hashSize, "no bitmaps in the link extension")
			var del ewahBits
			_, err = del.init(link[r.hashSize:])
			require.NoError(t, err)
			for range 2 {
				_, ok, err := del.next()
				require.NoError(t, err)
				require.True(t, ok, "fewer than 2 entries deleted")
			}

			want := r.gitlinks()
			require.Equal(t, []string{"added", "file-becomes-gitlink", "kept", "replaced", "zz/added"}, want)
			got, err := r.read()
			require.NoError(t, err)
			require.Equal(t, want, got)

			// The shared index beside the index, when not in the git directory.
			moved := t.TempDir()
			require.NoError(t, os.Rename(r.indexPath(), filepath.Join(moved, "index")))
			require.NoError(t, os.Rename(shared[0], filepath.Join(moved, filepath.Base(shared[0]))))
			got, err = readGitlinks(r.gitdir(), filepath.Join(moved, "index"), r.hashSize)
			require.NoError(t, err)
			require.Equal(t, want, got)
			got, err = readGitlinks("", filepath.Join(moved, "index"), r.hashSize)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

// mustEntriesEnd returns where the entries of the index data end.
func mustEntriesEnd(t testing.TB, data []byte, hashSize int) int {
	t.Helper()
	end, err := walkGitIndex("index", data, hashSize, true, func(int, int, []byte, uint32) error { return nil })
	require.NoError(t, err)
	return end
}

// TestReadGitlinksSplitIndexBroken: a split index git would refuse is
// an error: its shared index missing or not the one linked, or empty
// names with no shared index to take names from.
func TestReadGitlinksSplitIndexBroken(t *testing.T) {
	t.Parallel()
	r := newGitIndexRepo(t)
	r.git("config", "splitIndex.maxPercentChange", "100")
	r.add(manyPaths(20), []string{"sub"})
	r.git("update-index", "--split-index")
	r.gitIn(fmt.Sprintf("160000 %s\tsub\n", strings.Repeat("d", 40)), "update-index", "--index-info")
	want := r.gitlinks()
	require.Equal(t, []string{"sub"}, want)
	got, err := r.read()
	require.NoError(t, err)
	require.Equal(t, want, got)

	shared, err := filepath.Glob(filepath.Join(r.gitdir(), "sharedindex.*"))
	require.NoError(t, err)
	require.Len(t, shared, 1)
	data, err := os.ReadFile(shared[0])
	require.NoError(t, err)

	// Its checksum is not the one linked.
	bad := bytes.Clone(data)
	bad[len(bad)-1] ^= 1
	require.NoError(t, os.WriteFile(shared[0], bad, 0o644))
	_, err = r.read()
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, "not "+strings.TrimPrefix(filepath.Base(shared[0]), "sharedindex."))

	// Missing.
	require.NoError(t, os.Remove(shared[0]))
	_, err = r.read()
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorIs(t, err, unix.ENOENT)
	require.NoError(t, os.WriteFile(shared[0], data, 0o644))

	// A link to no shared index (all zeros) leaves the empty name of the
	// replacement entry without a name.
	index := r.index()
	link, off, err := findGitIndexExtension("index", index, mustEntriesEnd(t, index, 20), 20, gitIndexLinkExt)
	require.NoError(t, err)
	require.NotNil(t, link)
	bad = bytes.Clone(index)
	clear(bad[off : off+20])
	require.NoError(t, os.WriteFile(r.indexPath(), bad, 0o644))
	_, err = r.read()
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, "empty name")
}

// ewahOf serializes a bitmap of the given set positions, all below
// 64*words, as literal words after one empty run-length word each.
func ewahOf(positions ...uint64) []byte {
	var lits []uint64
	for _, p := range positions {
		for uint64(len(lits)) <= p/64 {
			lits = append(lits, 0)
		}
		lits[p/64] |= 1 << (p % 64)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(64*len(lits)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(lits)+1))
	b = binary.BigEndian.AppendUint64(b, uint64(len(lits))<<33)
	for _, w := range lits {
		b = binary.BigEndian.AppendUint64(b, w)
	}
	return binary.BigEndian.AppendUint32(b, 0)
}

// TestReadGitlinksSplitIndexBitmaps: a split index whose bitmaps were
// rewritten. Those git reads, readGitlinks reads as git does (the
// replacement, a gitlink, takes the name of whichever shared entry it
// replaces); those git refuses are errors.
func TestReadGitlinksSplitIndexBitmaps(t *testing.T) {
	t.Parallel()
	r := newGitIndexRepo(t)
	r.git("config", "splitIndex.maxPercentChange", "100")
	r.add(manyPaths(20), []string{"sub"})
	r.git("update-index", "--split-index")
	r.gitIn(fmt.Sprintf("160000 %s\tsub\n", strings.Repeat("d", 40)), "update-index", "--index-info")
	shared := strings.Split(strings.TrimSuffix(r.git("ls-files", "-z"), "\x00"), "\x00")
	require.Len(t, shared, 21)
	require.Equal(t, "sub", shared[20])
	index := r.index()
	end := mustEntriesEnd(t, index, 20)
	link, _, err := findGitIndexExtension("index", index, end, 20, gitIndexLinkExt)
	require.NoError(t, err)
	base := link[:20]
	// The index with a link extension of base and these bitmaps, and no
	// other extension.
	withLink := func(del, rep []byte, extra string) []byte {
		data := slices.Concat(base, del, rep, []byte(extra))
		return slices.Concat(index[:end], []byte(gitIndexLinkExt), binary.BigEndian.AppendUint32(nil, uint32(len(data))), data, make([]byte, 20))
	}
	// As git wrote it: the gitlink replaced by a gitlink.
	good := withLink(ewahOf(), ewahOf(20), "")
	require.NoError(t, os.WriteFile(r.indexPath(), good, 0o644))
	require.Equal(t, []string{"sub"}, r.gitlinks())
	got, err := r.read()
	require.NoError(t, err)
	require.Equal(t, []string{"sub"}, got)
	// The first file replaced by the gitlink, the third deleted: git
	// lists the file's name as a gitlink, and the shared "sub".
	require.NoError(t, os.WriteFile(r.indexPath(), withLink(ewahOf(2), ewahOf(0), ""), 0o644))
	want := r.gitlinks()
	require.Equal(t, []string{shared[0], "sub"}, want)
	got, err = r.read()
	require.NoError(t, err)
	require.Equal(t, want, got)
	// sub deleted: no gitlink but the replacement.
	require.NoError(t, os.WriteFile(r.indexPath(), withLink(ewahOf(20), ewahOf(1), ""), 0o644))
	want = r.gitlinks()
	require.Equal(t, []string{shared[1]}, want)
	got, err = r.read()
	require.NoError(t, err)
	require.Equal(t, want, got)

	for _, tc := range []struct {
		name, why string
		data      []byte
	}{
		{"replaced beyond", "bitmaps name entry 21, beyond the 21 entries", withLink(ewahOf(), ewahOf(21), "")},
		{"deleted beyond", "bitmaps name entry 100, beyond the 21 entries", withLink(ewahOf(100), ewahOf(20), "")},
		{"replaced and deleted", "entry 20 is both replaced and deleted", withLink(ewahOf(20), ewahOf(20), "")},
		{"too many replaced", "entry 1 is replaced by", withLink(ewahOf(), ewahOf(0, 1), "")},
		{"too few replaced", "replaces 0 entries", withLink(ewahOf(), ewahOf(), "")},
		{"garbage after the bitmaps", "1 bytes after the link extension's bitmaps", withLink(ewahOf(), ewahOf(20), "x")},
		{"no replace bitmap", "replace bitmap", withLink(ewahOf(), nil, "")},
		// A second link, to no shared index, which git would read last.
		{"two links", `a second "link" extension`, slices.Concat(good[:len(good)-20], []byte(gitIndexLinkExt), []byte{0, 0, 0, 20}, make([]byte, 20+20))},
		{"short link", "shorter than an object name", slices.Concat(index[:end], []byte("link\x00\x00\x00\x04"), base[:4], make([]byte, 20))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(r.indexPath(), tc.data, 0o644))
			_, err := r.read()
			require.ErrorIs(t, err, ErrBadPath)
			require.ErrorContains(t, err, tc.why)
			require.ErrorContains(t, err, r.indexPath())
		})
	}
}

// TestReadGitlinksSparseIndex: a sparse index's directory entries (mode
// 040000) are listed with their "/", beside the gitlinks outside them.
func TestReadGitlinksSparseIndex(t *testing.T) {
	t.Parallel()
	r := newGitIndexRepo(t)
	// git never makes a directory holding a gitlink sparse
	// (sparse-index.c convert_to_sparse_rec).
	r.add([]string{"in/file", "out/file", "out/deeper/file", "top"}, []string{"in/sub", "sub"})
	r.git("commit", "-q", "-m", "x")
	r.git("sparse-checkout", "init", "--cone", "--sparse-index")
	r.git("sparse-checkout", "set", "in")
	var sparseDirs int
	for _, rec := range strings.Split(r.git("ls-files", "--sparse", "--stage", "-z"), "\x00") {
		if strings.HasPrefix(rec, "040000 ") {
			sparseDirs++
		}
	}
	require.Equal(t, 1, sparseDirs, "git wrote no sparse directory entry")
	want := r.gitlinks("--sparse")
	require.Equal(t, []string{"in/sub", "sub"}, want)
	got, err := r.read()
	require.NoError(t, err)
	require.Equal(t, []string{"in/sub", "out/", "sub"}, got, "the gitlinks, and the sparse directory, whose gitlinks the index does not list")
}

// TestReadGitlinksFile: what stands at the index path. A missing index
// (or git directory) has no gitlinks; a symlink to an index is followed,
// as git follows it; a FIFO, a device, a directory and a file over
// maxGitIndexBytes are refused without being read, nor waited on.
func TestReadGitlinksFile(t *testing.T) {
	t.Parallel()
	r := newGitIndexRepo(t)
	r.add([]string{"f"}, []string{"sub"})
	dir := t.TempDir()

	got, err := readGitlinks(dir, filepath.Join(dir, "index"), 20)
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = readGitlinks(dir, filepath.Join(dir, "missing", "index"), 20)
	require.NoError(t, err)
	require.Empty(t, got)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o644))
	got, err = readGitlinks(dir, filepath.Join(dir, "file", "index"), 20)
	require.NoError(t, err)
	require.Empty(t, got)

	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(r.indexPath(), link))
	got, err = readGitlinks(r.gitdir(), link, 20)
	require.NoError(t, err)
	require.Equal(t, []string{"sub"}, got)

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o644))
	fifoLink := filepath.Join(dir, "fifo-link")
	require.NoError(t, os.Symlink(fifo, fifoLink))
	devLink := filepath.Join(dir, "dev-link")
	require.NoError(t, os.Symlink("/dev/zero", devLink))
	huge := filepath.Join(dir, "huge")
	require.NoError(t, os.WriteFile(huge, nil, 0o644))
	require.NoError(t, os.Truncate(huge, maxGitIndexBytes+1))
	for _, tc := range []struct {
		path  string
		errno syscall.Errno
	}{
		{fifo, unix.EINVAL}, {fifoLink, unix.EINVAL}, {devLink, unix.EINVAL}, {dir, unix.EINVAL}, {huge, unix.EFBIG},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := readGitlinks(dir, tc.path, 20)
			done <- err
		}()
		select {
		case err := <-done:
			require.ErrorIs(t, err, ErrBadPath, tc.path)
			require.ErrorIs(t, err, tc.errno, tc.path)
			require.ErrorContains(t, err, tc.path)
		case <-time.After(time.Minute):
			t.Fatalf("readGitlinks(%s) has not returned after a minute: it blocks", tc.path)
		}
	}
}

// TestReadGitlinksTruncated: an index cut at every byte is an error, or
// lists only gitlinks of the whole one (a cut in the checksum or
// extensions); never a panic.
func TestReadGitlinksTruncated(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"2", "3", "4"} {
		t.Run("v"+version, func(t *testing.T) {
			t.Parallel()
			r := newGitIndexRepo(t)
			r.add(manyPaths(12), []string{"deps/a", "deps/b", "src/module01/sub"})
			if version == "3" {
				require.NoError(t, os.WriteFile(filepath.Join(r.dir, "new.txt"), []byte("x"), 0o644))
				r.git("add", "-N", "new.txt")
			} else {
				r.git("update-index", "--index-version", version)
			}
			r.git("commit", "-q", "-m", "x") // a TREE extension
			full := r.index()
			want, err := r.read()
			require.NoError(t, err)
			require.Len(t, want, 3)
			path := filepath.Join(t.TempDir(), "index")
			var errs int
			for n := range len(full) {
				require.NoError(t, os.WriteFile(path, full[:n], 0o644))
				got, err := readGitlinks(r.gitdir(), path, 20)
				if err != nil {
					require.ErrorIs(t, err, ErrBadPath, "cut at %d", n)
					errs++
					continue
				}
				require.Subset(t, want, got, "cut at %d", n)
			}
			// Every cut inside the entries is an error.
			require.GreaterOrEqual(t, errs, mustEntriesEnd(t, full, 20))
		})
	}
}

// TestReadGitlinksHostile: indexes real git wrote, then altered where a
// careless reader trusts them. Each is an error naming the file and the
// byte at fault; none panics or allocates by a count.
func TestReadGitlinksHostile(t *testing.T) {
	t.Parallel()
	// One entry "aa/bb": its flags at byte 72, name at 74 (v2) or its
	// strip count at 74 and name at 75 (v4); a second entry "b".
	const flagsAt, nameAt = 12 + 40 + 20, 12 + 40 + 20 + 2
	build := func(t *testing.T, version string, ita bool) []byte {
		r := newGitIndexRepo(t)
		r.add(nil, []string{"aa/bb", "b"})
		if ita {
			require.NoError(t, os.WriteFile(filepath.Join(r.dir, "a0"), []byte("x"), 0o644))
			r.git("add", "-N", "a0")
		}
		if version != "" {
			r.git("update-index", "--index-version", version)
		}
		return r.index()
	}
	v2, v3, v4 := build(t, "", false), build(t, "", true), build(t, "4", false)
	require.Equal(t, "aa/bb\x00", string(v2[nameAt:nameAt+6]))
	require.Equal(t, "\x00aa/bb\x00", string(v4[nameAt:nameAt+7]))
	patch := func(b []byte, at int, with string) []byte {
		b = bytes.Clone(b)
		copy(b[at:], with)
		return b
	}
	splice := func(b []byte, at, drop int, with string) []byte {
		return slices.Concat(b[:at], []byte(with), b[at+drop:])
	}
	trailer := bytes.Repeat([]byte{1}, 20) // a checksum, never checked
	// The v3 entry "a0" is intent-to-add, the first, with extended flags.
	require.Equal(t, "a0\x00", string(v3[nameAt+2:nameAt+5]))
	for _, tc := range []struct {
		name, why string
		data      []byte
		at        int
	}{
		{"count 2^32-1", "entry 2 of the 4294967295", patch(v2, 8, "\xff\xff\xff\xff"), 12 + 72 + 64},
		{"count 2^32-1 v4", "entry 2 of the 4294967295", patch(v4, 8, "\xff\xff\xff\xff"), 12 + 69 + 65},
		{"name length too long", "length field says 6", patch(v2, flagsAt+1, "\x06"), flagsAt},
		{"name length too short", "length field says 4", patch(v2, flagsAt+1, "\x04"), flagsAt},
		{"name length 0xfff on a short name", "says 4095 or more, its name is 5", patch(v2, flagsAt, "\x0f\xff"), flagsAt},
		{"v4 name length lies", "length field says 4, its name is 5", patch(v4, flagsAt+1, "\x04"), flagsAt},
		{"v4 varint overflows", "overflows", splice(v4, nameAt, 1, strings.Repeat("\xff", 10)+"\x01"), nameAt},
		{"v4 strips more than the name", "strips 6 bytes from the previous name, of 5", patch(v4, 12+69+62, "\x06"), 12 + 69 + 62},
		{"unknown extended flag", "extended flags 0xa000", patch(v3, nameAt, "\xa0\x00"), nameAt},
		{"bad version", "version 5", patch(v2, 7, "\x05"), 4},
		{"bad signature", "signature", patch(v2, 0, "DIRK"), 0},
		{"dot-dot", `"../bb" has a ".." component`, patch(v2, nameAt, "../bb"), nameAt},
		{"dot", `"a/./b" has a "." component`, patch(v2, nameAt, "a/./b"), nameAt},
		{"absolute", "is absolute", patch(v2, nameAt, "/a/bb"), nameAt},
		{"empty component", "has an empty component", patch(v2, nameAt, "aa//b"), nameAt},
		{"trailing slash", "ends in '/'", patch(v2, nameAt, "aa/b/"), nameAt},
		// One entry, with flags of an empty name, an empty name, NULs.
		{"empty name", "an entry with an empty name, and no shared index", slices.Concat(patch(v2, 8, "\x00\x00\x00\x01")[:flagsAt], make([]byte, 4), trailer), 12},
		{"v4 empty name", "an entry with an empty name, and no shared index", slices.Concat(patch(v4, 8, "\x00\x00\x00\x01")[:flagsAt], make([]byte, 4), trailer), 12},
		{"v4 name without its NUL", "name runs past the end of the entries", slices.Concat(patch(v4, 8, "\x00\x00\x00\x01")[:nameAt+6], trailer), nameAt + 1},
		{"extension past the end", `extension "TREE"`, slices.Concat(v2[:len(v2)-20], []byte("TREE\x00\x00\x10\x00"), v2[len(v2)-20:]), len(v2) - 20 + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "index")
			require.NoError(t, os.WriteFile(path, tc.data, 0o644))
			got, err := readGitlinks(dir, path, 20)
			require.ErrorIs(t, err, ErrBadPath)
			require.ErrorContains(t, err, tc.why)
			require.ErrorContains(t, err, fmt.Sprintf("git index %s, byte %d: ", path, tc.at))
			require.Nil(t, got)
		})
	}

	// A name over maxGitIndexPathBytes, which git writes.
	r := newGitIndexRepo(t)
	r.add(nil, []string{strings.Repeat("n", maxGitIndexPathBytes+1)})
	_, err := r.read()
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, "longer than 4096 bytes")
	r.git("update-index", "--index-version", "4")
	_, err = r.read()
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, "longer than 4096 bytes")

	// hashSize must be an object name's.
	_, err = readGitlinks(r.gitdir(), r.indexPath(), 16)
	require.ErrorIs(t, err, ErrBadPath)
}

// TestGitVarint: git's varint (varint.c), in which each continuation
// adds one, so that each value has one encoding.
func TestGitVarint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want uint64
		n    int
	}{
		{"\x00", 0, 1}, {"\x7f", 127, 1}, {"\x80\x00", 128, 2}, {"\x80\x7f", 255, 2}, {"\x81\x00", 256, 2},
		{"\xff\x7f", 16511, 2}, {"\x05rest", 5, 1},
		{"", 0, 0}, {"\x80", 0, 0},
		{strings.Repeat("\xff", 10) + "\x01", 0, -1},
	} {
		v, n := gitVarint([]byte(tc.in))
		require.Equal(t, tc.want, v, "%q", tc.in)
		require.Equal(t, tc.n, n, "%q", tc.in)
	}
	for _, v := range []uint64{0, 1, 127, 128, 16511, 16512, 1<<56 - 1, 1 << 56, 1<<63 + 12345, 1<<64 - 1} {
		got, n := gitVarint([]byte(encodeGitVarint(v)))
		require.Equal(t, v, got)
		require.Equal(t, len(encodeGitVarint(v)), n)
	}
}

// encodeGitVarint is varint.c encode_varint.
func encodeGitVarint(v uint64) string {
	var buf [16]byte
	pos := len(buf) - 1
	buf[pos] = byte(v & 127)
	for v >>= 7; v != 0; v >>= 7 {
		v--
		pos--
		buf[pos] = 128 | byte(v&127)
	}
	return string(buf[pos:])
}

// TestEwahBits: bitmaps as git serializes them: runs of ones and zeros,
// literal words, and the errors of a hostile one.
func TestEwahBits(t *testing.T) {
	t.Parallel()
	ser := func(words ...uint64) []byte {
		b := binary.BigEndian.AppendUint32(nil, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(words)))
		for _, w := range words {
			b = binary.BigEndian.AppendUint64(b, w)
		}
		return binary.BigEndian.AppendUint32(b, 0)
	}
	rlw := func(bit uint64, run, lits uint64) uint64 { return bit | run<<1 | lits<<33 }
	all := func(b []byte) ([]uint64, error) {
		var e ewahBits
		n, err := e.init(b)
		if err != nil {
			return nil, err
		}
		if n != len(b) {
			return nil, fmt.Errorf("read %d of %d bytes", n, len(b))
		}
		var out []uint64
		for {
			p, ok, err := e.next()
			if err != nil || !ok {
				return out, err
			}
			out = append(out, p)
		}
	}
	got, err := all(ser())
	require.NoError(t, err)
	require.Empty(t, got)
	// One zero word run, then a literal with bits 0, 3 and 63.
	got, err = all(ser(rlw(0, 1, 1), 1|1<<3|1<<63))
	require.NoError(t, err)
	require.Equal(t, []uint64{64, 67, 127}, got)
	// A run of one word of ones, then a run of two zero words and a literal.
	got, err = all(ser(rlw(1, 1, 0), rlw(0, 2, 1), 2))
	require.NoError(t, err)
	require.Len(t, got, 65)
	require.Equal(t, uint64(63), got[63])
	require.Equal(t, uint64(64+128+1), got[64])
	// A literal count beyond the words.
	_, err = all(ser(rlw(0, 0, 2), 1))
	require.ErrorContains(t, err, "more literal words")
	// Zero runs past git's 32-bit entry counts.
	_, err = all(ser(rlw(0, 1<<32-1, 0), rlw(0, 1<<32-1, 0)))
	require.ErrorContains(t, err, "beyond")
	// A word count beyond the bytes.
	var e ewahBits
	_, err = e.init(ser(1)[:15])
	require.ErrorContains(t, err, "more than its")
}

// FuzzReadGitlinks: whatever the bytes, readGitlinks returns an error
// or valid names, and never panics. Seeded with indexes git wrote.
func FuzzReadGitlinks(f *testing.F) {
	for _, version := range []string{"2", "3", "4"} {
		r := newGitIndexRepo(f)
		r.add(manyPaths(5), []string{"deps/a", "deps/b"})
		if version == "3" {
			require.NoError(f, os.WriteFile(filepath.Join(r.dir, "new.txt"), []byte("x"), 0o644))
			r.git("add", "-N", "new.txt")
		} else {
			r.git("update-index", "--index-version", version)
		}
		f.Add(r.index(), false)
	}
	r := newGitIndexRepo(f, "--object-format=sha256")
	r.add(manyPaths(3), []string{"sub"})
	f.Add(r.index(), true)
	// A split index, whose shared index is in dir.
	dir := f.TempDir()
	r = newGitIndexRepo(f)
	r.git("config", "splitIndex.maxPercentChange", "100")
	r.add(manyPaths(5), []string{"deps/a", "deps/b", "deps/c"})
	r.git("update-index", "--split-index")
	r.add([]string{"deps/a"}, []string{"deps/d", manyPaths(1)[0]})
	r.git("update-index", "--force-remove", "deps/b")
	want := r.gitlinks()
	shared, err := filepath.Glob(filepath.Join(r.gitdir(), "sharedindex.*"))
	require.NoError(f, err)
	require.Len(f, shared, 1)
	require.NoError(f, os.Rename(shared[0], filepath.Join(dir, filepath.Base(shared[0]))))
	got, err := gitlinksOfIndex(dir, filepath.Join(dir, "index"), r.index(), 20)
	require.NoError(f, err)
	require.Equal(f, want, got)
	f.Add(r.index(), false)
	f.Fuzz(func(t *testing.T, data []byte, sha256 bool) {
		hashSize := 20
		if sha256 {
			hashSize = 32
		}
		got, err := gitlinksOfIndex(dir, filepath.Join(dir, "index"), data, hashSize)
		if err != nil {
			require.ErrorIs(t, err, ErrBadPath)
			require.Nil(t, got)
			return
		}
		for _, p := range got {
			require.Empty(t, badGitIndexPath([]byte(p), false), "%q", p)
		}
	})
}

// BenchmarkReadGitlinks: an index of 10,000 entries, 5 of them
// gitlinks, as git writes it in v2 and v4.
func BenchmarkReadGitlinks(b *testing.B) {
	for _, version := range []string{"2", "4"} {
		b.Run("v"+version, func(b *testing.B) {
			r := newGitIndexRepo(b)
			r.add(manyPaths(10000-5), []string{"a", "deps/x", "deps/y", "src/module01/sub", "zz"})
			r.git("update-index", "--index-version", version)
			want := r.gitlinks()
			require.Len(b, want, 5)
			b.SetBytes(int64(len(r.index())))
			b.ResetTimer()
			for b.Loop() {
				got, err := r.read()
				if err != nil || len(got) != 5 {
					b.Fatal(got, err)
				}
			}
		})
	}
}

// withThreads and withoutThreads make git read an index with 4 threads
// (so EOIE and IEOT are used, whatever the machine's CPUs) or one.
var (
	withThreads    = []string{"-c", "index.threads=4"}
	withoutThreads = []string{"-c", "index.threads=1"}
)

// gitIndexExt is one extension of an index file.
type gitIndexExt struct {
	off  int // the offset of its header
	sig  string
	body []byte
}

// gitIndexExts returns the extensions of the index data after its
// entries, which end at end.
func gitIndexExts(t testing.TB, data []byte, end, hashSize int) []gitIndexExt {
	t.Helper()
	var out []gitIndexExt
	for off := end; off < len(data)-hashSize; {
		size := int(binary.BigEndian.Uint32(data[off+4:]))
		out = append(out, gitIndexExt{off, string(data[off : off+4]), data[off+8 : off+8+size]})
		off += 8 + size
	}
	require.Equal(t, len(data)-hashSize, func() int { e := out[len(out)-1]; return e.off + 8 + len(e.body) }())
	return out
}

// appendGitIndexExt appends an extension to b.
func appendGitIndexExt(b []byte, sig string, body []byte) []byte {
	b = append(b, sig...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	return append(b, body...)
}

// finishSHA1Index appends to b, an index's header, entries and
// extensions, an EOIE extension giving eoie as where the extensions
// start (none if eoie < 0), with the hash over the extension headers
// from there that git's read_eoie_extension checks, and the trailing
// SHA-1 checksum: a file git reads as one it wrote.
func finishSHA1Index(b []byte, eoie int) []byte {
	if eoie >= 0 {
		h := sha1.New()
		for off := eoie; off < len(b); off += 8 + int(binary.BigEndian.Uint32(b[off+4:])) {
			h.Write(b[off : off+8])
		}
		b = appendGitIndexExt(b, gitIndexEOIEExt, h.Sum(binary.BigEndian.AppendUint32(nil, uint32(eoie))))
	}
	sum := sha1.Sum(b)
	return append(b, sum[:]...)
}

// newThreadedGitIndexRepo returns a repository whose index git wrote
// with the EOIE and IEOT extensions, in version version, holding more
// than 10,000 entries and gitlinks; split, a split index whose shared
// index holds them.
func newThreadedGitIndexRepo(t *testing.T, version string, split bool, init ...string) *gitIndexRepo {
	t.Helper()
	r := newGitIndexRepo(t, init...)
	for _, kv := range [][2]string{
		{"index.version", version}, {"splitIndex.maxPercentChange", "100"}, {"index.threads", "4"},
		{"index.recordEndOfIndexEntries", "true"}, {"index.recordOffsetTable", "true"},
	} {
		r.git("config", kv[0], kv[1])
	}
	r.add(manyPaths(12000), []string{"a/sub", "src/module05/sub", "zz/sub"})
	if split {
		r.git("update-index", "--split-index")
		r.gitIn(fmt.Sprintf("160000 %s\tsrc/module07/added\n", r.commit), "update-index", "--index-info")
	}
	return r
}

// requireThreadedGitIndex checks that git wrote the index file data,
// with object names of hashSize bytes, with an EOIE extension and an
// IEOT of more than one block, and returns where its entries end and
// the IEOT extension.
func requireThreadedGitIndex(t *testing.T, data []byte, hashSize int) (int, gitIndexExt) {
	t.Helper()
	end := mustEntriesEnd(t, data, hashSize)
	exts := gitIndexExts(t, data, end, hashSize)
	eoie := exts[len(exts)-1]
	require.Equal(t, gitIndexEOIEExt, eoie.sig)
	// git writes 4 + hashSize bytes, but reads it only where and as
	// long as a SHA-1 one is.
	require.Equal(t, len(data)-hashSize-8-4-hashSize, eoie.off, "EOIE not last")
	require.Equal(t, uint32(end), binary.BigEndian.Uint32(eoie.body))
	i := slices.IndexFunc(exts, func(e gitIndexExt) bool { return e.sig == gitIndexIEOTExt })
	require.GreaterOrEqual(t, i, 0, "no IEOT extension")
	require.Greater(t, len(exts[i].body), 4+8, "an IEOT of one block")
	return end, exts[i]
}

// TestReadGitlinksThreadedIndex: indexes git writes to be read with
// several threads (EOIE and IEOT extensions, in the index and in the
// shared index of a split one) read as git lists them with threads and
// without.
func TestReadGitlinksThreadedIndex(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		split   bool
		init    []string
	}{
		{"2", false, nil}, {"4", false, nil}, {"2", true, nil}, {"4", true, nil},
		{"4", false, []string{"--object-format=sha256"}}, {"2", true, []string{"--object-format=sha256"}},
	} {
		t.Run(fmt.Sprintf("v%s split %v %s", tc.version, tc.split, tc.init), func(t *testing.T) {
			t.Parallel()
			r := newThreadedGitIndexRepo(t, tc.version, tc.split, tc.init...)
			data := r.index()
			require.Equal(t, tc.version, fmt.Sprint(binary.BigEndian.Uint32(data[4:])))
			if tc.split {
				shared, err := filepath.Glob(filepath.Join(r.gitdir(), "sharedindex.*"))
				require.NoError(t, err)
				require.Len(t, shared, 1)
				sdata, err := os.ReadFile(shared[0])
				require.NoError(t, err)
				requireThreadedGitIndex(t, sdata, r.hashSize)
			} else {
				requireThreadedGitIndex(t, data, r.hashSize)
			}
			want := r.gitlinksWith(withoutThreads)
			wantN := 3
			if tc.split {
				wantN = 4
			}
			require.Len(t, want, wantN)
			require.Equal(t, want, r.gitlinksWith(withThreads))
			got, err := r.read()
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}

// gitIndexEntryOffsets returns the offsets of the entries of the index
// data.
func gitIndexEntryOffsets(t testing.TB, data []byte) []int {
	t.Helper()
	var offs []int
	_, err := walkGitIndex("index", data, 20, true, func(_, off int, _ []byte, _ uint32) error {
		offs = append(offs, off)
		return nil
	})
	require.NoError(t, err)
	return offs
}

// TestReadGitlinksThreadedIndexHostile: an index whose EOIE or IEOT
// extension would make git, reading it with threads, see other
// extensions or entries than the walk of its entries and extensions
// one after the other is an error, naming the file and the offset.
func TestReadGitlinksThreadedIndexHostile(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"2", "4"} {
		t.Run("v"+version, func(t *testing.T) {
			t.Parallel()
			r := newThreadedGitIndexRepo(t, version, false)
			data := r.index()
			end, ieot := requireThreadedGitIndex(t, data, r.hashSize)
			offs := gitIndexEntryOffsets(t, data)
			block := func(b []byte, i int) (off, n uint32) { // IEOT block i of b
				at := ieot.off + 8 + 4 + 8*i
				return binary.BigEndian.Uint32(b[at:]), binary.BigEndian.Uint32(b[at+4:])
			}
			setBlock := func(b []byte, i int, off, n uint32) {
				at := ieot.off + 8 + 4 + 8*i
				binary.BigEndian.PutUint32(b[at:], off)
				binary.BigEndian.PutUint32(b[at+4:], n)
			}
			nBlocks := (len(ieot.body) - 4) / 8
			off0, n0 := block(data, 0)
			require.Equal(t, uint32(offs[0]), off0)
			off1, n1 := block(data, 1)
			require.Equal(t, uint32(offs[n0]), off1)
			offL, nL := block(data, nBlocks-1)

			// Rebuilt with the IEOT's content changed, or a second IEOT.
			for _, tc := range []struct {
				name string
				ieot func(body []byte) []byte
				two  bool
				want string
			}{
				{name: "rebuilt as git wrote it", ieot: func(body []byte) []byte { return body }},
				{name: "IEOT of a partial block", ieot: func(body []byte) []byte { return append(bytes.Clone(body), 0, 0, 0, 0) },
					want: fmt.Sprintf("IEOT extension of %d bytes, not a version and one or more blocks of 8", len(ieot.body)+4)},
				{name: "IEOT of no block", ieot: func(body []byte) []byte { return body[:4] },
					want: "IEOT extension of 4 bytes"},
				{name: "two IEOT", ieot: func(body []byte) []byte { return body }, two: true,
					want: `a second "IEOT" extension`},
			} {
				b := bytes.Clone(data[:end])
				for _, e := range gitIndexExts(t, data, end, 20) {
					switch e.sig {
					case gitIndexIEOTExt:
						b = appendGitIndexExt(b, e.sig, tc.ieot(e.body))
						if tc.two {
							b = appendGitIndexExt(b, e.sig, e.body)
						}
					case gitIndexEOIEExt:
					default:
						b = appendGitIndexExt(b, e.sig, e.body)
					}
				}
				path := filepath.Join(t.TempDir(), "index")
				require.NoError(t, os.WriteFile(path, finishSHA1Index(b, end), 0o644))
				got, err := readGitlinks("", path, 20)
				if tc.want == "" {
					require.NoError(t, err, tc.name)
					require.Equal(t, r.gitlinks(), got, tc.name)
					continue
				}
				require.ErrorIs(t, err, ErrBadPath, tc.name)
				require.ErrorContains(t, err, tc.want, tc.name)
				require.ErrorContains(t, err, fmt.Sprintf("git index %s, byte ", path), tc.name)
			}

			for _, tc := range []struct {
				name  string
				edit  func(b []byte)
				want  string // in the error; "" for none
				at    int    // the offset the error names
				wantV string // the version the case is for; "" for both
			}{
				{name: "EOIE offset moved", edit: func(b []byte) {
					binary.BigEndian.PutUint32(b[len(b)-20-gitIndexEOIEBytes+8:], uint32(end+8))
				}, want: "EOIE extension says the extensions start at byte", at: len(data) - 20 - gitIndexEOIEBytes + 8},
				{name: "IEOT version", edit: func(b []byte) { binary.BigEndian.PutUint32(b[ieot.off+8:], 2) },
					want: "IEOT extension version 2", at: ieot.off + 8},
				{name: "IEOT block not at an entry", edit: func(b []byte) { setBlock(b, 1, off1+8, n1) },
					want: "IEOT block 1 starts at byte", at: ieot.off + 8 + 4 + 8},
				{name: "IEOT block overlapping the previous", edit: func(b []byte) { setBlock(b, 0, off0, n0+1) },
					want: "IEOT block 1 starts at byte", at: ieot.off + 8 + 4 + 8},
				{name: "IEOT counting beyond the entries", edit: func(b []byte) { setBlock(b, nBlocks-1, offL, nL+1) },
					want: "beyond the", at: ieot.off + 8 + 4 + 8*(nBlocks-1) + 4},
				{name: "IEOT counting fewer entries", edit: func(b []byte) { setBlock(b, nBlocks-1, offL, nL-1) },
					want: fmt.Sprintf("IEOT blocks count %d entries, not the %d", len(offs)-1, len(offs)), at: ieot.off + 8},
				{name: "IEOT pointing into its own extension", edit: func(b []byte) { setBlock(b, 1, uint32(ieot.off), n1) },
					want: "IEOT block 1 starts at byte", at: ieot.off + 8 + 4 + 8},
				// The first block one entry longer, the second one
				// shorter: a tiling, which git reads the same in v2; in
				// v4 the second block's first entry strips part of the
				// previous name, which git reading it with threads, with
				// no previous name, would read as another.
				{name: "IEOT boundary one entry on", edit: func(b []byte) {
					setBlock(b, 0, off0, n0+1)
					setBlock(b, 1, uint32(offs[n0+1]), n1-1)
				}, wantV: "2"},
				{name: "IEOT boundary one entry on", edit: func(b []byte) {
					setBlock(b, 0, off0, n0+1)
					setBlock(b, 1, uint32(offs[n0+1]), n1-1)
				}, want: fmt.Sprintf("entry %d starts IEOT block 1 but does not strip the whole previous name", n0+1), at: offs[n0+1], wantV: "4"},
			} {
				if tc.wantV != "" && tc.wantV != version {
					continue
				}
				bad := bytes.Clone(data)
				tc.edit(bad)
				path := filepath.Join(t.TempDir(), "index")
				require.NoError(t, os.WriteFile(path, bad, 0o644))
				got, err := readGitlinks("", path, 20)
				if tc.want == "" {
					require.NoError(t, err, tc.name)
					require.Equal(t, r.gitlinks(), got, tc.name)
					continue
				}
				require.ErrorIs(t, err, ErrBadPath, tc.name)
				require.ErrorContains(t, err, tc.want, tc.name)
				require.ErrorContains(t, err, fmt.Sprintf("git index %s, byte %d:", path, tc.at), tc.name)
			}
		})
	}
}

// TestReadGitlinksThreadedIndexHidden: git reading with threads sees a
// gitlink that a walk of the entries and extensions one after the other
// does not, in an index whose EOIE makes git read a "link" extension
// the walk takes for the content of another, or whose IEOT makes git
// read an entry from an extension's content; readGitlinks refuses both.
func TestReadGitlinksThreadedIndexHidden(t *testing.T) {
	t.Parallel()
	t.Run("EOIE", func(t *testing.T) {
		t.Parallel()
		r := newThreadedGitIndexRepo(t, "2", true)
		data := r.index()
		end := mustEntriesEnd(t, data, 20)
		// The extensions but EOIE, inside one git ignores ("ZZZZ":
		// upper case, unknown), which EOIE says is where they start.
		var inner []byte
		exts := gitIndexExts(t, data, end, 20)
		for _, e := range exts[:len(exts)-1] {
			inner = appendGitIndexExt(inner, e.sig, e.body)
		}
		require.Contains(t, string(inner), gitIndexLinkExt)
		b := appendGitIndexExt(bytes.Clone(data[:end]), "ZZZZ", inner)
		require.NoError(t, os.WriteFile(r.indexPath(), finishSHA1Index(b, end+8), 0o644))

		require.Equal(t, []string{"src/module07/added"}, r.gitlinksWith(withoutThreads))
		require.Equal(t, []string{"a/sub", "src/module05/sub", "src/module07/added", "zz/sub"}, r.gitlinksWith(withThreads))
		_, err := r.read()
		require.ErrorIs(t, err, ErrBadPath)
		require.ErrorContains(t, err, fmt.Sprintf("byte %d: EOIE extension says the extensions start at byte %d, but the entries end at byte %d", len(b)+8, end+8, end))
	})
	t.Run("IEOT", func(t *testing.T) {
		t.Parallel()
		r := newThreadedGitIndexRepo(t, "2", false)
		r.add([]string{"zzz"}, nil)
		data := r.index()
		end := mustEntriesEnd(t, data, 20)
		offs := gitIndexEntryOffsets(t, data)
		last := offs[len(offs)-1]
		// A copy of the last entry, file "zzz", made gitlink "zzh".
		hidden := bytes.Clone(data[last:end])
		require.Equal(t, "zzz", string(hidden[62:65]))
		binary.BigEndian.PutUint32(hidden[gitIndexModeOffset:], gitModeGitlink)
		commit, err := hex.DecodeString(r.commit)
		require.NoError(t, err)
		copy(hidden[gitIndexStatBytes:], commit)
		copy(hidden[62:], "zzh")
		// The entries, then the hidden one inside an extension git
		// ignores, then an IEOT whose second block is that one in
		// place of the last entry; the other extensions as git wrote
		// them.
		b := appendGitIndexExt(bytes.Clone(data[:end]), "ZZZZ", hidden)
		ieot := binary.BigEndian.AppendUint32(nil, gitIndexIEOTVersion)
		for _, v := range []int{offs[0], len(offs) - 1, end + 8, 1} {
			ieot = binary.BigEndian.AppendUint32(ieot, uint32(v))
		}
		ieotOff := len(b)
		b = appendGitIndexExt(b, gitIndexIEOTExt, ieot)
		for _, e := range gitIndexExts(t, data, end, 20) {
			if e.sig != gitIndexIEOTExt && e.sig != gitIndexEOIEExt {
				b = appendGitIndexExt(b, e.sig, e.body)
			}
		}
		require.NoError(t, os.WriteFile(r.indexPath(), finishSHA1Index(b, end), 0o644))

		require.Equal(t, []string{"a/sub", "src/module05/sub", "zz/sub"}, r.gitlinksWith(withoutThreads))
		require.Equal(t, []string{"a/sub", "src/module05/sub", "zz/sub", "zzh"}, r.gitlinksWith(withThreads))
		_, err = r.read()
		require.ErrorIs(t, err, ErrBadPath)
		require.ErrorContains(t, err, fmt.Sprintf("byte %d: IEOT block 1 starts at byte %d, not at byte %d", ieotOff+8+4+8, end+8, last))
	})
}

// TestReadGitlinksSparseFile: an index file with holes, which git never
// writes, is refused before it is read.
func TestReadGitlinksSparseFile(t *testing.T) {
	t.Parallel()
	r := newGitIndexRepo(t)
	r.add([]string{"f"}, []string{"sub"})
	path := filepath.Join(t.TempDir(), "index")
	require.NoError(t, os.WriteFile(path, r.index(), 0o644))
	got, err := readGitlinks("", path, 20)
	require.NoError(t, err)
	require.Equal(t, []string{"sub"}, got)

	require.NoError(t, os.Truncate(path, 64<<20))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(path, &st))
	if st.Blocks*512 >= (st.Size-st.Blksize)/64 {
		unavailable(t, "the file system of %s allocates the holes of a file: no sparse file to refuse", path)
	}
	_, err = readGitlinks("", path, 20)
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorIs(t, err, unix.EFBIG)
	require.ErrorContains(t, err, path+" is a sparse file: 67108864 bytes, of which")
}

// TestReadGitlinksThreadedSHA256: git reads the EOIE of a SHA-256
// index only at the place and of the size of a SHA-1 one (EOIE_SIZE in
// read-cache.c), inside the one it writes: bytes there that put the
// extensions elsewhere are refused too.
func TestReadGitlinksThreadedSHA256(t *testing.T) {
	t.Parallel()
	r := newThreadedGitIndexRepo(t, "2", false, "--object-format=sha256")
	data := r.index()
	end, _ := requireThreadedGitIndex(t, data, 32)
	at := len(data) - 32 - gitIndexEOIEBytes
	copy(data[at:], gitIndexEOIEExt)
	binary.BigEndian.PutUint32(data[at+4:], gitIndexEOIESize)
	binary.BigEndian.PutUint32(data[at+8:], uint32(end+8))
	require.NoError(t, os.WriteFile(r.indexPath(), data, 0o644))
	_, err := r.read()
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, fmt.Sprintf("byte %d: EOIE extension says the extensions start at byte %d", at+8, end+8))
}

// TestReadGitlinksThreadedSharedIndex: the shared index of a split
// index is held to the EOIE and IEOT rules too.
func TestReadGitlinksThreadedSharedIndex(t *testing.T) {
	t.Parallel()
	r := newThreadedGitIndexRepo(t, "2", true)
	shared, err := filepath.Glob(filepath.Join(r.gitdir(), "sharedindex.*"))
	require.NoError(t, err)
	require.Len(t, shared, 1)
	data, err := os.ReadFile(shared[0])
	require.NoError(t, err)
	end, _ := requireThreadedGitIndex(t, data, r.hashSize)
	at := len(data) - 20 - gitIndexEOIEBytes + 8
	binary.BigEndian.PutUint32(data[at:], uint32(end+8))
	require.NoError(t, os.WriteFile(shared[0], data, 0o644))
	_, err = r.read()
	require.ErrorIs(t, err, ErrBadPath)
	require.ErrorContains(t, err, fmt.Sprintf("git index %s, byte %d: EOIE extension says", shared[0], at))
}

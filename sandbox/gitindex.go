package sandbox

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// Bounds on what [readGitlinks] reads of a git index, which a job may
// have written whole.
const (
	// maxGitIndexBytes bounds the size of one index file (the index or
	// its shared index) read; a larger one is refused before a byte of
	// it is read. The index of a repository of a million files is about
	// 100 MiB; 256 MiB leaves room for long paths and extensions while
	// halving what one file a job writes can make the check read.
	maxGitIndexBytes = 256 << 20
	// maxGitIndexPathBytes bounds the length of an entry's name: git's
	// PATH_MAX, beyond which git could not lstat the path anyway.
	maxGitIndexPathBytes = 4096
)

// Entry layout and modes of a git index, from gitformat-index(5)
// ("Index entry") and git's read-cache.c (ondisk_cache_entry,
// create_from_disk) and object.h (S_ISGITLINK, S_ISSPARSEDIR).
const (
	gitIndexHeaderBytes = 12 // "DIRC", version, entry count
	// gitIndexStatBytes is the stat data before the object name: ctime,
	// mtime (8 bytes each), dev, ino, mode, uid, gid, size (4 each).
	gitIndexStatBytes  = 40
	gitIndexModeOffset = 24
	gitIndexNameMask   = 0x0fff // flags: name length, 0xfff if longer
	gitIndexExtended   = 0x4000 // flags: a second 16-bit flags field follows
	// gitIndexExtendedKnown are the bits of the second flags field git
	// reads (intent-to-add, skip-worktree); git dies on any other.
	gitIndexExtendedKnown = 0x6000
	gitModeTypeMask       = 0o170000
	gitModeGitlink        = 0o160000
	gitModeSparseDir      = 0o040000
	// gitIndexLinkExt is the signature of the split index extension.
	gitIndexLinkExt = "link"
)

// readGitlinks returns the paths of the gitlink entries (submodules) of
// the git index file at indexPath, a file of the git directory gitdir
// (for a linked worktree, its own directory under "worktrees/"), whose
// object names are hashSize bytes: 20 for SHA-1, 32 for SHA-256
// ("extensions.objectFormat" in git-config(1)). The format is
// gitformat-index(5), read as git's read-cache.c and split-index.c read
// it.
//
// The paths are relative to the working tree and '/'-separated, as
// stored, with those of the sparse directories (below); sorted, each once (a conflicted gitlink has up to three
// entries). A gitlink is an entry whose mode has the type bits 0160000,
// whatever its other bits, as git's S_ISGITLINK tests it; its stage and
// its skip-worktree and intent-to-add flags do not matter: git clears
// skip-worktree from an entry whose path exists in the working tree.
//
// It reads index versions 2, 3 (extended flags) and 4 (prefix-compressed
// names), and the split index ("link" extension): the shared index
// "sharedindex.<hex>" is looked for in gitdir (unless "": none known),
// then beside indexPath, as git does; its entries are merged exactly, resolving the delete and
// replace bitmaps (EWAH), with one over-approximation: an entry the
// split file adds under the name of a shared gitlink does not hide that
// gitlink. Other extensions are skipped; the trailing checksum is not
// verified (git does not either, by default).
//
// The index is followed through symlinks, as git opens it, to a regular
// file; anything else (a FIFO, a device, a directory) is refused before
// it is opened, then opened non-blocking and without following a link
// ([readSmallFile]), and checked again once open: a path the job swaps
// in between (it has ended: it should not be able to) is refused or read
// as a regular file, never waited on. Each file is read once, whole, and
// at most [maxGitIndexBytes], unless sparse (which git never writes);
// nothing is allocated in proportion to a count the file states, only
// to the bytes present.
//
// git reading with several threads (index.threads) finds the extensions
// where an EOIE extension says and reads blocks of entries where an
// IEOT extension says, not where the entries before end; each file,
// the index and its shared index, is read only if git would read it the
// same way with any number of threads (see [checkGitIndexThreading]).
//
// # Sparse directories
//
// A sparse-directory entry of a sparse index (mode 040000, a directory
// outside the sparse-checkout cone) stands for a tree object git has not
// expanded in the index, whose gitlinks are not in the index. git itself
// never writes one over a gitlink (convert_to_sparse_rec in git's
// sparse-index.c), but a job can: git expands the entry, and the
// gitlinks below become live, when sparse checkout is on and the
// directory exists in the working tree
// (clear_skip_worktree_from_present_files, unless
// sparse.expectFilesOutsideOfPatterns is set). So each one is listed
// too, its name ending in "/" (which no gitlink's does), for the caller
// to judge without reading the trees.
//
// # Errors
//
// A missing index (ENOENT, ENOTDIR on the path; a symlink to nothing)
// has no gitlinks: nil, nil, as git reads it. Every other error wraps
// [ErrBadPath] and names the file; those about its content also give
// the byte offset at fault:
//   - hashSize is not 20 or 32;
//   - the file cannot be resolved, stat'ed or read, is not a regular
//     file (EINVAL), is larger than maxGitIndexBytes (EFBIG) or sparse:
//     fewer bytes allocated than its size less a file-system block
//     (EFBIG);
//   - it is shorter than a header and a checksum, does not start with
//     "DIRC", or is not version 2, 3 or 4;
//   - an entry runs past the entries' bytes (the file is truncated, or
//     its header counts more entries than it holds), sets an extended
//     flag git does not know, or has a name whose length field lies
//     (v2/v3: a NUL inside the stated length or none right after it;
//     v4: a prefix and suffix whose lengths do not add up to it);
//   - a v4 name whose strip count overflows git's varint or is longer
//     than the previous name;
//   - a name longer than maxGitIndexPathBytes, absolute, or with an
//     empty, "." or ".." component; an empty name is allowed only as
//     the replacement entries of a split index;
//   - an extension whose stated size runs past the extensions' bytes,
//     or a second "link" or "IEOT" extension;
//   - an EOIE extension that puts the extensions elsewhere than where
//     the entries end, or an IEOT extension whose blocks do not tile
//     the entries as git writes them;
//   - a split index git would refuse: a short or malformed link
//     extension or bitmap, a shared index that is missing or whose
//     checksum is not the one linked, a bitmap naming an entry beyond
//     the shared index's, an entry both replaced and deleted, or a
//     number of replaced entries unlike the number of empty names.
//
// It is a pure function of the files: safe for concurrent use.
func readGitlinks(gitdir, indexPath string, hashSize int) ([]string, error) {
	if hashSize != 20 && hashSize != 32 {
		return nil, fmt.Errorf("sandbox: git index %s: object names of %d bytes, not 20 (SHA-1) or 32 (SHA-256): %w", indexPath, hashSize, ErrBadPath)
	}
	data, err := readGitIndexFile(indexPath)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil, nil
		}
		return nil, fmt.Errorf("sandbox: cannot read the git index %s, to find its gitlinks: %w: %w", indexPath, err, ErrBadPath)
	}
	return gitlinksOfIndex(gitdir, indexPath, data, hashSize)
}

// gitlinksOfIndex is [readGitlinks] on data, the content of the index
// file indexPath; only a shared index is read from disk.
func gitlinksOfIndex(gitdir, indexPath string, data []byte, hashSize int) ([]string, error) {
	var out []string
	// replaced holds, for each entry with an empty name (the split
	// index's replacements of shared entries, which come first), whether
	// it is a gitlink.
	var replaced []bool
	firstEmpty := 0 // the offset of the first entry with an empty name
	end, err := walkGitIndex(indexPath, data, hashSize, true, func(entry, off int, name []byte, mode uint32) error {
		if len(name) == 0 {
			if len(replaced) != entry {
				return fmt.Errorf("an empty name after a named entry")
			}
			if entry == 0 {
				firstEmpty = off
			}
			replaced = append(replaced, isGitlink(mode) || isSparseDir(mode))
			return nil
		}
		if isGitlink(mode) || isSparseDir(mode) {
			out = append(out, listedName(name, mode))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	link, linkOff, err := findGitIndexExtension(indexPath, data, end, hashSize, gitIndexLinkExt)
	if err != nil {
		return nil, err
	}
	if link != nil && len(link) < hashSize {
		return nil, gitIndexError(indexPath, linkOff, "link extension of %d bytes, shorter than an object name", len(link))
	}
	if link != nil && !isZero(link[:hashSize]) {
		out, err = mergeSharedGitlinks(gitdir, indexPath, hashSize, link, linkOff, replaced, out)
		if err != nil {
			return nil, err
		}
	} else if len(replaced) > 0 {
		return nil, gitIndexError(indexPath, firstEmpty, "an entry with an empty name, and no shared index it could replace an entry of")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// mergeSharedGitlinks adds to out the gitlinks of the shared index that
// the split index at indexPath links to: link is the data of its "link"
// extension, at byte linkOff; replaced tells, for each of its
// replacement entries in order, whether it is a gitlink. The merge is
// git's merge_base_index (split-index.c): the n-th set bit of the
// replace bitmap is the position in the shared index of the entry the
// n-th replacement replaces, keeping its name and taking the rest;
// the delete bitmap marks shared entries dropped.
func mergeSharedGitlinks(gitdir, indexPath string, hashSize int, link []byte, linkOff int, replaced []bool, out []string) ([]string, error) {
	base := link[:hashSize]
	var del, rep ewahBits
	if rest := link[hashSize:]; len(rest) > 0 {
		n, err := del.init(rest)
		if err != nil {
			return nil, gitIndexError(indexPath, linkOff+hashSize, "link extension's delete bitmap: %v", err)
		}
		m, err := rep.init(rest[n:])
		if err != nil {
			return nil, gitIndexError(indexPath, linkOff+hashSize+n, "link extension's replace bitmap: %v", err)
		}
		if n+m != len(rest) {
			return nil, gitIndexError(indexPath, linkOff+hashSize+n+m, "%d bytes after the link extension's bitmaps", len(rest)-n-m)
		}
	}
	name := "sharedindex." + hex.EncodeToString(base)
	// An empty gitdir is none known, not the current directory.
	sharedPath, err := filepath.Join(gitdir, name), error(unix.ENOENT)
	var data []byte
	if gitdir != "" {
		data, err = readGitIndexFile(sharedPath)
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		sharedPath = filepath.Join(filepath.Dir(indexPath), name)
		data, err = readGitIndexFile(sharedPath)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: cannot read %s, the shared index of the split git index %s, to find its gitlinks: %w: %w", sharedPath, indexPath, err, ErrBadPath)
	}
	if len(data) >= hashSize && !bytes.Equal(data[len(data)-hashSize:], base) {
		return nil, gitIndexError(sharedPath, len(data)-hashSize, "checksum %x, not %x, which the split index %s links to", data[len(data)-hashSize:], base, indexPath)
	}
	nextDel, delOK, err := del.next()
	if err != nil {
		return nil, gitIndexError(indexPath, linkOff+hashSize, "link extension's delete bitmap: %v", err)
	}
	nextRep, repOK, err := rep.next()
	if err != nil {
		return nil, gitIndexError(indexPath, linkOff+hashSize, "link extension's replace bitmap: %v", err)
	}
	pos, k := uint64(0), 0
	_, err = walkGitIndex(sharedPath, data, hashSize, false, func(_, _ int, name []byte, mode uint32) error {
		isDel := delOK && nextDel == pos
		isRep := repOK && nextRep == pos
		if isDel {
			if nextDel, delOK, err = del.next(); err != nil {
				return fmt.Errorf("%s's delete bitmap: %v", indexPath, err)
			}
		}
		if isRep {
			if nextRep, repOK, err = rep.next(); err != nil {
				return fmt.Errorf("%s's replace bitmap: %v", indexPath, err)
			}
		}
		switch {
		case isDel && isRep:
			return fmt.Errorf("entry %d is both replaced and deleted by %s", pos, indexPath)
		case isRep:
			if k >= len(replaced) {
				return fmt.Errorf("entry %d is replaced by %s, which has only %d replacement entries", pos, indexPath, len(replaced))
			}
			if replaced[k] {
				out = append(out, string(name))
			}
			k++
		case !isDel && (isGitlink(mode) || isSparseDir(mode)):
			out = append(out, listedName(name, mode))
		}
		pos++
		return nil
	})
	if err != nil {
		return nil, err
	}
	if delOK || repOK {
		return nil, gitIndexError(indexPath, linkOff+hashSize, "link extension's bitmaps name entry %d, beyond the %d entries of %s", max(nextDel, nextRep), pos, sharedPath)
	}
	if k != len(replaced) {
		return nil, gitIndexError(indexPath, linkOff+hashSize, "link extension's replace bitmap replaces %d entries of %s, but %d entries have an empty name", k, sharedPath, len(replaced))
	}
	return out, nil
}

// walkGitIndex checks the header of the index file data (named file in
// errors) and calls fn with each entry's index, byte offset, name and
// mode, in order, until the end of the entries, whose offset it returns. name is
// only valid during the call. An empty name is passed only if
// allowEmpty; an error from fn is returned with the file and the
// entry's offset. No entry's bytes may reach into the last hashSize
// bytes of data, the checksum.
func walkGitIndex(file string, data []byte, hashSize int, allowEmpty bool, fn func(entry, off int, name []byte, mode uint32) error) (int, error) {
	if len(data) < gitIndexHeaderBytes+hashSize {
		return 0, gitIndexError(file, 0, "%d bytes, shorter than a header and a checksum (%d)", len(data), gitIndexHeaderBytes+hashSize)
	}
	if string(data[:4]) != "DIRC" {
		return 0, gitIndexError(file, 0, "signature %q, not \"DIRC\"", data[:4])
	}
	version := binary.BigEndian.Uint32(data[4:])
	if version < 2 || version > 4 {
		return 0, gitIndexError(file, 4, "version %d, not 2, 3 or 4", version)
	}
	count := binary.BigEndian.Uint32(data[8:])
	entries := data[:len(data)-hashSize]
	fixed := gitIndexStatBytes + hashSize + 2
	var prev []byte // v4: the previous entry's name
	if version == 4 {
		prev = make([]byte, 0, maxGitIndexPathBytes)
	}
	off := gitIndexHeaderBytes
	// offs holds each entry's offset, with gitIndexWholeStrip set if
	// (v4) it strips the whole previous name: for
	// checkGitIndexThreading. Its room is for the entries the bytes
	// can hold, at most, never for more than those present.
	offs := make([]uint32, 0, min(uint64(count), uint64(len(entries)/fixed)))
	for i := uint32(0); i < count; i++ {
		offs = append(offs, uint32(off))
		if len(entries)-off < fixed {
			return 0, gitIndexError(file, off, "entry %d of the %d the header counts runs past the end of the entries at byte %d", i, count, len(entries))
		}
		mode := binary.BigEndian.Uint32(data[off+gitIndexModeOffset:])
		flags := binary.BigEndian.Uint16(data[off+fixed-2:])
		nameOff := off + fixed
		if flags&gitIndexExtended != 0 {
			if len(entries)-nameOff < 2 {
				return 0, gitIndexError(file, off, "entry %d of the %d the header counts runs past the end of the entries at byte %d", i, count, len(entries))
			}
			if ext := binary.BigEndian.Uint16(data[nameOff:]); ext&^gitIndexExtendedKnown != 0 {
				return 0, gitIndexError(file, nameOff, "entry %d has extended flags %#04x, which git does not know", i, ext)
			}
			nameOff += 2
		}
		statedLen := int(flags & gitIndexNameMask)
		var name []byte
		var next int
		if version == 4 {
			strip, n := gitVarint(entries[nameOff:])
			switch {
			case n == 0:
				return 0, gitIndexError(file, nameOff, "entry %d's name runs past the end of the entries", i)
			case n < 0:
				return 0, gitIndexError(file, nameOff, "entry %d's name strips a count that overflows git's varint", i)
			}
			copyLen := 0
			if strip == uint64(len(prev)) {
				offs[i] |= gitIndexWholeStrip
			}
			if i > 0 { // git ignores the count for the first entry
				if strip > uint64(len(prev)) {
					return 0, gitIndexError(file, nameOff, "entry %d strips %d bytes from the previous name, of %d", i, strip, len(prev))
				}
				copyLen = len(prev) - int(strip)
			}
			suffixOff := nameOff + n
			window := entries[suffixOff:min(len(entries), suffixOff+maxGitIndexPathBytes-copyLen+1)]
			nul := bytes.IndexByte(window, 0)
			if nul < 0 {
				if len(window) == maxGitIndexPathBytes-copyLen+1 {
					return 0, gitIndexError(file, suffixOff, "entry %d's name is longer than %d bytes", i, maxGitIndexPathBytes)
				}
				return 0, gitIndexError(file, suffixOff, "entry %d's name runs past the end of the entries", i)
			}
			prev = append(prev[:copyLen], window[:nul]...)
			if statedLen != gitIndexNameMask && len(prev) != statedLen || statedLen == gitIndexNameMask && len(prev) < gitIndexNameMask {
				return 0, gitIndexError(file, off+fixed-2, "entry %d's name length field says %d, its name is %d bytes", i, statedLen, len(prev))
			}
			name, next = prev, suffixOff+nul+1
		} else {
			var nameLen int
			if statedLen < gitIndexNameMask {
				if len(entries)-nameOff <= statedLen {
					return 0, gitIndexError(file, nameOff, "entry %d's name runs past the end of the entries", i)
				}
				if bytes.IndexByte(entries[nameOff:nameOff+statedLen], 0) >= 0 || entries[nameOff+statedLen] != 0 {
					return 0, gitIndexError(file, off+fixed-2, "entry %d's name length field says %d, its name is not that long", i, statedLen)
				}
				nameLen = statedLen
			} else {
				window := entries[nameOff:min(len(entries), nameOff+maxGitIndexPathBytes+1)]
				nameLen = bytes.IndexByte(window, 0)
				switch {
				case nameLen < 0 && len(window) == maxGitIndexPathBytes+1:
					return 0, gitIndexError(file, nameOff, "entry %d's name is longer than %d bytes", i, maxGitIndexPathBytes)
				case nameLen < 0:
					return 0, gitIndexError(file, nameOff, "entry %d's name runs past the end of the entries", i)
				case nameLen < gitIndexNameMask:
					return 0, gitIndexError(file, off+fixed-2, "entry %d's name length field says %d or more, its name is %d bytes", i, gitIndexNameMask, nameLen)
				}
			}
			name = entries[nameOff : nameOff+nameLen]
			// read-cache.c ondisk_ce_size: NUL-padded to a multiple of 8,
			// with at least one NUL.
			next = off + ((nameOff - off + nameLen + 8) &^ 7)
			if next > len(entries) {
				return 0, gitIndexError(file, nameOff, "entry %d's padding runs past the end of the entries", i)
			}
		}
		if len(name) > 0 || !allowEmpty {
			if why := badGitIndexPath(name, mode == gitModeSparseDir); why != "" {
				return 0, gitIndexError(file, nameOff, "entry %d's name %q %s", i, name, why)
			}
		}
		if err := fn(int(i), off, name, mode); err != nil {
			return 0, gitIndexError(file, off, "entry %d: %v", i, err)
		}
		off = next
	}
	if err := checkGitIndexThreading(file, data, hashSize, version, off, offs); err != nil {
		return 0, err
	}
	return off, nil
}

// Extensions git reads an index by with several threads (index.threads
// in git-config(1)), from gitformat-index(5) and git's read-cache.c.
const (
	// gitIndexEOIEExt (End Of Index Entries) gives where the extensions
	// start. read_eoie_extension looks for its header at a fixed place,
	// gitIndexEOIEBytes before the trailing checksum, with the size
	// gitIndexEOIESize (EOIE_SIZE: 4 + 20 whatever the hash, though
	// git writes 4 + the hash size).
	gitIndexEOIEExt   = "EOIE"
	gitIndexEOIEBytes = 8 + gitIndexEOIESize
	gitIndexEOIESize  = 4 + 20
	// gitIndexIEOTExt (Index Entry Offset Table) is a 32-bit version,
	// gitIndexIEOTVersion, then for each block of entries its 32-bit
	// offset and count.
	gitIndexIEOTExt     = "IEOT"
	gitIndexIEOTVersion = 1
)

// gitIndexWholeStrip marks an entry offset (below maxGitIndexBytes, so
// below this bit) whose v4 entry strips the whole previous name.
const gitIndexWholeStrip = 1 << 31

// checkGitIndexThreading returns an error unless git reads the index
// file data (version version, named file in errors), whose entries
// start at the offsets offs (with gitIndexWholeStrip) and end at end,
// as its entries and extensions were walked one after the other,
// however many threads it reads with.
//
// With threads, git's do_read_index reads the extensions from the
// offset an EOIE extension gives (read_eoie_extension,
// load_index_extensions) and each block of entries an IEOT extension
// gives from the block's own offset with no previous name
// (read_ieot_extension, load_cache_entries_threaded, create_from_disk
// with previous_ce NULL). A file whose EOIE or IEOT says other than the
// sequential walk could show git an extension (a "link" to a shared
// index) or entries (gitlinks) the walk does not see. So:
//   - bytes at the fixed place of an EOIE header (either size: git's
//     reader's or its writer's for SHA-256) must give end as the
//     offset; its hash is not checked, which is stricter than git;
//   - an IEOT must be version 1, a whole number of blocks, at least
//     one, that tile the entries in order: each block at the offset of
//     the entry after the previous block's, the counts adding up to the
//     entries'; for v4, the first entry of each block but the first
//     must strip the whole previous name, as git's do_write_index makes
//     it (it clears the previous name at each block).
//
// An IEOT is checked even without an EOIE (git then ignores it).
func checkGitIndexThreading(file string, data []byte, hashSize int, version uint32, end int, offs []uint32) error {
	limit := len(data) - hashSize
	for _, size := range []int{gitIndexEOIESize, 4 + hashSize} {
		at := limit - 8 - size
		if at < gitIndexHeaderBytes || string(data[at:at+4]) != gitIndexEOIEExt || binary.BigEndian.Uint32(data[at+4:]) != uint32(size) {
			continue
		}
		if o := binary.BigEndian.Uint32(data[at+8:]); uint64(o) != uint64(end) {
			return gitIndexError(file, at+8, "EOIE extension says the extensions start at byte %d, but the entries end at byte %d: git reading with threads would read other extensions", o, end)
		}
	}
	ieot, ieotOff, err := findGitIndexExtension(file, data, end, hashSize, gitIndexIEOTExt)
	if err != nil || ieot == nil {
		return err
	}
	if len(ieot) < 4+8 || (len(ieot)-4)%8 != 0 {
		return gitIndexError(file, ieotOff, "IEOT extension of %d bytes, not a version and one or more blocks of 8", len(ieot))
	}
	if v := binary.BigEndian.Uint32(ieot); v != gitIndexIEOTVersion {
		return gitIndexError(file, ieotOff, "IEOT extension version %d, not %d", v, gitIndexIEOTVersion)
	}
	next := uint64(0) // the entry the next block must start at
	for b := 4; b < len(ieot); b += 8 {
		off := binary.BigEndian.Uint32(ieot[b:])
		n := binary.BigEndian.Uint32(ieot[b+4:])
		want, whole := uint64(end), false
		if next < uint64(len(offs)) {
			want, whole = uint64(offs[next]&^gitIndexWholeStrip), offs[next]&gitIndexWholeStrip != 0
		}
		switch {
		case uint64(off) != want:
			return gitIndexError(file, ieotOff+b, "IEOT block %d starts at byte %d, not at byte %d where entry %d starts: git reading with threads would read other entries", (b-4)/8, off, want, next)
		case uint64(n) > uint64(len(offs))-next:
			return gitIndexError(file, ieotOff+b+4, "IEOT block %d counts %d entries from entry %d, beyond the %d entries", (b-4)/8, n, next, len(offs))
		case version == 4 && next > 0 && n > 0 && !whole:
			return gitIndexError(file, int(off), "entry %d starts IEOT block %d but does not strip the whole previous name: git reading with threads would read another name", next, (b-4)/8)
		}
		next += uint64(n)
	}
	if next != uint64(len(offs)) {
		return gitIndexError(file, ieotOff, "IEOT blocks count %d entries, not the %d entries", next, len(offs))
	}
	return nil
}

// findGitIndexExtension returns the data of the extension named sig of
// the index file data whose entries end at byte end, and its offset; nil
// if there is none. Extensions run up to the trailing checksum of
// hashSize bytes; as git, fewer than 8 bytes left before it end them.
// Two extensions named sig are an error: git reads each over the last
// (read_link_extension keeps the bitmaps of a link without any), which
// a reader that took either could miss.
func findGitIndexExtension(file string, data []byte, end, hashSize int, sig string) ([]byte, int, error) {
	limit := len(data) - hashSize
	var found []byte
	foundOff := 0
	for off := end; limit-off >= 8; {
		size := binary.BigEndian.Uint32(data[off+4:])
		if uint64(size) > uint64(limit-off-8) {
			return nil, 0, gitIndexError(file, off+4, "extension %q of %d bytes runs past the end of the extensions at byte %d", data[off:off+4], size, limit)
		}
		if string(data[off:off+4]) == sig {
			if found != nil {
				return nil, 0, gitIndexError(file, off, "a second %q extension, after the one at byte %d", sig, foundOff-8)
			}
			found, foundOff = data[off+8:off+8+int(size)], off+8
		}
		off += 8 + int(size)
	}
	return found, foundOff, nil
}

// readGitIndexFile returns the content of the regular file path,
// following symlinks, refused before it is opened when it is anything
// else (EINVAL), larger than maxGitIndexBytes or sparse (EFBIG:
// [checkNotSparse]).
func readGitIndexFile(path string) ([]byte, error) {
	real, err := resolveGitPath(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Lstat(real)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (mode %v): %w", real, fi.Mode(), unix.EINVAL)
	}
	if fi.Size() > maxGitIndexBytes {
		return nil, fmt.Errorf("%d bytes, more than %d: %w", fi.Size(), maxGitIndexBytes, unix.EFBIG)
	}
	if err := checkNotSparse(real, fi); err != nil {
		return nil, err
	}
	return readSmallFile(real, maxGitIndexBytes)
}

// checkNotSparse returns an error (EFBIG) when fi, the stat of path,
// is of a sparse file: fewer bytes allocated (st_blocks, in 512-byte
// units: stat(2)) than its size less one file-system block (st_blksize).
// git writes an index whole, never with holes; a job that writes one
// large and hollow, and hard-links it in many places, would make each
// read cost the full size in time and memory while using no disk.
func checkNotSparse(path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	// Mostly holes, not a little short: a file system that compresses
	// (btrfs, ZFS) allocates less than an index's size, but not a
	// sixty-fourth of it.
	if allocated := st.Blocks * 512; allocated < (fi.Size()-st.Blksize)/64 {
		return fmt.Errorf("%s is a sparse file: %d bytes, of which %d allocated; git never writes one: %w", path, fi.Size(), allocated, unix.EFBIG)
	}
	return nil
}

// badGitIndexPath says what is wrong with an entry's name, "" if
// nothing: longer than maxGitIndexPathBytes, empty, absolute, or with an
// empty, "." or ".." component. A sparse directory's name ends in "/".
func badGitIndexPath(name []byte, sparseDir bool) string {
	if len(name) > maxGitIndexPathBytes {
		return fmt.Sprintf("is longer than %d bytes", maxGitIndexPathBytes)
	}
	if sparseDir && len(name) > 1 && name[len(name)-1] == '/' {
		name = name[:len(name)-1]
	}
	switch {
	case len(name) == 0:
		return "is empty"
	case name[0] == '/':
		return "is absolute"
	}
	for len(name) > 0 {
		c := name
		if i := bytes.IndexByte(name, '/'); i >= 0 {
			c, name = name[:i], name[i+1:]
			if len(name) == 0 {
				return "ends in '/'"
			}
		} else {
			name = nil
		}
		switch string(c) {
		case "":
			return "has an empty component"
		case ".", "..":
			return fmt.Sprintf("has a %q component", c)
		}
	}
	return ""
}

// gitVarint decodes git's varint (varint.c decode_varint, the offset
// encoding of OFS_DELTA): it returns the value and the bytes read, 0 if
// b ends first, -1 if the value overflows 64 bits.
func gitVarint(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	c := b[0]
	v := uint64(c & 127)
	n := 1
	for c&128 != 0 {
		v++
		if v == 0 || v>>57 != 0 {
			return 0, -1
		}
		if n == len(b) {
			return 0, 0
		}
		c = b[n]
		n++
		v = v<<7 + uint64(c&127)
	}
	return v, n
}

// ewahBits iterates over the set bits of a bitmap in git's EWAH
// serialization (ewah/ewah_io.c ewah_read_mmap, ewah_bitmap.c
// ewah_each_bit): a 32-bit bit count, a 32-bit count of 64-bit words,
// the words, a 32-bit position of the last run-length word; all
// big-endian. A run-length word holds in bit 0 the bit of a run, in
// bits 1-32 the run's length in words, in bits 33-63 the count of
// literal words that follow it. The zero value has no bits.
type ewahBits struct {
	words   []byte // the words, 8 bytes each
	pos     uint64 // the bit after the last one consumed
	ones    uint64 // bits of a run of ones left to yield, from pos
	lit     uint64 // set bits of the current literal word left to yield
	litBase uint64 // the position of the current literal word's bit 0
	litLeft uint64 // literal words left after the current one
}

// maxEwahBit bounds the positions ewahBits yields: git's index counts
// entries in 32 bits.
const maxEwahBit = 1 << 32

// init reads a serialized bitmap at the start of b and returns its
// length in bytes.
func (e *ewahBits) init(b []byte) (int, error) {
	if len(b) < 8 {
		return 0, fmt.Errorf("%d bytes, shorter than its header", len(b))
	}
	n := uint64(binary.BigEndian.Uint32(b[4:]))
	if uint64(len(b)-8) < n*8+4 {
		return 0, fmt.Errorf("%d words, more than its %d bytes hold", n, len(b))
	}
	*e = ewahBits{words: b[8 : 8+n*8]}
	return int(8 + n*8 + 4), nil
}

// next returns the next set bit, false when there is none, or an error
// when a run-length word counts more literal words than the bitmap
// holds or a bit lies beyond maxEwahBit.
func (e *ewahBits) next() (uint64, bool, error) {
	for {
		switch {
		case e.ones > 0:
			p := e.pos
			e.pos++
			e.ones--
			return p, true, nil
		case e.lit != 0:
			p := e.litBase + uint64(bits.TrailingZeros64(e.lit))
			e.lit &= e.lit - 1
			return p, true, nil
		case e.litLeft > 0:
			if len(e.words) < 8 {
				return 0, false, fmt.Errorf("a run-length word counts more literal words than the bitmap holds")
			}
			e.lit = binary.BigEndian.Uint64(e.words)
			e.words = e.words[8:]
			e.litBase = e.pos
			e.pos += 64
			e.litLeft--
		case len(e.words) == 0:
			return 0, false, nil
		default:
			w := binary.BigEndian.Uint64(e.words)
			e.words = e.words[8:]
			run := ((w >> 1) & 0xffffffff) * 64
			if w&1 != 0 {
				e.ones = run
			} else {
				e.pos += run
			}
			e.litLeft = w >> 33
		}
		if e.pos > maxEwahBit {
			return 0, false, fmt.Errorf("a bit beyond %d", uint64(maxEwahBit))
		}
	}
}

func isGitlink(mode uint32) bool { return mode&gitModeTypeMask == gitModeGitlink }

// isSparseDir reports whether mode is a sparse-directory entry's
// (S_ISSPARSEDIR in git's cache.h: the type bits of a directory).
func isSparseDir(mode uint32) bool { return mode&gitModeTypeMask == gitModeSparseDir }

// listedName is how [readGitlinks] lists an entry's name: a sparse
// directory's ends in "/" (git writes it so; one that does not is given
// one), a gitlink's as stored.
func listedName(name []byte, mode uint32) string {
	if isSparseDir(mode) && !bytes.HasSuffix(name, []byte("/")) {
		return string(name) + "/"
	}
	return string(name)
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// gitIndexError is an error about the content of the index file file at
// byte off.
func gitIndexError(file string, off int, format string, args ...any) error {
	return fmt.Errorf("sandbox: git index %s, byte %d: %s: %w", file, off, fmt.Sprintf(format, args...), ErrBadPath)
}

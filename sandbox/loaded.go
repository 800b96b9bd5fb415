package sandbox

import (
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// libraryDirs are searched, in order, for the shared libraries an ELF
// program needs, after the directory of its interpreter: the trusted
// directories of glibc's ld.so (ld.so(8), "the default path") and
// Debian's multiarch ones.
var libraryDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// maxLoadedFiles bounds LoadedFiles' walk of the needed libraries.
const maxLoadedFiles = 256

// LoadedFiles returns the files the dynamic loader maps when exe runs:
// exe itself, its interpreter (PT_INTERP) and, transitively, every
// DT_NEEDED library found in the interpreter's directory or
// libraryDirs, each with symlinks resolved and each symlink met on the
// way to it as well, named where it lies (its directory resolved: the
// interpreter bwrap names, /lib64/ld-linux-x86-64.so.2, is reached
// through the links /lib64 and /usr/lib64/ld-linux-x86-64.so.2, either of
// which, repointed, would load another file), plus /etc/ld.so.cache and
// /etc/ld.so.preload. A job that could write one of them would have its
// code run by the next bwrap, on the host, outside every namespace: the
// runner protects them like bwrap itself. A static exe gives exe alone.
// Unreadable or non-ELF files give what was found so far; it never fails.
// It reads the file system and is safe for concurrent use.
func LoadedFiles(exe string) []string {
	var out []string
	add := func(p string) bool {
		for _, l := range symlinksOn(p) {
			if !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if slices.Contains(out, p) {
			return false
		}
		out = append(out, p)
		return true
	}
	add(exe)
	dirs := libraryDirs
	queue := []string{exe}
	for len(queue) > 0 && len(out) < maxLoadedFiles {
		f, err := elf.Open(queue[0])
		queue = queue[1:]
		if err != nil {
			continue
		}
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err == nil {
				interp := string(b[:max(0, len(b)-1)]) // NUL-terminated
				if add(interp) {
					dirs = append([]string{filepath.Dir(interp)}, dirs...)
				}
			}
		}
		needed, _ := f.ImportedLibraries()
		f.Close()
		for _, lib := range needed {
			for _, d := range dirs {
				p := filepath.Join(d, lib)
				if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
					if add(p) {
						queue = append(queue, p)
					}
					break
				}
			}
		}
	}
	if len(out) > 1 {
		out = append(out, "/etc/ld.so.cache", "/etc/ld.so.preload")
	}
	return out
}

// maxSymlinks bounds symlinksOn: SYMLOOP_MAX on Linux (path_resolution(7)).
const maxSymlinks = 40

// symlinksOn returns the symlinks that resolving the absolute path p
// goes through, in order, each named by the path of the link itself with
// every directory before it resolved (the name a writable root would
// contain it under). It stops at the first component that does not exist
// or cannot be read, after maxSymlinks links, or when p is relative.
func symlinksOn(p string) []string {
	if !filepath.IsAbs(p) {
		return nil
	}
	var out []string
	rest := strings.Split(filepath.Clean(p), "/")[1:]
	dir := "/" // resolved: no symlink in it
	for len(out) < maxSymlinks && len(rest) > 0 {
		next := filepath.Join(dir, rest[0])
		fi, err := os.Lstat(next)
		if err != nil {
			return out
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			dir, rest = next, rest[1:]
			continue
		}
		out = append(out, next)
		target, err := os.Readlink(next)
		if err != nil {
			return out
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		// Resolve again from the root: the target may hold links too.
		rest = append(strings.Split(filepath.Clean(target), "/")[1:], rest[1:]...)
		dir = "/"
	}
	return out
}

package sandbox

import (
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
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
// libraryDirs, each with symlinks resolved, plus /etc/ld.so.cache and
// /etc/ld.so.preload. A job that could write one of them would have its
// code run by the next bwrap, on the host, outside every namespace: the
// runner protects them like bwrap itself. A static exe gives exe alone.
// Unreadable or non-ELF files give what was found so far; it never fails.
// It reads the file system and is safe for concurrent use.
func LoadedFiles(exe string) []string {
	var out []string
	add := func(p string) bool {
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

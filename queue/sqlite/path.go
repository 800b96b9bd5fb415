package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// isBusy reports whether err is SQLite's SQLITE_BUSY (5) or SQLITE_LOCKED (6).
func isBusy(err error) bool {
	c := sqliteCode(err)
	return c == 5 || c == 6
}

// sqliteNotADB is SQLITE_NOTADB: the file is not a database
// (https://sqlite.org/rescode.html#notadb).
const sqliteNotADB = 26

// sqliteCode returns the primary SQLite result code of err, or 0 when err
// carries none.
func sqliteCode(err error) int {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		return coded.Code() & 0xff // extended codes keep the primary in the low byte
	}
	return 0
}

// checkDatabasePath says plainly what SQLite would report as "unable to
// open database file (14)" or "attempt to write a readonly database": path
// is not a regular file (a directory, say), or a symlink to nothing; its
// directory does not exist or is not a directory; the file cannot be read
// and written; or SQLite could not create the -wal and -shm files it keeps
// beside the file (beside the symlink's target when path is a symlink)
// because that directory is not writable (a read-only mount, say). Each
// error reads "sqlite: open PATH: ..." and wraps the system's error where
// there is one (errors.Is(err, fs.ErrPermission) holds for EACCES).
func checkDatabasePath(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		kind := "not a regular file"
		switch t := fi.Mode().Type(); {
		case t&fs.ModeDir != 0:
			kind = "a directory"
		case t&fs.ModeNamedPipe != 0:
			kind = "a named pipe"
		case t&fs.ModeSocket != 0:
			kind = "a socket"
		case t&fs.ModeDevice != 0:
			kind = "a device"
		}
		return fmt.Errorf("sqlite: open %s: it is %s; the queue database must be a file", path, kind)
	case err == nil:
		if not, err := readWrite(path); err != nil {
			return fmt.Errorf("sqlite: open %s: it is not %s: %w", path, not, err)
		}
		// SQLite keeps -wal and -shm beside the file a symlink names.
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return fmt.Errorf("sqlite: open %s: %w", path, err)
		}
		return checkDatabaseDir(path, real, false)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		if target, err := os.Readlink(path); err == nil {
			// SQLite would create the target when its directory exists;
			// a dangling link is more likely a mistake (a disk not
			// mounted), and a new empty queue there would hide the jobs.
			return fmt.Errorf("sqlite: open %s: it is a symlink to %s, which does not exist", path, target)
		}
		dir := filepath.Dir(path)
		if di, err := os.Stat(dir); err != nil {
			return fmt.Errorf("sqlite: open %s: its directory: %w", path, err)
		} else if !di.IsDir() {
			return fmt.Errorf("sqlite: open %s: %s is not a directory", path, dir)
		}
		return checkDatabaseDir(path, path, true)
	default:
		return fmt.Errorf("sqlite: open %s: %w", path, err) // "stat PATH: permission denied", a symlink loop
	}
}

// checkDatabaseDir checks that SQLite can create what it needs beside real,
// the database file path (symlinks resolved) opened as path: real itself
// when missing, and real-wal and real-shm; or, when these exist, that they
// are writable.
func checkDatabaseDir(path, real string, missing bool) error {
	var create []string
	if missing {
		create = append(create, real)
	}
	for _, p := range []string{real + "-wal", real + "-shm"} {
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			create = append(create, p)
		} else if not, err := readWrite(p); err != nil {
			return fmt.Errorf("sqlite: open %s: %s is not %s: %w", path, p, not, err)
		}
	}
	if len(create) == 0 {
		return nil
	}
	dir := filepath.Dir(real)
	if err := unix.Access(dir, unix.W_OK); err != nil {
		list := strings.Join(create[:len(create)-1], ", ")
		if list != "" {
			list += " and "
		}
		list += create[len(create)-1]
		return fmt.Errorf("sqlite: open %s: directory %s is not writable: %w; the queue creates %s there", path, dir, err, list)
	}
	return nil
}

// readWrite checks that this process may read and write the file at p. On
// failure it says which ("readable" or "writable") and returns the
// system's error (EACCES, EROFS).
func readWrite(p string) (not string, err error) {
	if err := unix.Access(p, unix.R_OK); err != nil {
		return "readable", err
	}
	if err := unix.Access(p, unix.W_OK); err != nil {
		return "writable", err
	}
	return "", nil
}

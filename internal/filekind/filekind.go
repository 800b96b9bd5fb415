// Package filekind names the type of a file for error messages ("a
// symbolic link", "a named pipe (FIFO)"), where paddock refuses anything
// but a regular file. Pure and safe for concurrent use.
package filekind

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Of names what a file of mode m is, with its article: "a regular file",
// "a symbolic link", "a named pipe (FIFO)", "a directory", "a character
// device", "a block device", "a socket", or "a file of type T" for any
// other type bits.
func Of(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a file of type " + m.Type().String()
}

// TooLargeError is returned by [ReadFile] when the file is over its cap:
// bad input, like a file of the wrong type.
type TooLargeError struct{ msg string }

func (e *TooLargeError) Error() string { return e.msg }

// ReadFile reads path when it is a regular file or a pipe (a named pipe,
// /dev/fd/N from a shell's process substitution) of at most max bytes;
// what names the file in errors ("a job file", "a policy"). A device, a
// directory or a socket is refused unread: /dev/zero would never end.
// path "-" reads stdin, with the same cap, when stdin is not nil.
//
// # Errors
//
// The open or read error; "PATH is a character device; WHAT is a regular
// file or a pipe"; "PATH is larger than MAX bytes, the most WHAT may be".
func ReadFile(path string, stdin io.Reader, max int64, what string) ([]byte, error) {
	if path == "-" && stdin != nil {
		return readCapped("standard input", stdin, max, what)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if m := fi.Mode(); !m.IsRegular() && m&fs.ModeNamedPipe == 0 {
		return nil, fmt.Errorf("%s is %s; %s is a regular file or a pipe", path, Of(m), what)
	}
	return readCapped(path, f, max, what)
}

// readCapped reads r to its end, refusing more than max bytes.
func readCapped(name string, r io.Reader, max int64, what string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err == nil && int64(len(data)) > max {
		return nil, &TooLargeError{fmt.Sprintf("%s is larger than %d bytes, the most %s may be", name, max, what)}
	}
	return data, err
}

// Package filekind names the type of a file for error messages ("a
// symbolic link", "a named pipe (FIFO)"), where paddock refuses anything
// but a regular file. Pure and safe for concurrent use.
package filekind

import "io/fs"

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

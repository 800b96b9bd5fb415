package runner

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"paddock/sandbox"
)

// cappedLog writes a job's output stream to a file, keeping at most
// maxBytes of it: the first half as it arrives and the last half in a ring
// kept in a side file, so memory stays small whatever the job prints. Close
// appends a marker line saying how many bytes were cut, then the tail.
//
// A cappedLog is safe for concurrent use; os/exec calls Write from one
// goroutine, `paddock logs -f` only reads the file.
type cappedLog struct {
	mu       sync.Mutex
	path     string
	f        *os.File // the log: head, later the marker and the tail; nil until the first byte
	ring     *os.File // tail ring, removed on Close
	headCap  int64
	tailCap  int64
	written  int64     // total bytes offered
	ringLen  int64     // bytes in the ring (<= tailCap)
	ringPos  int64     // next write offset in the ring
	tailMax  int       // bytes tailKeep holds at most
	tailKeep []byte    // made at the first byte: most jobs print nothing on stderr
	echo     io.Writer // optional live copy (paddock run streams to the terminal)
	err      error

	// denials finds the last denial line of the whole stream, when
	// tailMax > 0.
	denials sandbox.DenialScanner
}

// newCappedLog returns a writer capped at maxBytes
// (at least 2 bytes). echo, when not nil, receives every byte as well.
// keepTail > 0 makes the stream one the classifier reads: Tail keeps its
// last keepTail bytes and DenialLine its last line with a denial signature
// (see [sandbox.DenialScanner] for what that costs).
//
// The file is created at the first byte: a stream the job never writes to
// leaves no file (creating two files per job is a measurable share of a
// short job's cost). Errors creating or writing the file are reported by
// Close.
func newCappedLog(path string, maxBytes int64, keepTail int, echo io.Writer) *cappedLog {
	head := maxBytes / 2
	return &cappedLog{path: path, headCap: head, tailCap: maxBytes - head, echo: echo, tailMax: keepTail}
}

// Write never fails for the writer's sake: a job must not die of SIGPIPE
// because its log disk filled. The first error is kept and reported by Close.
func (c *cappedLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if c.echo != nil {
		_, _ = c.echo.Write(p)
	}
	c.keepTail(p)
	if c.tailMax > 0 {
		_, _ = c.denials.Write(p) // never fails
	}
	c.written += int64(n)
	if c.f == nil && c.err == nil && n > 0 {
		c.f, c.err = os.OpenFile(c.path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	}
	if c.err != nil {
		return n, nil
	}
	// Fill the head first.
	headWritten := c.written - int64(n)
	if headWritten < c.headCap {
		k := min(int64(len(p)), c.headCap-headWritten)
		if _, err := c.f.Write(p[:k]); err != nil {
			c.err = err
			return n, nil
		}
		p = p[k:]
	}
	if len(p) == 0 {
		return n, nil
	}
	if c.ring == nil {
		r, err := os.CreateTemp(filepath.Dir(c.path), ".tail-*")
		if err != nil {
			c.err = err
			return n, nil
		}
		c.ring = r
	}
	// Only the last tailCap bytes of p can survive.
	if int64(len(p)) > c.tailCap {
		p = p[int64(len(p))-c.tailCap:]
	}
	for len(p) > 0 {
		k := min(int64(len(p)), c.tailCap-c.ringPos)
		if _, err := c.ring.WriteAt(p[:k], c.ringPos); err != nil {
			c.err = err
			return n, nil
		}
		c.ringPos = (c.ringPos + k) % c.tailCap
		c.ringLen = min(c.ringLen+k, c.tailCap)
		p = p[k:]
	}
	return n, nil
}

// copyBufs are ReadFrom's buffers, shared by every job's streams.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// ReadFrom copies r into the log until r's EOF, through Write, and
// returns the bytes read and r's error other than io.EOF. io.Copy prefers
// it: os/exec copies a job's output stream from its pipe with io.Copy,
// which otherwise allocates (and zeroes) a 32 KiB buffer per stream per
// job.
func (c *cappedLog) ReadFrom(r io.Reader) (int64, error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = c.Write(buf[:n]) // never fails; Close reports
			total += int64(n)
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// keepTail remembers the last tailMax bytes for classification.
func (c *cappedLog) keepTail(p []byte) {
	k := c.tailMax
	if k == 0 || len(p) == 0 {
		return
	}
	if c.tailKeep == nil {
		c.tailKeep = make([]byte, 0, k)
	}
	if len(p) >= k {
		c.tailKeep = append(c.tailKeep[:0], p[len(p)-k:]...)
		return
	}
	if over := len(c.tailKeep) + len(p) - k; over > 0 {
		copy(c.tailKeep, c.tailKeep[over:])
		c.tailKeep = c.tailKeep[:len(c.tailKeep)-over]
	}
	c.tailKeep = append(c.tailKeep, p...)
}

// Tail returns a copy of the last bytes written (up to keepTail).
func (c *cappedLog) Tail() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.tailKeep...)
}

// DenialLine returns the quote of the last line written with a denial
// signature, for [sandbox.ClassifyParams].DenialLine; "" when none, or
// when the log keeps no tail.
func (c *cappedLog) DenialLine() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, _ := c.denials.Line()
	return l
}

// Written is the total number of bytes the job wrote to the stream.
func (c *cappedLog) Written() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written
}

// Close writes the marker and the tail, removes the ring and closes the log.
func (c *cappedLog) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ring != nil {
		defer os.Remove(c.ring.Name())
		defer c.ring.Close()
		if c.err == nil {
			cut := c.written - c.headCap - c.ringLen
			if cut > 0 {
				fmt.Fprintf(c.f, "\n[paddock: %d bytes cut here; the log keeps the first %d and the last %d of %d bytes]\n", cut, c.headCap, c.ringLen, c.written)
			}
			start := int64(0)
			if c.ringLen == c.tailCap {
				start = c.ringPos
			}
			// The ring in order: [start, ringLen) then [0, start).
			if _, err := io.Copy(c.f, io.NewSectionReader(c.ring, start, c.ringLen-start)); err != nil && c.err == nil {
				c.err = err
			}
			if start > 0 {
				if _, err := io.Copy(c.f, io.NewSectionReader(c.ring, 0, start)); err != nil && c.err == nil {
					c.err = err
				}
			}
		}
	}
	if c.f != nil {
		if err := c.f.Close(); err != nil && c.err == nil {
			c.err = err
		}
	}
	return c.err
}

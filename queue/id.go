package queue

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"

	"paddock/jobspec"
)

var idGen struct {
	sync.Mutex
	lastMS uint64
	lastLo uint32
}

// NewID returns a job id: 16 lower-case Crockford base32 characters encoding
// 80 bits, 48 of milliseconds since the Unix epoch then 32 random. Ids sort
// by creation time as strings; within one process and millisecond they are
// strictly increasing (the random part is incremented), and across processes
// they collide with probability 2^-32 per pair created in the same
// millisecond (the store's primary key then refuses the batch, which the
// caller may retry). Safe for concurrent use.
func NewID(now time.Time) string {
	ms := uint64(now.UnixMilli())
	idGen.Lock()
	var lo uint32
	if ms <= idGen.lastMS {
		ms = idGen.lastMS
		lo = idGen.lastLo + 1
		if lo == 0 { // wrapped: borrow the next millisecond
			ms++
		}
	} else {
		var b [4]byte
		_, _ = rand.Read(b[:])
		lo = binary.BigEndian.Uint32(b[:]) >> 1 // leave room to increment
	}
	idGen.lastMS, idGen.lastLo = ms, lo
	idGen.Unlock()

	var out [jobspec.IDLen]byte
	// 80 bits: ms (48) << 32 | lo (32); emit 5 bits at a time, high first.
	hi := ms >> 32           // top 16 bits
	v := ms<<32 | uint64(lo) // low 64 bits
	for i := jobspec.IDLen - 1; i >= 0; i-- {
		out[i] = jobspec.IDAlphabet[v&31]
		v = v>>5 | (hi&31)<<59
		hi >>= 5
	}
	return string(out[:])
}

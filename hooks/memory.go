package hooks

import (
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
	"golang.org/x/sys/unix"
)

// keepResidentBytes is how much of a released linear memory a pooled
// mapping keeps resident (cleared) for the next instance: 16 MiB, more than
// a Go-built hook uses. Beyond it, pages are given back to the kernel.
const keepResidentBytes = 16 << 20

// memLimiter is the memory allocator of one instance: it backs the linear
// memory with a mapping of its own (from pool, when there is one) and
// refuses (recording hit) any growth past limitBytes. Used by the one
// goroutine running the instance; hit may be read by any.
type memLimiter struct {
	limitBytes uint64
	pool       *mappingPool // nil: a fresh mapping, released at Free
	hit        atomic.Bool
}

// Allocate implements experimental.MemoryAllocator.
func (l *memLimiter) Allocate(_, _ uint64) experimental.LinearMemory {
	return &linearMemory{l: l}
}

// linearMemory is one instance's linear memory, in a mapping: the limit's
// worth of address space, made readable and writable as the memory grows.
// It never moves, so growing copies nothing, and only the pages the guest
// touches are resident: growing by N bytes costs at most N bytes of
// memory. Free hands the mapping back to the pool (or the kernel).
type linearMemory struct {
	l    *memLimiter
	m    *mapping
	used uint64 // the largest size this instance had: what it may have written
}

// Reallocate implements experimental.LinearMemory: it returns the first
// size bytes, or nil (the grow fails) past the limit or when the kernel
// refuses the mapping.
func (lm *linearMemory) Reallocate(size uint64) []byte {
	if size > lm.l.limitBytes {
		lm.l.hit.Store(true)
		return nil
	}
	if lm.m == nil {
		if lm.m = lm.l.pool.get(); lm.m == nil {
			return nil
		}
	}
	m := lm.m
	if size > m.rw {
		if err := unix.Mprotect(m.mem[m.rw:size], unix.PROT_READ|unix.PROT_WRITE); err != nil {
			return nil
		}
		m.rw = size
	}
	lm.used = max(lm.used, size)
	return m.mem[:size:size]
}

// Free implements experimental.LinearMemory.
func (lm *linearMemory) Free() {
	if lm.m != nil {
		lm.l.pool.put(lm.m, lm.used)
		lm.m = nil
	}
}

// mapping is the address space reserved for one linear memory (the hook's
// limit, PROT_NONE so that nothing is committed), of which the first rw
// bytes are readable and writable. While pooled, all of them read as zero.
type mapping struct {
	mem []byte
	rw  uint64
}

// mappingPool keeps the mappings of a hook's closed instances for its next
// ones: a command hook makes an instance per call, and pages mapped afresh
// cost a fault each the first time the guest touches them, where a pooled
// page is only cleared. Safe for concurrent use; the nil pool keeps
// nothing.
type mappingPool struct {
	limitBytes uint64
	free       chan *mapping
	closed     atomic.Bool
}

// newMappingPool returns a pool for linear memories of at most limitBytes
// that keeps up to n mappings.
func newMappingPool(limitBytes uint64, n int) *mappingPool {
	return &mappingPool{limitBytes: limitBytes, free: make(chan *mapping, n)}
}

// get returns a pooled mapping, or reserves a new one; nil when the kernel
// refuses.
func (p *mappingPool) get() *mapping {
	if p != nil {
		select {
		case m := <-p.free:
			return m
		default:
		}
	}
	limit := uint64(DefaultMemoryBytes)
	if p != nil {
		limit = p.limitBytes
	}
	mem, err := unix.Mmap(-1, 0, int(max(limit, pageBytes)), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil
	}
	return &mapping{mem: mem}
}

// put takes back m, whose first used bytes an instance may have written:
// it clears them (past keepResidentBytes it gives the pages back to the
// kernel instead, which reads them as zero again) and keeps m, or unmaps
// it when the pool is full or closed. No byte of one decision is seen by
// the next.
func (p *mappingPool) put(m *mapping, used uint64) {
	if p == nil || p.closed.Load() || len(p.free) == cap(p.free) {
		_ = unix.Munmap(m.mem)
		return
	}
	used = min(used, m.rw)
	keep := min(used, keepResidentBytes)
	clear(m.mem[:keep])
	if used > keep && unix.Madvise(m.mem[keep:used], unix.MADV_DONTNEED) != nil {
		_ = unix.Munmap(m.mem)
		return
	}
	select {
	case p.free <- m:
	default:
		_ = unix.Munmap(m.mem)
	}
}

// close unmaps the pooled mappings; later ones are unmapped as they come.
func (p *mappingPool) close() {
	p.closed.Store(true)
	for {
		select {
		case m := <-p.free:
			_ = unix.Munmap(m.mem)
		default:
			return
		}
	}
}

package hooks

import (
	"bytes"
	"errors"
	"fmt"
	"math"
)

// Deadline metering.
//
// wazero's WithCloseOnContextDone makes the compiled code check, at every
// loop header, whether the call's context has ended; nothing else is
// checked. A module whose work has no loop (recursion, a long chain of
// calls, long straight-line bodies) would run past its timeout for as long
// as it likes. meter rewrites each module once, at load, so that no guest
// code can run long without reaching such a check:
//
//   - a mutable i32 global, the budget, is added; it starts at meterBudget;
//   - at every function entry and after every call and call_indirect (a
//     "checkpoint"), the budget is charged the number of instructions of
//     the function (at most meterBudget): between a checkpoint and the next
//     one, or the next loop header, execution moves forward through one
//     function body, so it runs at most that many instructions;
//   - before memory.copy and memory.fill, the budget is charged one unit per
//     2^meterBulkShift bytes of the length operand;
//   - before memory.grow, a grow that would take the memory past the hook's
//     limit is first tried with the size just past the limit, so that the
//     allocator (memLimiter) sees, refuses and records it: wazero itself
//     refuses a grow past 4 GiB or past the module's declared maximum
//     without asking the allocator. The guest's own grow then fails as it
//     would have;
//   - when the budget is spent, it is reset and an empty `loop` runs, whose
//     header is one of wazero's checks: a call past its deadline stops there;
//   - after a call to an imported (host) function, and after every
//     call_indirect when a table may hold one, the empty loop runs whatever
//     the budget: a host call may take any time (a sleep, random bytes over
//     the whole memory), and its instructions do not measure it;
//
// So between two of wazero's checks a guest runs at most about
// 2*meterBudget units of work (an instruction, or 64 bytes copied), a few
// milliseconds, whatever its code. Nothing else changes: no branch depth,
// local or function index moves (the inserted code is stack-neutral, its
// blocks are self-contained, the two added locals come after the others,
// the three added globals after the others, and two exports are added,
// see "Call-stack metering" below). Tables are capped too (see
// maxTableElements), as wazero keeps them in host memory outside the
// hook's memory limit.
//
// meter decodes every instruction of the features paddock enables
// (api.CoreFeaturesV2: MVP, mutable globals, sign extension, non-trapping
// float-to-int, bulk memory, multi-value, reference types, SIMD) and refuses
// anything else; the caller then compiles the original to report wazero's
// own error for a module that is invalid. Custom sections are dropped
// (DWARF's code offsets would no longer match, wazero keeps each in
// memory, and a "name" section's counts are trusted by its decoder).

const (
	// meterBudget is the number of units a guest may spend between two
	// forced checks: about a millisecond of simple instructions. A
	// function of more instructions charges this much at each checkpoint,
	// so every checkpoint of it is a check.
	meterBudget = 1 << 20
	// meterBulkShift: memory.copy and memory.fill cost one unit per
	// 2^meterBulkShift bytes.
	meterBulkShift = 6
	// maxTableElements caps the elements of all of a module's tables
	// together (wazero keeps each as 8 bytes of host memory, outside the
	// linear memory limit): 2^20, 8 MiB. A module whose tables start
	// larger is refused; a table.grow past the cap returns -1 to the guest.
	maxTableElements = 1 << 20
	// maxElementEntries caps the references of all of a module's element
	// segments together: wazero keeps each, decoded, in host memory for
	// as long as the module is loaded (about 80 bytes a reference, so a
	// 16 MB module of one-byte references took 1.3 GB before it could be
	// refused for anything else). No segment can fill more than all the
	// tables' maxTableElements anyway.
	maxElementEntries = maxTableElements
	// maxTypes, maxImports, maxElementSegments and maxDataSegments cap how
	// many of each a module may declare: wazero decodes each into host
	// memory at load, outside the linear memory limit, and spends time on
	// each (4 million function types took 1.9 GB and 13 s; 4 million
	// empty data segments 368 MB). A Go-built module has a few hundred
	// types, a few dozen imports and segments.
	maxTypes           = 1 << 16
	maxImports         = 1 << 16
	maxElementSegments = 1 << 16
	maxDataSegments    = 1 << 16
	maxExports         = 1 << 16
	// maxTypeValues caps a function type's parameters and its results
	// each, as the JavaScript embedding does (1,000): wazero's load time
	// grows with the square of a type's parameters (80,000 took 7 s).
	maxTypeValues = 1000
	// maxTypeValuesTotal caps the parameters and results of all of a
	// module's types together: wazero's work grows with the square of
	// each type's (16,000 types of 1,000 parameters took 7.6 s). A
	// Go-built module's types hold a few thousand in all.
	maxTypeValuesTotal = 1 << 16
	// maxGlobals caps a module's globals, imported and defined: wazero
	// keeps each instance's globals in host memory, outside the linear
	// memory limit (a million of them cost about 70 MB an instance).
	// A Go-built module has a handful.
	maxGlobals = 1 << 16
)

// Call-stack metering.
//
// wazero keeps a call's wasm stack in host memory, outside the linear
// memory limit, and doubles it as calls nest, up to a ceiling of its own
// (about 100 MB reached, 150 MB while the last doubling copies); a pooled
// instance keeps its grown stack. meter bounds it: a second added global,
// the stack depth, is charged at every function entry a bound on the
// function's frame (stackFrameUnits), in units of stackUnitBytes, and set
// back to the caller's value after every call the function makes. An entry
// that takes it past maxStackUnits traps (unreachable); the host, which
// reads the third added global (the deepest the depth went, exported as
// exportDeepest), reports the trap as the limit. The host sets the depth
// (exported as exportDepth) to zero before each call it makes into the
// instance: a call from the host is charged at entry and never given back.
const (
	// stackUnitBytes is the size of one stack unit: a v128 local or
	// operand, the widest value a frame spills.
	stackUnitBytes = 16
	// MaxCallStackBytes is the call-stack budget of one call into a hook,
	// in bytes of estimated frames (stackFrameUnits): 8 MiB. A call
	// past it is a deny (ErrCallStack). The estimate is an upper bound
	// (every local and every operand the function could hold, 16 bytes
	// each), so wazero's real stack stays below it; wazero allocates at
	// most about twice what it uses.
	MaxCallStackBytes = 8 << 20
	maxStackUnits     = MaxCallStackBytes / stackUnitBytes
	// keepStackUnits: a reactor instance whose calls went deeper than
	// this (1 MiB of estimated frames) is closed after its decision
	// rather than pooled, so that idle instances do not keep a grown
	// stack.
	keepStackUnits = (1 << 20) / stackUnitBytes
	// exportDepth and exportDeepest name the exported stack globals;
	// a module that exports either name itself is refused.
	exportDepth   = "paddock:stack_depth"
	exportDeepest = "paddock:stack_deepest"
)

// stackFrameUnits bounds the frame of fb: each local (parameters
// included), each operand a spill may keep (at most one per instruction),
// each of its results and of the parameters and results of the largest
// call it makes (passed in its frame), a unit each, and four for the return
// address, frame pointer and alignment. Past maxStackUnits it is
// maxStackUnits+1: the entry traps anyway.
func stackFrameUnits(fb *funcBody) int32 {
	return int32(min(4+fb.locals+uint64(fb.count)+fb.values, maxStackUnits+1))
}

// Compile limits.
//
// wazero's compiler takes time and memory that grow with a function's size
// and, faster, with its block nesting, its blocks and branches, and its
// locals times its blocks (quadratically: 4096 nested blocks take about
// 0.4 s, 100000 minutes; 16,000 ifs in a row, 35 s). meter refuses, before
// anything is compiled, a module past any of these limits, with an error
// wrapping ErrTooLarge naming the function. The largest example hook
// (denylist, 3.4 MB) has 2,195 functions, at most 14,230 instructions, 21
// locals, 549 nested blocks, 1,777 blocks and branches and 8,932 values in
// one function, and a compile cost of 5.5 million.
const (
	// MaxFunctions caps a module's defined functions.
	MaxFunctions = 20_000
	// MaxFunctionInstructions caps the instructions of one function
	// (each br_table label counts as one).
	MaxFunctionInstructions = 100_000
	// MaxFunctionLocals caps one function's locals, parameters included.
	MaxFunctionLocals = 50_000
	// MaxNesting caps the depth of nested blocks, loops and ifs in one
	// function.
	MaxNesting = 2_048
	// MaxFunctionBlocks caps the branches and blocks of one function,
	// an estimate of its basic blocks: 1 for each block, else, br_if and
	// br_table, 2 for each loop and if, 2 for each check meter adds (at
	// the entry, after each call, before each bulk instruction), 1 for
	// each memory.grow. The compiler's time grows with their square
	// (16,000 blocks in a row take 6 s, 16,000 ifs 35 s). A Go-built hook
	// has at most 1,777.
	MaxFunctionBlocks = 8_192
	// MaxFunctionValues caps, in one function, the locals times the
	// blocks, loops and ifs, plus the values each block and call takes
	// and leaves: the values the compiler may carry from block to block
	// (6,000 locals read after 6,000 loops: 7 s). A Go-built hook has at
	// most 8,932.
	MaxFunctionValues = 1 << 18
	// MaxModuleCost caps the estimated compile work of all functions
	// together, in instructions' worth (about 0.3 µs each): for each
	// function, its instructions + nesting²/16 + blocks²/8 + values/2
	// (the terms grow as wazero's compile time does, measured). The
	// largest example hook (denylist) costs 5.5 million.
	MaxModuleCost = 24_000_000
)

// wasmHeader is the magic number and version 1 of the binary format.
var wasmHeader = []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}

// Section ids (WebAssembly core spec 2.0, 5.5.2).
const (
	secCustom   = 0
	secType     = 1
	secImport   = 2
	secFunction = 3
	secTable    = 4
	secGlobal   = 6
	secExport   = 7
	secElement  = 9
	secCode     = 10
	secData     = 11
)

// sectionRank is the order non-custom sections must appear in.
var sectionRank = map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}

// errMeter marks a module meter cannot decode: one that wazero refuses as
// invalid too (the caller compiles it to report wazero's own error).
var errMeter = errors.New("cannot add deadline checks")

// errReserved marks a valid module that uses a name meter adds.
var errReserved = errors.New("cannot add stack checks")

// meter returns wasm rewritten as described above, for a memory limit of
// limitPages pages. It never modifies wasm. Errors wrap errMeter and say
// what and where (section, function, offset).
//
// The grow probe relies on memLimiter refusing every size past limitPages:
// the rewritten module is meant for paddock's allocator only.
func meter(wasm []byte, limitPages uint32) ([]byte, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:8], wasmHeader) {
		return nil, fmt.Errorf("%w: not a WebAssembly 1.0 binary", errMeter)
	}
	type section struct {
		id   byte
		body []byte
	}
	var secs []section
	seen := map[byte]bool{}
	r := &wreader{b: wasm, pos: 8}
	for r.pos < len(r.b) && r.err == nil {
		id := r.byte()
		size := r.u32()
		body := r.bytes(int(size))
		if r.err != nil {
			break
		}
		if id != secCustom {
			if _, ok := sectionRank[id]; !ok || seen[id] {
				return nil, fmt.Errorf("%w: unknown or repeated section %d", errMeter, id)
			}
			seen[id] = true
		}
		secs = append(secs, section{id, body})
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: section list: %v", errMeter, r.err)
	}

	// What the rewrite needs to know: the parameter count of each function
	// type, the type of each defined function, how many functions and
	// globals are imported, whether a table may hold an imported function.
	m := &meterModule{limitPages: limitPages}
	for _, s := range secs {
		r := &wreader{b: s.body}
		switch s.id {
		case secType:
			n := r.u32()
			var total uint64
			if n > maxTypes {
				return nil, fmt.Errorf("%w: %d types, more than %d", ErrTooLarge, n, maxTypes)
			}
			for i := uint32(0); i < n && r.err == nil; i++ {
				if r.byte() != 0x60 {
					r.fail("type %d is not a function type", i)
				}
				params := r.u32()
				if total += uint64(params); total > maxTypeValuesTotal {
					return nil, fmt.Errorf("%w: types hold more than %d parameters and results in all", ErrTooLarge, maxTypeValuesTotal)
				}
				if params > maxTypeValues {
					return nil, fmt.Errorf("%w: type %d has %d parameters, more than %d", ErrTooLarge, i, params, maxTypeValues)
				}
				r.skip(int(params))
				results := r.u32()
				if total += uint64(results); total > maxTypeValuesTotal {
					return nil, fmt.Errorf("%w: types hold more than %d parameters and results in all", ErrTooLarge, maxTypeValuesTotal)
				}
				if results > maxTypeValues {
					return nil, fmt.Errorf("%w: type %d has %d results, more than %d", ErrTooLarge, i, results, maxTypeValues)
				}
				r.skip(int(results))
				m.paramCounts = append(m.paramCounts, params)
				m.resultCounts = append(m.resultCounts, results)
			}
		case secImport:
			n := r.u32()
			if n > maxImports {
				return nil, fmt.Errorf("%w: %d imports, more than %d", ErrTooLarge, n, maxImports)
			}
			for i := uint32(0); i < n && r.err == nil; i++ {
				r.skip(int(r.u32())) // module
				r.skip(int(r.u32())) // name
				switch kind := r.byte(); kind {
				case 0x00: // func
					m.importTypes = append(m.importTypes, r.u32())
					m.importedFuncs++
				case 0x01: // table
					r.byte()
					r.limits()
				case 0x02: // memory
					r.limits()
				case 0x03: // global
					r.byte()
					r.byte()
					m.budget++
				default:
					r.fail("import %d has unknown kind %#x", i, kind)
				}
			}
		case secFunction:
			n := r.u32()
			if n > MaxFunctions {
				return nil, fmt.Errorf("%w: %d functions, more than %d", ErrTooLarge, n, MaxFunctions)
			}
			for i := uint32(0); i < n && r.err == nil; i++ {
				m.funcTypes = append(m.funcTypes, r.u32())
			}
		case secGlobal:
			n := r.u32()
			m.budget += n
			if m.budget > maxGlobals {
				return nil, fmt.Errorf("%w: %d globals, more than %d", ErrTooLarge, m.budget, maxGlobals)
			}
			for i := uint32(0); i < n && r.err == nil; i++ {
				r.byte() // type
				r.byte() // mutability
				m.constExpr(r)
			}
		case secElement:
			if err := m.elements(r); err != nil {
				return nil, err
			}
		case secData:
			// Only counted: the segments are copied as they are.
			if n := r.u32(); n > maxDataSegments {
				return nil, fmt.Errorf("%w: %d data segments, more than %d", ErrTooLarge, n, maxDataSegments)
			}
			continue
		case secExport:
			n := r.u32()
			if n > maxExports {
				return nil, fmt.Errorf("%w: %d exports, more than %d", ErrTooLarge, n, maxExports)
			}
			for i := uint32(0); i < n && r.err == nil; i++ {
				if name := r.name(); name == exportDepth || name == exportDeepest {
					return nil, fmt.Errorf("%w: exports %q, a name paddock reserves", errReserved, name)
				}
				r.byte()
				r.u32()
			}
		default:
			continue
		}
		if r.err == nil && r.pos != len(r.b) {
			r.fail("%d bytes left over", len(r.b)-r.pos)
		}
		if r.err != nil {
			return nil, fmt.Errorf("%w: section %d: %v", errMeter, s.id, r.err)
		}
	}

	// The sections as they will be written; the output is allocated once,
	// at its final size (a Go module is megabytes).
	var outSecs []section
	// The added globals: the budget, the stack depth, the deepest it went.
	newGlobal := func(body []byte) []byte {
		body = append(body, 0x7f, 0x01, 0x41) // (mut i32) (i32.const meterBudget)
		body = append(appendS32(body, meterBudget), 0x0b)
		return append(body, 0x7f, 0x01, 0x41, 0x00, 0x0b, 0x7f, 0x01, 0x41, 0x00, 0x0b) // two (mut i32) (i32.const 0)
	}
	const newGlobals = 3
	newExports := func(body []byte) []byte {
		for i, name := range []string{exportDepth, exportDeepest} {
			body = appendU32(body, uint32(len(name)))
			body = append(body, name...)
			body = append(body, 0x03) // global
			body = appendU32(body, m.budget+1+uint32(i))
		}
		return body
	}
	globalDone, exportDone := false, false
	for _, s := range secs {
		if !globalDone && s.id != secCustom && sectionRank[s.id] > sectionRank[secGlobal] {
			outSecs = append(outSecs, section{secGlobal, newGlobal(appendU32(nil, newGlobals))})
			globalDone = true
		}
		if !exportDone && s.id != secCustom && sectionRank[s.id] > sectionRank[secExport] {
			outSecs = append(outSecs, section{secExport, newExports(appendU32(nil, 2))})
			exportDone = true
		}
		switch s.id {
		case secCustom:
			name := (&wreader{b: s.body}).name()
			// No custom section is kept: wazero would keep each in
			// memory (~144 bytes, empty ones included), and it decodes a
			// "name" section's counts before its entries (a 24-byte one
			// claiming 2^32 names ran the process out of memory), for
			// names that only label trap messages.
			_ = name
			continue
		case secTable:
			body, err := capTables(s.body)
			if err != nil {
				return nil, err
			}
			s.body = body
		case secGlobal:
			r := &wreader{b: s.body}
			n := r.u32()
			s.body = newGlobal(append(appendU32(nil, n+newGlobals), s.body[r.pos:]...))
			globalDone = true
		case secExport:
			r := &wreader{b: s.body}
			n := r.u32()
			s.body = newExports(append(appendU32(nil, n+2), s.body[r.pos:]...))
			exportDone = true
		case secCode:
			body, err := m.code(s.body)
			if err != nil {
				return nil, err
			}
			s.body = body
		}
		outSecs = append(outSecs, s)
	}
	if !globalDone {
		outSecs = append(outSecs, section{secGlobal, newGlobal(appendU32(nil, newGlobals))})
	}
	if !exportDone {
		outSecs = append(outSecs, section{secExport, newExports(appendU32(nil, 2))})
	}
	size := len(wasmHeader)
	for _, s := range outSecs {
		size += 1 + len(appendU32(nil, uint32(len(s.body)))) + len(s.body)
	}
	out := make([]byte, 0, size)
	out = append(out, wasmHeader...)
	for _, s := range outSecs {
		out = append(out, s.id)
		out = appendU32(out, uint32(len(s.body)))
		out = append(out, s.body...)
	}
	return out, nil
}

// meterModule is what the rewrite knows of a module.
type meterModule struct {
	paramCounts   []uint32 // per type
	resultCounts  []uint32 // per type
	importTypes   []uint32 // per imported function
	funcTypes     []uint32 // per defined function
	importedFuncs uint32
	budget        uint32 // index of the added global: the globals before it
	limitPages    uint32 // the hook's memory limit
	// hostInTable: an imported function is referenced as a value (element
	// segment, ref.func), so call_indirect may reach the host.
	hostInTable bool
}

// constExpr reads a constant expression (through its end), noting any
// ref.func of an imported function.
func (m *meterModule) constExpr(r *wreader) {
	for depth := 1; depth > 0 && r.err == nil; {
		ins := decodeInstruction(r, m)
		depth += ins.depth
		m.noteRef(ins)
	}
}

func (m *meterModule) noteRef(ins instruction) {
	if ins.kind == insRefFunc && ins.index < m.importedFuncs {
		m.hostInTable = true
	}
}

// elements reads the element section (the eight segment encodings of the
// core spec, 5.5.12), noting any imported function it references. It
// returns an error wrapping ErrTooLarge when the segments hold more than
// maxElementEntries references in all.
func (m *meterModule) elements(r *wreader) error {
	n := r.u32()
	if n > maxElementSegments {
		return fmt.Errorf("%w: %d element segments, more than %d", ErrTooLarge, n, maxElementSegments)
	}
	var entries uint64
	for i := uint32(0); i < n && r.err == nil; i++ {
		flags := r.u32()
		if flags > 7 {
			r.fail("element segment %d has unknown flags %d", i, flags)
			return nil
		}
		if flags&1 == 0 { // active: offset expression, after a table index for 2 and 6
			if flags&2 != 0 {
				r.u32()
			}
			m.constExpr(r)
		}
		if flags&3 != 0 { // elemkind (0x00) or reftype
			r.byte()
		}
		count := r.u32()
		if entries += uint64(count); entries > maxElementEntries {
			return fmt.Errorf("%w: element segments hold more than %d references in all", ErrTooLarge, maxElementEntries)
		}
		for j := uint32(0); j < count && r.err == nil; j++ {
			if flags&4 == 0 { // function indices
				if r.u32() < m.importedFuncs {
					m.hostInTable = true
				}
			} else {
				m.constExpr(r)
			}
		}
	}
	return nil
}

// capTables rewrites the table section so that all tables together can
// hold at most maxTableElements: each table's maximum becomes at most its
// minimum plus an equal share of what the minimums leave.
func capTables(body []byte) ([]byte, error) {
	type table struct {
		ref      byte
		min, max uint64
		hasMax   bool
	}
	r := &wreader{b: body}
	n := r.u32()
	tables := make([]table, 0, min(n, 1024))
	var sumMin uint64
	for i := uint32(0); i < n && r.err == nil; i++ {
		t := table{ref: r.byte()}
		var flags byte
		flags, t.min, t.max = r.limits()
		t.hasMax = flags == 0x01
		sumMin += t.min
		tables = append(tables, t)
	}
	if r.err == nil && r.pos != len(body) {
		r.fail("%d bytes left over", len(body)-r.pos)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: table section: %v", errMeter, r.err)
	}
	if sumMin > maxTableElements {
		return nil, fmt.Errorf("%w: tables start with %d elements in all, more than %d", ErrTooLarge, sumMin, maxTableElements)
	}
	share := uint64(0)
	if n > 0 {
		share = (maxTableElements - sumMin) / uint64(n)
	}
	out := appendU32(nil, n)
	for _, t := range tables {
		mx := t.min + share
		if t.hasMax && t.max < mx {
			mx = t.max
		}
		out = append(out, t.ref, 0x01)
		out = appendU32(out, uint32(t.min))
		out = appendU32(out, uint32(mx))
	}
	return out, nil
}

// funcBody is one decoded function body: where its locals end, how many
// instructions it has, and where code is to be inserted.
type funcBody struct {
	b                    []byte
	declsStart, declsEnd int    // the local declarations after their count
	decls                uint32 // their count
	locals               uint64 // parameters and locals
	count                int    // instructions
	// values: the function's results, and the most parameters and
	// results of any function it calls: the frame holds those too.
	values uint64
	// ssa: the values wazero's compiler may track across blocks: every
	// local at every block, loop and if, plus the values each block and
	// call takes and leaves (MaxFunctionValues).
	ssa uint64
	// nesting: the deepest block nesting; blocks: the estimate of
	// MaxFunctionBlocks.
	nesting, blocks uint64
	points          []point
}

// compileCost is fb's share of MaxModuleCost.
func (fb *funcBody) compileCost() uint64 {
	return uint64(fb.count) + fb.nesting*fb.nesting/16 + fb.blocks*fb.blocks/8 + fb.ssa/2
}

// point is where meter inserts code: after a call, or before a bulk
// instruction or memory.grow. Kept small: a Go module has about a hundred
// thousand.
type point struct {
	at    int32 // offset in the body
	kind  uint8
	index uint32 // the function called, for a call
}

// maxInsertBytes bounds the code inserted at one point, and at a body's
// entry: it sizes the output.
const maxInsertBytes = 64

// code rewrites every function body of a code section: decoded all first
// (a ref.func anywhere decides how every call_indirect is checked), then
// written out with their checkpoints.
func (m *meterModule) code(body []byte) ([]byte, error) {
	r := &wreader{b: body}
	n := r.u32()
	if r.err == nil && int(n) != len(m.funcTypes) {
		return nil, fmt.Errorf("%w: code section has %d bodies for %d functions", errMeter, n, len(m.funcTypes))
	}
	bodies := make([]funcBody, 0, min(n, 1<<16))
	var total uint64
	for i := uint32(0); i < n && r.err == nil; i++ {
		b := r.bytes(int(r.u32()))
		if r.err != nil {
			break
		}
		if m.funcTypes[i] >= uint32(len(m.paramCounts)) {
			return nil, fmt.Errorf("%w: function %d has unknown type %d", errMeter, i, m.funcTypes[i])
		}
		fb, err := m.decodeBody(b, m.funcTypes[i])
		if le := (*limitError)(nil); errors.As(err, &le) {
			return nil, fmt.Errorf("%w: function %d has %s", ErrTooLarge, m.importedFuncs+i, le.what)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: code of defined function %d: %v", errMeter, i, err)
		}
		if total += fb.compileCost(); total > MaxModuleCost {
			return nil, fmt.Errorf("%w: an estimated compile cost of more than %d instructions' worth in all (functions 0 to %d)", ErrTooLarge, MaxModuleCost, m.importedFuncs+i)
		}
		bodies = append(bodies, fb)
	}
	if r.err == nil && r.pos != len(body) {
		r.fail("%d bytes left over", len(body)-r.pos)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: code section: %v", errMeter, r.err)
	}
	size := len(body)
	for i := range bodies {
		size += (len(bodies[i].points)+2)*maxInsertBytes + 5
	}
	out := make([]byte, 0, size)
	out = appendU32(out, n)
	var fb []byte
	for i := range bodies {
		fb = m.writeBody(fb[:0], &bodies[i])
		out = appendU32(out, uint32(len(fb)))
		out = append(out, fb...)
	}
	return out, nil
}

// typeValues returns the parameters and results of type typ (0, 0 for an
// unknown type: wazero's validation refuses the module).
func (m *meterModule) typeValues(typ uint32) (params, results uint64) {
	if typ >= uint32(len(m.paramCounts)) {
		return 0, 0
	}
	return uint64(m.paramCounts[typ]), uint64(m.resultCounts[typ])
}

// calleeValues returns the parameters and results of a call's callee:
// ins is a call (index: the function) or call_indirect (index: the type).
func (m *meterModule) calleeValues(ins instruction) uint64 {
	typ := ins.index
	if ins.kind == insCall {
		switch f := ins.index; {
		case f < m.importedFuncs:
			typ = m.importTypes[f]
		case f-m.importedFuncs < uint32(len(m.funcTypes)):
			typ = m.funcTypes[f-m.importedFuncs]
		default:
			return 0
		}
	}
	p, r := m.typeValues(typ)
	return p + r
}

// decodeBody decodes the function body b (locals and expression) of a
// function of type typ.
func (m *meterModule) decodeBody(b []byte, typ uint32) (funcBody, error) {
	nParams, nResults := m.typeValues(typ)
	if len(b) > math.MaxInt32 {
		return funcBody{}, fmt.Errorf("a body of %d bytes", len(b))
	}
	r := &wreader{b: b}
	fb := funcBody{b: b, decls: r.u32(), locals: nParams, values: nResults, blocks: 2}
	var callValues uint64
	fb.declsStart = r.pos
	for i := uint32(0); i < fb.decls && r.err == nil; i++ {
		fb.locals += uint64(r.u32())
		r.byte()
		if fb.locals > MaxFunctionLocals {
			return fb, tooLarge("more than %d locals", MaxFunctionLocals)
		}
	}
	if r.err != nil {
		return fb, fmt.Errorf("locals: %v", r.err)
	}
	fb.declsEnd = r.pos
	for depth := 1; depth > 0; {
		if r.pos >= len(b) {
			return fb, errors.New("the body ends before its final end")
		}
		start := r.pos
		ins := decodeInstruction(r, m)
		if r.err != nil {
			return fb, fmt.Errorf("offset %d: %v", start, r.err)
		}
		fb.count++
		depth += ins.depth
		switch ins.kind {
		case insBrTable:
			fb.count += int(ins.index)
			fb.blocks++
		case insBlock:
			fb.ssa += fb.locals + uint64(ins.index)
			fb.nesting = max(fb.nesting, uint64(depth-1))
			fb.blocks++
			if b[start] != 0x02 { // loop, if
				fb.blocks++
			}
		case insCall, insCallIndirect:
			fb.ssa += m.calleeValues(ins)
			fb.blocks += 2
		case insBulk:
			fb.blocks += 2
		case insGrow, insBranch:
			fb.blocks++
		}
		switch {
		case fb.blocks > MaxFunctionBlocks:
			return fb, tooLarge("more than %d blocks and branches (with the checks paddock adds)", MaxFunctionBlocks)
		case depth > MaxNesting+1:
			return fb, tooLarge("blocks nested more than %d deep", MaxNesting)
		case fb.count > MaxFunctionInstructions:
			return fb, tooLarge("more than %d instructions", MaxFunctionInstructions)
		case fb.ssa > MaxFunctionValues:
			return fb, tooLarge("more than %d block and call values (locals times blocks, plus the values blocks and calls take and leave)", MaxFunctionValues)
		}
		m.noteRef(ins)
		// The rewrite adds a global (the budget) after the module's own
		// and a local after the function's: an original that names either
		// is invalid, and must not become valid, and reset the budget, by
		// being rewritten.
		switch {
		case ins.kind == insLocal && uint64(ins.index) >= fb.locals:
			return fb, fmt.Errorf("offset %d: local %d of %d", start, ins.index, fb.locals)
		case ins.kind == insGlobal && ins.index >= m.budget:
			return fb, fmt.Errorf("offset %d: global %d of %d", start, ins.index, m.budget)
		}
		switch ins.kind {
		case insCall, insCallIndirect:
			callValues = max(callValues, m.calleeValues(ins))
			fb.points = append(fb.points, point{int32(r.pos), uint8(ins.kind), ins.index})
		case insBulk, insGrow:
			fb.points = append(fb.points, point{int32(start), uint8(ins.kind), 0})
		}
	}
	if r.pos != len(b) {
		return fb, fmt.Errorf("%d bytes after the final end", len(b)-r.pos)
	}
	fb.values += callValues
	return fb, nil
}

// limitError is a compile limit one function is past; it matches
// ErrTooLarge, and code adds which function.
type limitError struct{ what string }

func (e *limitError) Error() string        { return ErrTooLarge.Error() + ": " + e.what }
func (e *limitError) Is(target error) bool { return target == ErrTooLarge }

func tooLarge(format string, args ...any) error {
	return &limitError{fmt.Sprintf(format, args...)}
}

// writeBody appends to dst fb's body with checkpoints inserted.
func (m *meterModule) writeBody(dst []byte, fb *funcBody) []byte {
	budget := m.budget
	cost := int32(min(fb.count, meterBudget))
	// Two added i32 locals: the function's stack depth, and a scratch
	// for bulk and grow.
	depth, scratch := uint32(fb.locals), uint32(fb.locals)+1
	dst = appendU32(dst, fb.decls+1)
	dst = append(dst, fb.b[fb.declsStart:fb.declsEnd]...)
	dst = append(dst, 0x02, 0x7f) // two i32
	dst = appendStackEntry(dst, budget+1, depth, stackFrameUnits(fb))
	dst = appendCheckpoint(dst, budget, cost)
	prev := fb.declsEnd
	for _, p := range fb.points {
		dst = append(dst, fb.b[prev:p.at]...)
		prev = int(p.at)
		switch p.kind {
		case insCall, insCallIndirect:
			dst = append(dst, 0x20)
			dst = appendU32(dst, depth) // local.get
			dst = append(dst, 0x24)
			dst = appendU32(dst, budget+1) // global.set: the callee's frame is gone
			host := p.kind == insCall && p.index < m.importedFuncs ||
				p.kind == insCallIndirect && m.hostInTable
			if host {
				// A host call may have taken any time: check now.
				dst = append(dst, 0x03, 0x40, 0x0b) // loop end
			} else {
				dst = appendCheckpoint(dst, budget, cost)
			}
		case insGrow:
			dst = appendGrowProbe(dst, scratch, m.limitPages)
		case insBulk:
			// [... n] -> charge n >> meterBulkShift, n stays on the stack.
			dst = append(dst, 0x22)
			dst = appendU32(dst, scratch) // local.tee
			dst = append(dst, 0x23)
			dst = appendU32(dst, budget) // global.get
			dst = append(dst, 0x20)
			dst = appendU32(dst, scratch)                 // local.get
			dst = append(dst, 0x41, meterBulkShift, 0x76) // i32.const; i32.shr_u
			dst = append(dst, 0x6b, 0x24)                 // i32.sub; global.set
			dst = appendU32(dst, budget)
			dst = appendTrip(dst, budget)
		}
	}
	return append(dst, fb.b[prev:]...)
}

// appendGrowProbe appends, before a memory.grow with [... delta] on the
// stack: if size+delta > limit { drop(memory.grow(limit+1-size)) }. The
// probe is refused (the memory is at most limit pages), so nothing changes
// but the allocator's record. delta stays on the stack.
func appendGrowProbe(dst []byte, scratch, limitPages uint32) []byte {
	dst = append(dst, 0x22)
	dst = appendU32(dst, scratch) // local.tee
	dst = append(dst, 0x20)
	dst = appendU32(dst, scratch)                   // local.get
	dst = append(dst, 0xad, 0x3f, 0x00, 0xad, 0x7c) // i64.extend_i32_u; memory.size; i64.extend_i32_u; i64.add
	dst = append(dst, 0x42)
	dst = appendS64(dst, int64(limitPages))   // i64.const
	dst = append(dst, 0x56, 0x04, 0x40, 0x41) // i64.gt_u; if; i32.const
	dst = appendS32(dst, int32(limitPages+1))
	return append(dst, 0x3f, 0x00, 0x6b, 0x40, 0x00, 0x1a, 0x0b) // memory.size; i32.sub; memory.grow; drop; end
}

// appendStackEntry appends, at a function's entry, with the depth global
// at index g, the deepest at g+1, an added local l:
//
//	l = depth + frame; depth = l
//	if l > deepest { deepest = l; if l > maxStackUnits { unreachable } }
//
// Only a new deepest value pays for the second test.
func appendStackEntry(dst []byte, g, l uint32, frame int32) []byte {
	dst = append(dst, 0x23)
	dst = appendU32(dst, g) // global.get depth
	dst = append(dst, 0x41)
	dst = appendS32(dst, frame)   // i32.const
	dst = append(dst, 0x6a, 0x22) // i32.add; local.tee
	dst = appendU32(dst, l)
	dst = append(dst, 0x24)
	dst = appendU32(dst, g) // global.set depth
	dst = append(dst, 0x20)
	dst = appendU32(dst, l) // local.get
	dst = append(dst, 0x23)
	dst = appendU32(dst, g+1)           // global.get deepest
	dst = append(dst, 0x4b, 0x04, 0x40) // i32.gt_u; if
	dst = append(dst, 0x20)
	dst = appendU32(dst, l) // local.get
	dst = append(dst, 0x24)
	dst = appendU32(dst, g+1) // global.set deepest
	dst = append(dst, 0x20)
	dst = appendU32(dst, l) // local.get
	dst = append(dst, 0x41)
	dst = appendS32(dst, maxStackUnits)
	return append(dst, 0x4b, 0x04, 0x40, 0x00, 0x0b, 0x0b) // i32.gt_u; if; unreachable; end; end
}

// appendCheckpoint appends: budget -= cost; then appendTrip.
func appendCheckpoint(dst []byte, budget uint32, cost int32) []byte {
	dst = append(dst, 0x23)
	dst = appendU32(dst, budget) // global.get
	dst = append(dst, 0x41)
	dst = appendS32(dst, cost)    // i32.const
	dst = append(dst, 0x6b, 0x24) // i32.sub; global.set
	dst = appendU32(dst, budget)
	return appendTrip(dst, budget)
}

// appendTrip appends: if budget <= 0 { budget = meterBudget; loop end }.
// The empty loop's header is where wazero checks the deadline.
func appendTrip(dst []byte, budget uint32) []byte {
	dst = append(dst, 0x23)
	dst = appendU32(dst, budget)                    // global.get
	dst = append(dst, 0x41, 0x00, 0x4c, 0x04, 0x40) // i32.const 0; i32.le_s; if
	dst = append(dst, 0x41)
	dst = appendS32(dst, meterBudget) // i32.const
	dst = append(dst, 0x24)
	dst = appendU32(dst, budget)               // global.set
	return append(dst, 0x03, 0x40, 0x0b, 0x0b) // loop end; end
}

// Instruction kinds meter tells apart.
const (
	insPlain        = iota
	insCall         // call: a checkpoint follows it
	insCallIndirect // call_indirect: a checkpoint follows it
	insRefFunc      // ref.func
	insBulk         // memory.copy, memory.fill, memory.init, table.copy, table.init, table.fill: charged by its length
	insGrow         // memory.grow: probed against the limit
	insLocal        // local.get, local.set, local.tee: index checked
	insGlobal       // global.get, global.set: index checked
	insBrTable      // br_table: index is its number of labels
	insBlock        // block, loop, if: index is the values its type takes and leaves
	insBranch       // else, br_if
)

// instruction is what meter needs of one decoded instruction.
type instruction struct {
	kind  int
	depth int    // +1 block, loop, if; -1 end
	index uint32 // the function of a call or ref.func; call_indirect's type; the local or global
}

// Immediate shapes of the one-byte opcodes, for decodeInstruction.
const (
	immInvalid      = iota // not an instruction of the enabled features
	immNone                // nothing follows
	immBlock               // a block type; the depth grows
	immEnd                 // end; the depth shrinks
	immU32                 // one u32 (br, br_if, local.*, global.*, table.get/set, memory.size, ref.func's index)
	immU32x2               // two u32 (a memarg; call_indirect's type and table)
	immBrTable             // a vector of labels and a default
	immCall                // call: the function index
	immCallIndirect        // call_indirect
	immSelectT             // select with a vector of value types
	immGrow                // memory.grow: its memory index
	immS32                 // i32.const
	immS64                 // i64.const
	immF32                 // f32.const: 4 bytes
	immF64                 // f64.const: 8 bytes
	immByte                // ref.null: a reference type
	immRefFunc             // ref.func
	immFC                  // the 0xfc prefix
	immFD                  // the 0xfd prefix (SIMD)
)

// opShapes maps each one-byte opcode to its immediate shape.
var opShapes = func() (t [256]uint8) {
	set := func(shape uint8, lo, hi int) {
		for op := lo; op <= hi; op++ {
			t[op] = shape
		}
	}
	set(immNone, 0x00, 0x01)  // unreachable, nop
	set(immBlock, 0x02, 0x04) // block, loop, if
	set(immNone, 0x05, 0x05)  // else
	set(immEnd, 0x0b, 0x0b)
	set(immU32, 0x0c, 0x0d) // br, br_if
	set(immBrTable, 0x0e, 0x0e)
	set(immNone, 0x0f, 0x0f) // return
	set(immCall, 0x10, 0x10)
	set(immCallIndirect, 0x11, 0x11)
	set(immNone, 0x1a, 0x1b) // drop, select
	set(immSelectT, 0x1c, 0x1c)
	set(immU32, 0x20, 0x26)   // local.*, global.*, table.get, table.set
	set(immU32x2, 0x28, 0x3e) // loads and stores
	set(immU32, 0x3f, 0x3f)   // memory.size
	set(immGrow, 0x40, 0x40)
	set(immS32, 0x41, 0x41)
	set(immS64, 0x42, 0x42)
	set(immF32, 0x43, 0x43)
	set(immF64, 0x44, 0x44)
	set(immNone, 0x45, 0xc4) // numeric, sign extension
	set(immByte, 0xd0, 0xd0) // ref.null
	set(immNone, 0xd1, 0xd1) // ref.is_null
	set(immRefFunc, 0xd2, 0xd2)
	set(immFC, 0xfc, 0xfc)
	set(immFD, 0xfd, 0xfd)
	return t
}()

// decodeInstruction reads one instruction at r. Opcodes outside the
// enabled features set r.err.
func decodeInstruction(r *wreader, m *meterModule) instruction {
	op := r.byte()
	switch opShapes[op] {
	case immNone:
		if op == 0x05 { // else
			return instruction{kind: insBranch}
		}
	case immBlock:
		return instruction{depth: 1, kind: insBlock, index: uint32(min(r.blockType(m), math.MaxUint32))}
	case immEnd:
		return instruction{depth: -1}
	case immU32:
		n := r.u32()
		switch {
		case op >= 0x20 && op <= 0x22:
			return instruction{kind: insLocal, index: n}
		case op == 0x23 || op == 0x24:
			return instruction{kind: insGlobal, index: n}
		case op == 0x0d:
			return instruction{kind: insBranch}
		}
	case immU32x2:
		r.u32()
		r.u32()
	case immBrTable:
		n := r.u32()
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.u32()
		}
		return instruction{kind: insBrTable, index: n}
	case immCall:
		return instruction{kind: insCall, index: r.u32()}
	case immCallIndirect:
		typ := r.u32()
		r.u32()
		return instruction{kind: insCallIndirect, index: typ}
	case immSelectT:
		r.skip(int(r.u32()))
	case immGrow:
		r.u32()
		return instruction{kind: insGrow}
	case immS32:
		r.sleb(5)
	case immS64:
		r.sleb(10)
	case immF32:
		r.skip(4)
	case immF64:
		r.skip(8)
	case immByte:
		r.byte()
	case immRefFunc:
		return instruction{kind: insRefFunc, index: r.u32()}
	case immFC:
		switch sub := r.u32(); {
		case sub <= 7: // trunc_sat
		case sub == 8: // memory.init
			r.u32()
			r.u32()
			return instruction{kind: insBulk}
		case sub == 17: // table.fill
			r.u32()
			return instruction{kind: insBulk}
		case sub == 9, sub == 13, sub == 15, sub == 16: // data.drop, elem.drop, table.grow/size
			r.u32()
		case sub == 10: // memory.copy
			r.u32()
			r.u32()
			return instruction{kind: insBulk}
		case sub == 11: // memory.fill
			r.u32()
			return instruction{kind: insBulk}
		case sub == 12, sub == 14: // table.init, table.copy
			r.u32()
			r.u32()
			return instruction{kind: insBulk}
		default:
			r.fail("unknown instruction 0xfc %d", sub)
		}
	case immFD:
		sub := r.u32()
		switch {
		case sub <= 0x0b, sub == 0x5c, sub == 0x5d: // loads, store: memarg
			r.u32()
			r.u32()
		case sub == 0x0c, sub == 0x0d: // v128.const, i8x16.shuffle
			r.skip(16)
		case sub >= 0x15 && sub <= 0x22: // extract_lane, replace_lane
			r.byte()
		case sub >= 0x54 && sub <= 0x5b: // load_lane, store_lane: memarg, lane
			r.u32()
			r.u32()
			r.byte()
		case sub > 0xff || simdReserved(sub):
			r.fail("unknown instruction 0xfd %d", sub)
		}
	default:
		r.fail("unknown or disabled instruction %#x", op)
	}
	return instruction{}
}

// simdReserved reports the unused opcodes below 0x100 of the SIMD prefix.
func simdReserved(sub uint32) bool {
	switch sub {
	case 0x9a, 0xa2, 0xa5, 0xa6, 0xaf, 0xb0, 0xb2, 0xb3, 0xb4, 0xbb, 0xc2, 0xc5, 0xc6, 0xcf, 0xd0, 0xd2, 0xd3, 0xd4, 0xe2, 0xee:
		return true
	}
	return false
}

// wreader reads the binary format. The first problem is kept in err;
// reads after it return zero values.
type wreader struct {
	b   []byte
	pos int
	err error
}

func (r *wreader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *wreader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.b) {
		r.fail("unexpected end at offset %d", r.pos)
		return 0
	}
	c := r.b[r.pos]
	r.pos++
	return c
}

func (r *wreader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.pos {
		r.fail("%d bytes at offset %d run past the end", n, r.pos)
		return nil
	}
	b := r.b[r.pos : r.pos+n]
	r.pos += n
	return b
}

func (r *wreader) skip(n int) { r.bytes(n) }

// u32 reads an unsigned LEB128 of at most 5 bytes and 32 bits.
func (r *wreader) u32() uint32 {
	if r.pos < len(r.b) && r.b[r.pos] < 0x80 && r.err == nil { // one byte: most of them
		r.pos++
		return uint32(r.b[r.pos-1])
	}
	return r.u32Long()
}

func (r *wreader) u32Long() uint32 {
	var v uint64
	for shift := 0; shift < 35; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			if v > 1<<32-1 {
				r.fail("integer too large at offset %d", r.pos)
			}
			return uint32(v)
		}
	}
	r.fail("integer representation too long at offset %d", r.pos)
	return 0
}

// sleb skips a signed LEB128 of at most maxBytes bytes.
func (r *wreader) sleb(maxBytes int) {
	for i := 0; i < maxBytes; i++ {
		if r.byte() < 0x80 || r.err != nil {
			return
		}
	}
	r.fail("integer representation too long at offset %d", r.pos)
}

// blockType skips a block type: 0x40, a value type, or an s33 type index.
//
// It returns the values the block takes and leaves: 0 for 0x40, 1 for a
// value type, a type's parameters and results for a type index (0 for
// one out of range: the module is invalid).
func (r *wreader) blockType(m *meterModule) uint64 {
	if r.pos < len(r.b) {
		switch r.b[r.pos] {
		case 0x40:
			r.pos++
			return 0
		case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
			r.pos++
			return 1
		}
	}
	start := r.pos
	r.sleb(5)
	var idx uint64
	for i := r.pos - 1; i >= start && r.err == nil; i-- {
		idx = idx<<7 | uint64(r.b[i]&0x7f)
	}
	if idx > math.MaxUint32 {
		return 0
	}
	p, res := m.typeValues(uint32(idx))
	return p + res
}

// limits reads a limits field: its flags byte (0x00 min, 0x01 min max),
// min and max (0 when absent).
func (r *wreader) limits() (flags byte, minimum, maximum uint64) {
	flags = r.byte()
	minimum = uint64(r.u32())
	switch flags {
	case 0x00:
	case 0x01:
		maximum = uint64(r.u32())
	default:
		r.fail("limits flags %#x are not supported", flags)
	}
	return flags, minimum, maximum
}

// name reads a name (a length-prefixed UTF-8 string).
func (r *wreader) name() string { return string(r.bytes(int(r.u32()))) }

// appendU32 appends v as an unsigned LEB128.
func appendU32(dst []byte, v uint32) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

// appendS32 appends v as a signed LEB128.
func appendS32(dst []byte, v int32) []byte { return appendS64(dst, int64(v)) }

// appendS64 appends v as a signed LEB128.
func appendS64(dst []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(dst, c)
		}
		dst = append(dst, c|0x80)
	}
}

package hooks

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// ABI names (TrailEntry has no ABI field; these appear in load errors and
// in `paddock hook test` output).
const (
	// ABICommand: "_start" reads the request on stdin and writes the
	// decision on stdout; a fresh instance per call.
	ABICommand = "command"
	// ABIReactor: "paddock_alloc(size i32) -> i32" and
	// "paddock_decide(ptr i32, len i32) -> i64"; initialised once through
	// "_initialize", instances pooled.
	ABIReactor = "reactor"
	// ABINone: the module exports neither. It loads, so one broken hook
	// does not stop a worker, but every decision through it fails with
	// [ErrNoABI] and so denies the job (fail closed; allows it only with
	// OnError "allow").
	ABINone = "none"
)

// fallbackCompileTimeout bounds the compile that reports wazero's own
// error for a module meter could not decode (wazero checks it between
// functions).
const fallbackCompileTimeout = 2 * time.Second

// maxSleep caps one WASI sleep (poll_oneoff with a clock): a sleeping hook
// wakes at least this often, so its timeout can interrupt it.
const maxSleep = time.Millisecond

// hook is one loaded module: its own runtime (the memory limit is a runtime
// setting), the compiled module, and for reactors a pool of idle instances.
// Safe for concurrent use: each call owns the instance it runs on.
type hook struct {
	cfg      Config
	sha256   string
	abi      string
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	settings json.RawMessage
	modCfg   wazero.ModuleConfig
	idle     chan *instance // reactor only: idle instances, at most cap(idle)
	warming  chan struct{}  // closed when prewarm is over; nil without one
	// validates: a reactor exporting paddock_validate_settings, or a
	// command module that answered the settings request (set at load).
	validates bool
	mappings  *mappingPool // linear memories of closed instances, for the next ones
}

// prewarm makes one instance in the background and leaves it idle
// (ChainOptions.Prewarm). Called once, before the hook is shared.
func (h *hook) prewarm(ctx context.Context) {
	h.warming = make(chan struct{})
	go func() {
		defer close(h.warming)
		callCtx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
		defer cancel()
		in, err := h.newInstance(callCtx, cancel)
		if err != nil {
			return // a decision makes its own, and reports the failure
		}
		if in.lim.hit.Load() { // a grow was refused: the first decision would be denied
			_ = in.mod.Close(context.WithoutCancel(ctx))
			return
		}
		h.release(ctx, in)
	}()
}

// loadHook reads, checks, compiles and classifies the module of cfg (which
// has its defaults filled in).
// MaxModuleBytes is the largest hook module paddock reads: 128 MiB (a
// Go-built module is 2 to 4 MiB).
const MaxModuleBytes = 128 << 20

// readModuleFile reads a module: a regular file (symlinks followed) of
// at most MaxModuleBytes; a device such as /dev/zero is refused unread.
func readModuleFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxModuleBytes+1))
	if err == nil && len(b) > MaxModuleBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes, the most a hook module may be", path, MaxModuleBytes)
	}
	return b, err
}

// readModule reads cfg's module file and returns it with its hex SHA-256,
// checked against cfg.SHA256 when that is set.
func readModule(cfg Config) (wasm []byte, digest string, err error) {
	wasm, err = readModuleFile(cfg.Path)
	if err != nil {
		return nil, "", fmt.Errorf("%w: hook %q: %w", ErrLoad, cfg.Name, err)
	}
	sum := sha256.Sum256(wasm)
	digest = hex.EncodeToString(sum[:])
	if cfg.SHA256 != "" && cfg.SHA256 != digest {
		return nil, "", fmt.Errorf("%w: hook %q (%s): file has %s, its sha256 key says %s", ErrSHA256Mismatch, cfg.Name, cfg.Path, digest, cfg.SHA256)
	}
	return wasm, digest, nil
}

func loadHook(ctx context.Context, cfg Config, cache wazero.CompilationCache, maxIdle int) (_ *hook, err error) {
	loadErr := func(format string, args ...any) error {
		return fmt.Errorf("%w: hook %q (%s): %s", ErrLoad, cfg.Name, cfg.Path, fmt.Sprintf(format, args...))
	}
	wasm, digest, err := readModule(cfg)
	if err != nil {
		return nil, err
	}
	settings := json.RawMessage("{}")
	if cfg.Settings != nil {
		if settings, err = json.Marshal(cfg.Settings); err != nil {
			return nil, &ConfigError{Hook: cfg.Name, Field: "settings", Msg: "not encodable as JSON: " + err.Error()}
		}
	}

	// The hook's memory limit is enforced by memLimiter, which sees every
	// grow and records a refusal, so the cause is reported and the decision
	// denied. wazero's own limit stays at 4 GiB: with it at the hook's
	// limit, a grow past it would be refused silently, before reaching the
	// allocator (meter makes the grows wazero refuses by itself reach it
	// too). The initial size is checked here, as the allocator cannot
	// refuse it.
	minPages, err := memoryMinPages(wasm)
	if err != nil {
		return nil, loadErr("%v", err)
	}
	if minPages*pageBytes > cfg.MemoryBytes {
		return nil, loadErr("initial memory of %d bytes is above the limit of %d bytes", minPages*pageBytes, cfg.MemoryBytes)
	}
	// The features meter decodes, whatever wazero's default becomes.
	rc := wazero.NewRuntimeConfig().
		WithCoreFeatures(api.CoreFeaturesV2).
		WithCloseOnContextDone(true).
		WithCompilationCache(cache)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	defer func() {
		if err != nil {
			_ = rt.Close(context.WithoutCancel(ctx))
		}
	}()
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return nil, loadErr("wasi: %v", err)
	}
	metered, merr := meter(wasm, uint32(cfg.MemoryBytes/pageBytes))
	if merr != nil && !errors.Is(merr, errMeter) {
		// Too large, or valid but using a reserved name: refused
		// uncompiled (compiling it is what the limits prevent).
		return nil, fmt.Errorf("%w: hook %q (%s): %w", ErrLoad, cfg.Name, cfg.Path, merr)
	}
	if merr != nil {
		// A module meter cannot decode is invalid, and wazero refuses it
		// while validating, before compiling any function: report
		// wazero's own message. Should one pass (a gap in meter's
		// decoder), its compile is cut short and the module refused all
		// the same: its limits could not be enforced.
		vctx, cancel := context.WithTimeout(ctx, fallbackCompileTimeout)
		_, err := rt.CompileModule(vctx, wasm)
		timedOut := vctx.Err() != nil
		cancel()
		if err != nil && !timedOut {
			return nil, loadErr("compile: %v", err)
		}
		return nil, loadErr("%v", merr)
	}
	compiled, err := rt.CompileModule(ctx, metered)
	if err != nil {
		return nil, loadErr("compile: %v", err)
	}
	for _, f := range compiled.ImportedFunctions() {
		if mod, name, _ := f.Import(); mod != wasi_snapshot_preview1.ModuleName {
			return nil, loadErr("imports %s.%s; hooks may import only %s", mod, name, wasi_snapshot_preview1.ModuleName)
		}
	}
	if ms := compiled.ImportedMemories(); len(ms) > 0 {
		return nil, loadErr("imports a memory; hooks must define their own")
	}

	h := &hook{cfg: cfg, sha256: digest, rt: rt, compiled: compiled, settings: settings, mappings: newMappingPool(cfg.MemoryBytes, maxIdle)}
	exports := compiled.ExportedFunctions()
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	alloc, decide, start := exports["paddock_alloc"], exports["paddock_decide"], exports["_start"]
	switch {
	case alloc != nil && decide != nil:
		if !sig(alloc, []api.ValueType{i32}, []api.ValueType{i32}) {
			return nil, loadErr("paddock_alloc must have type (i32) -> i32")
		}
		if !sig(decide, []api.ValueType{i32, i32}, []api.ValueType{i64}) {
			return nil, loadErr("paddock_decide must have type (i32, i32) -> i64")
		}
		if v := exports[validateSettingsExport]; v != nil {
			if !sig(v, []api.ValueType{i32, i32}, []api.ValueType{i64}) {
				return nil, loadErr("%s must have type (i32, i32) -> i64", validateSettingsExport)
			}
			h.validates = true
		}
		h.abi = ABIReactor
		h.idle = make(chan *instance, maxIdle)
	case start != nil:
		if !sig(start, nil, nil) {
			return nil, loadErr("_start must have type () -> ()")
		}
		h.abi = ABICommand
	default:
		h.abi = ABINone
		return h, nil
	}

	// No filesystem (no preopens), no environment, no arguments beyond the
	// program name, the real clocks as WASI defines them, sleeps capped.
	mc := wazero.NewModuleConfig().
		WithName("").
		WithArgs(cfg.Name).
		WithSysWalltime().
		WithSysNanotime().
		WithNanosleep(func(ns int64) { time.Sleep(min(time.Duration(ns), maxSleep)) }).
		WithRandSource(rand.Reader)
	if h.abi == ABIReactor {
		mc = mc.WithStartFunctions("_initialize")
	} else {
		mc = mc.WithStartFunctions("_start")
	}
	h.modCfg = mc
	return h, nil
}

func sig(f api.FunctionDefinition, params, results []api.ValueType) bool {
	return bytes.Equal(f.ParamTypes(), params) && bytes.Equal(f.ResultTypes(), results)
}

// close releases the idle instances and the runtime (and every instance
// still open in it).
func (h *hook) close(ctx context.Context) error {
	if h.warming != nil {
		<-h.warming // bounded by the hook's timeout
	}
	if h.idle != nil {
		for {
			select {
			case in := <-h.idle:
				_ = in.mod.Close(ctx)
				continue
			default:
			}
			break
		}
	}
	err := h.rt.Close(ctx)
	h.mappings.close()
	return err
}

// call runs the module once on req and returns its raw decision bytes, the
// kept stderr, and an error wrapping one of the call sentinels (or, when the
// parent ctx ended, an error satisfying errors.Is(err, ctx.Err())).
func (h *hook) call(ctx context.Context, req []byte) ([]byte, string, error) {
	if h.abi == ABINone {
		return nil, "", ErrNoABI
	}
	if h.abi == ABIReactor {
		return h.callReactor(ctx, req)
	}
	return h.callCommand(ctx, req)
}

func (h *hook) callCommand(ctx context.Context, req []byte) ([]byte, string, error) {
	callCtx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	stdout := &limitWriter{limit: MaxOutputBytes, cancel: cancel}
	stderr := &headWriter{limit: MaxStderrBytes}
	lim := &memLimiter{limitBytes: h.cfg.MemoryBytes, pool: h.mappings}
	cfg := h.modCfg.WithStdin(bytes.NewReader(req)).WithStdout(stdout).WithStderr(stderr)
	mod, err := h.rt.InstantiateModule(experimental.WithMemoryAllocator(callCtx, lim), h.compiled, cfg)
	deepest := stackDeepest(mod) // wazero returns the (closed) module when _start fails
	if mod != nil {
		_ = mod.Close(context.WithoutCancel(ctx))
	}
	if err != nil || stdout.over || lim.hit.Load() {
		return nil, stderr.String(), h.classify(ctx, callCtx, err, stdout, lim, deepest)
	}
	return stdout.buf.Bytes(), stderr.String(), nil
}

// instance is one reactor instance. It is owned by one goroutine at a time:
// taken from the pool (or made) at the start of a call, put back after a
// clean call, closed after any failure.
type instance struct {
	mod      api.Module
	alloc    api.Function
	decide   api.Function
	validate api.Function // nil when the module does not export it
	stdout   *limitWriter // counts stdout against MaxOutputBytes, tees into stderr
	stderr   *headWriter
	lim      *memLimiter
	depth    api.MutableGlobal // meter's stack depth, set to 0 before each call
	stack    [2]uint64
}

// stackDeepest returns the deepest stack depth, in stack units, that
// meter's code recorded in mod (nil, or closed after a failed start, is
// fine): past maxStackUnits, the module stopped at the call-stack limit.
func stackDeepest(mod api.Module) uint64 {
	if mod == nil {
		return 0
	}
	g := mod.ExportedGlobal(exportDeepest)
	if g == nil {
		return 0
	}
	return uint64(uint32(g.Get()))
}

func (h *hook) newInstance(ctx context.Context, cancel context.CancelFunc) (*instance, error) {
	in := &instance{stderr: &headWriter{limit: MaxStderrBytes}, lim: &memLimiter{limitBytes: h.cfg.MemoryBytes, pool: h.mappings}}
	in.stdout = &limitWriter{limit: MaxOutputBytes, tee: in.stderr, discard: true, cancel: cancel}
	cfg := h.modCfg.WithStdout(in.stdout).WithStderr(in.stderr)
	mod, err := h.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, in.lim), h.compiled, cfg)
	in.mod = mod // wazero returns the (closed) module when _initialize fails
	if err != nil {
		if mod != nil {
			_ = mod.Close(context.WithoutCancel(ctx))
		}
		return in, err
	}
	depth, ok := mod.ExportedGlobal(exportDepth).(api.MutableGlobal)
	if !ok { // meter exports it in every module it writes
		_ = mod.Close(context.WithoutCancel(ctx))
		return in, fmt.Errorf("%w: the module has no %s global", ErrTrap, exportDepth)
	}
	in.depth = depth
	in.alloc = mod.ExportedFunction("paddock_alloc")
	in.decide = mod.ExportedFunction("paddock_decide")
	in.validate = mod.ExportedFunction(validateSettingsExport)
	return in, nil
}

func (h *hook) callReactor(ctx context.Context, req []byte) ([]byte, string, error) {
	callCtx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	var in *instance
	if h.warming != nil {
		select { // the prewarmed instance is on its way
		case <-h.warming:
		case <-callCtx.Done():
		}
	}
	select {
	case in = <-h.idle:
	default:
		var err error
		in, err = h.newInstance(callCtx, cancel)
		if err != nil {
			return nil, in.stderr.String(), fmt.Errorf("%w (in _initialize)", h.classify(ctx, callCtx, err, in.stdout, in.lim, stackDeepest(in.mod)))
		}
		// A grow refused in _initialize counts against this decision
		// (lim.hit stays set); a pooled instance never had one refused.
	}
	in.stdout.reset(cancel)
	in.stderr.reset()

	out, err := in.run(callCtx, in.decide, req)
	stderr := in.stderr.String()
	if err != nil || in.stdout.over || in.lim.hit.Load() {
		_ = in.mod.Close(context.WithoutCancel(ctx))
		return nil, stderr, h.classify(ctx, callCtx, err, in.stdout, in.lim, stackDeepest(in.mod))
	}
	h.release(ctx, in)
	return out, stderr, nil
}

// release puts in, after a clean call, back in the idle pool; it closes it
// instead when the pool is full or when its calls went deeper than
// keepStackUnits (wazero keeps a grown call stack for the instance's life).
func (h *hook) release(ctx context.Context, in *instance) {
	in.stdout.cancel = nil
	if stackDeepest(in.mod) <= keepStackUnits {
		select {
		case h.idle <- in:
			return
		default:
		}
	}
	_ = in.mod.Close(context.WithoutCancel(ctx))
}

// run is one paddock_alloc + write + fn (paddock_decide or
// paddock_validate_settings) + read on in.
func (in *instance) run(ctx context.Context, fn api.Function, req []byte) ([]byte, error) {
	in.depth.Set(0)
	in.stack[0] = uint64(uint32(len(req)))
	if err := in.alloc.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, fmt.Errorf("paddock_alloc: %w", err)
	}
	ptr := uint32(in.stack[0])
	if !in.mod.Memory().Write(ptr, req) {
		return nil, fmt.Errorf("%w: paddock_alloc(%d) returned %#x, outside memory", ErrTrap, len(req), ptr)
	}
	name := func() string { return fn.Definition().ExportNames()[0] }
	in.stack[0], in.stack[1] = uint64(ptr), uint64(uint32(len(req)))
	in.depth.Set(0)
	if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, fmt.Errorf("%s: %w", name(), err)
	}
	outPtr, outLen := uint32(in.stack[0]>>32), uint32(in.stack[0])
	if outLen > MaxOutputBytes {
		return nil, fmt.Errorf("%w: %s returned %d bytes, more than %d", ErrOutputTooLarge, name(), outLen, MaxOutputBytes)
	}
	b, ok := in.mod.Memory().Read(outPtr, outLen)
	if !ok {
		return nil, fmt.Errorf("%w: %s returned [%#x, +%d), outside memory", ErrTrap, name(), outPtr, outLen)
	}
	return bytes.Clone(b), nil
}

// classify turns a failed call into an error wrapping the sentinel that
// names the cause, most specific first.
//
// deepest is the module's deepest stack depth (stackDeepest).
func (h *hook) classify(parent, callCtx context.Context, err error, stdout *limitWriter, lim *memLimiter, deepest uint64) error {
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("hooks: interrupted: %w", perr)
	}
	var ee *sys.ExitError
	switch {
	case stdout.over:
		return fmt.Errorf("%w: wrote more than %d bytes of stdout", ErrOutputTooLarge, MaxOutputBytes)
	case errors.Is(err, ErrOutputTooLarge), errors.Is(err, ErrTrap):
		return err
	case lim.hit.Load() && err == nil:
		return fmt.Errorf("%w: grew past its memory limit of %s", ErrMemory, sizeText(h.cfg.MemoryBytes))
	case lim.hit.Load():
		return fmt.Errorf("%w: grew past its memory limit of %s (then: %s)", ErrMemory, sizeText(h.cfg.MemoryBytes), firstLine(err))
	case err != nil && deepest > maxStackUnits:
		return fmt.Errorf("%w: calls nested deeper than %s of stack", ErrCallStack, sizeText(MaxCallStackBytes))
	case errors.Is(callCtx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w: did not finish within %v", ErrTimeout, h.cfg.Timeout)
	case errors.As(err, &ee):
		return fmt.Errorf("%w: exited with status %d", ErrExit, ee.ExitCode())
	default:
		return fmt.Errorf("%w: %s", ErrTrap, firstLine(err))
	}
}

// firstLine is err's message up to its first newline (wazero appends a
// wasm stack trace).
func firstLine(err error) string {
	if err == nil {
		return "no error"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// limitWriter keeps (or, with discard, only counts) up to limit bytes. The
// first write past the limit sets over, calls cancel (which interrupts the
// module through WithCloseOnContextDone) and fails. It never holds more
// than limit bytes.
type limitWriter struct {
	limit   int
	n       int
	buf     bytes.Buffer
	discard bool
	tee     *headWriter
	cancel  context.CancelFunc
	over    bool
}

func (w *limitWriter) reset(cancel context.CancelFunc) {
	w.n, w.over, w.cancel = 0, false, cancel
	w.buf.Reset()
}

func (w *limitWriter) Write(p []byte) (int, error) {
	if w.over || w.n+len(p) > w.limit {
		w.over = true
		if w.cancel != nil {
			w.cancel()
		}
		return 0, ErrOutputTooLarge
	}
	w.n += len(p)
	if w.tee != nil {
		_, _ = w.tee.Write(p)
	}
	if !w.discard {
		w.buf.Write(p)
	}
	return len(p), nil
}

// headWriter keeps the first limit bytes written to it and counts the rest.
type headWriter struct {
	limit   int
	buf     []byte
	dropped int
}

func (w *headWriter) reset() { w.buf, w.dropped = w.buf[:0], 0 }

func (w *headWriter) Write(p []byte) (int, error) {
	room := w.limit - len(w.buf)
	if room > len(p) {
		room = len(p)
	}
	w.buf = append(w.buf, p[:room]...)
	w.dropped += len(p) - room
	return len(p), nil
}

// String returns the kept bytes, with a note of how many were dropped.
func (w *headWriter) String() string {
	if w.dropped > 0 {
		return fmt.Sprintf("%s\n[%d more bytes dropped]", w.buf, w.dropped)
	}
	return string(w.buf)
}

// sizeText writes a byte count in MiB when it is a whole number of them.
func sizeText(n uint64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// memoryMinPages returns the initial size in pages of the memory the module
// defines (0 when it defines none), read from its memory section. Called
// before compiling; malformed input is left for the compiler to report.
func memoryMinPages(wasm []byte) (uint64, error) {
	if len(wasm) < 8 {
		return 0, nil
	}
	r := wasm[8:]
	uleb := func() (uint64, bool) {
		var v uint64
		for shift := 0; shift < 64 && len(r) > 0; shift += 7 {
			b := r[0]
			r = r[1:]
			v |= uint64(b&0x7f) << shift
			if b < 0x80 {
				return v, true
			}
		}
		return 0, false
	}
	for len(r) > 0 {
		id := r[0]
		r = r[1:]
		size, ok := uleb()
		if !ok || size > uint64(len(r)) {
			return 0, nil
		}
		if id != 5 { // not the memory section
			r = r[size:]
			continue
		}
		r = r[:size]
		count, ok := uleb()
		if !ok || count == 0 {
			return 0, nil
		}
		if count > 1 {
			return 0, errors.New("defines more than one memory")
		}
		if len(r) == 0 {
			return 0, nil
		}
		r = r[1:] // limits flags
		minPages, _ := uleb()
		return minPages, nil
	}
	return 0, nil
}

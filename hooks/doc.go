// Package hooks runs paddock's policy hooks: WebAssembly modules (WASI
// preview 1) that look at each job and allow it, adjust it or deny it. It is
// the wazero host, the request/decision wire format (version 1, documented
// for hook authors in examples/hooks/README.md) and the hook chain. It does
// not know about queues, workers or bubblewrap: the caller passes a [Job]
// and, through [ChainOptions.Sandbox], how that job would be confined.
//
// # Use
//
//	chain, err := hooks.NewChain(ctx, hooks.ChainOptions{
//		Hooks:    cfgs, // from the config file, in order
//		CacheDir: filepath.Join(stateDir, "cache", "wazero"),
//		Sandbox:  confinedArgvOf, // func(hooks.Job) (hooks.SandboxInfo, error)
//	})
//	defer chain.Close(ctx)
//	res, err := chain.Decide(ctx, hooks.DecideParams{Job: job, Extra: spec.Hooks})
//	// err != nil: ctx ended or chain closed. Otherwise res.Verdict decides;
//	// run res.Job; store res.Trail with the attempt.
//
// # ABIs
//
// The ABI is detected from the module's exports when it is loaded:
//
//   - reactor: exports paddock_alloc(size i32) -> i32 and
//     paddock_decide(ptr i32, len i32) -> i64 (high 32 bits: pointer, low 32
//     bits: length of the decision). Instantiated once through _initialize,
//     then called per decision; idle instances are pooled per hook (at most
//     [ChainOptions.MaxIdleInstances]), an instance is never used by two
//     goroutines at once, and one that traps, times out or misbehaves in any
//     way is closed, never reused. Preferred when a module exports both.
//   - command: exports _start, which reads the request on stdin and writes
//     the decision on stdout, then exits 0. A fresh instance per call.
//
// A module with neither loads (its [HookInfo].ABI is [ABINone], so a caller
// can warn), but every decision through it fails with [ErrNoABI] and denies
// the job: one broken hook does not stop a worker, and no job passes it. A
// module that imports anything but wasi_snapshot_preview1, whose initial
// memory is above its limit or whose tables start with more than 2^20
// elements is refused at load ([ErrLoad]), and so is one whose digest
// differs from the configured one ([ErrSHA256Mismatch]) or one past a
// compile limit ([ErrTooLarge]: [MaxFunctions], [MaxFunctionInstructions],
// [MaxFunctionLocals], [MaxNesting], [MaxFunctionBlocks],
// [MaxFunctionValues], [MaxModuleCost]), which is never compiled: wazero's
// compile time grows with a function's size and with the square of its
// block nesting or of its blocks.
//
// # Settings
//
// [NewChain] asks each hook once to check its settings: a reactor that
// exports paddock_validate_settings(ptr i32, len i32) -> i64 is called like
// paddock_decide; a command module gets the same request on stdin. The
// request is {"version":1,"validate_settings":true,"hook":{"name":...,
// "settings":{...}}} (no job); the answer {"valid":true} or
// {"valid":false,"message":"..."}. A refusal stops the load with
// [ErrSettings], naming the hook. A command module that answers anything
// else (a decision, a failure) does not check its settings and loads as
// before; a reactor whose check fails is refused.
//
// # Fail closed
//
// Every failure of a hook is a deny (unless its on_error is "allow" and the
// request is at most [OnErrorAllowMaxRequestBytes]: past that the job's own
// size may be the cause), with the cause in [TrailEntry.Error]: a trap
// ([ErrTrap]); running past its timeout ([ErrTimeout]: the module is
// stopped whatever its code, see Deadlines); a memory.grow refused by the
// limit, whatever the module answers after it ([ErrMemory]); calls nested
// past [MaxCallStackBytes] of estimated frames ([ErrCallStack]: wazero
// keeps the call stack in host memory); a non-zero exit
// ([ErrExit]); more than [MaxOutputBytes] of stdout ([ErrOutputTooLarge]: the
// module is interrupted at the first byte over, nothing more is buffered);
// output that is not exactly one valid decision, an unknown decision or
// field, a missing reason ([ErrBadDecision]); an adjustment that empties
// argv or names a relative or NUL-bearing path ([ErrBadDecision]) or widens
// the sandbox without may_widen ([ErrWiden]). The chain goes on to the next
// job normally: a failing instance is thrown away. A request larger than
// [MaxRequestBytes] is not sent at all: the job is denied whatever the
// hook's mode or on_error ([ErrRequestTooLarge]).
//
// # Deadlines
//
// wazero stops a call whose context ended only at loop headers. So that no
// guest code can run long without reaching one, each module is rewritten
// once at load (meter.go): a budget is charged at every function entry
// and after every call (by the function's instruction count) and before
// memory.copy and memory.fill (by length); when it is spent, and after
// every call to the host, an empty loop runs, whose header is wazero's
// check. Between two checks a guest runs about a millisecond of work at
// most, whatever its code: loops, recursion, long call chains, bulk
// instructions, sleeps. A decision past its timeout ends with [ErrTimeout]
// within a few milliseconds; the instance is thrown away. The rewrite adds
// no import and moves no index, and a module it cannot decode (a feature
// paddock does not enable) is refused at load.
//
// # What a hook gets
//
//   - no filesystem (no preopened directories), no sockets, no host
//     environment variables, and no arguments but its name as argv[0];
//   - the request on stdin (command) or in its memory (reactor); stderr is
//     kept, the first [MaxStderrBytes], in the trail (for a reactor, stdout
//     too, counted against [MaxOutputBytes]);
//   - the real wall clock and monotonic clock, as WASI's clock_time_get
//     defines them (a policy may depend on the time of day); sleeps are cut
//     into slices of at most 1 ms so that a sleeping hook stays
//     interruptible, and it still cannot outlive its timeout;
//   - random bytes from crypto/rand through random_get;
//   - linear memory up to [Config.MemoryBytes] (default 64 MiB), reserved
//     as address space and mapped in as it grows (growing copies nothing;
//     only the pages touched are resident); tables of at most 2^20
//     elements in all (8 MiB of host memory; a table.grow past that
//     returns -1); time up to [Config.Timeout] (default 1 s) per call.
//
// # Chain
//
// Hooks run in configuration order. Each sees the job as the enforced hooks
// before it left it, and the sandbox section recomputed for that job. The
// first enforced deny ends the chain. A hook in monitor mode runs and is
// recorded (Enforced false) but its adjust is not applied and its deny does
// not deny. Optional hooks run only for jobs that name them
// ([DecideParams.Extra]); a name that is not configured denies the job.
//
// # Concurrency and resources
//
// [Chain.Decide] is safe for concurrent use. Each hook has its own wazero
// runtime (the memory limit is a runtime setting); all share one compilation
// cache, on disk when [ChainOptions.CacheDir] is set, so a restart does not
// recompile. [Chain.Close] waits for decisions in progress, then releases
// everything. Memory held: per reactor hook, up to MaxIdleInstances idle
// instances of up to MemoryBytes each, plus one per decision in progress;
// per command call, one instance for the duration of the call.
//
// # Performance
//
// WithCloseOnContextDone makes wazero call a check (an exit to Go) at every
// loop iteration of the guest, so that a timeout can interrupt it. For
// Go-built modules, whose code is full of loops, that costs about four
// times (tighten: 12 µs a decision without it, 53 µs with it, measured side
// by side); paddock pays it because a hook without it cannot be stopped.
// The deadline rewrite adds a few instructions per call and changes the
// reactor decisions below by less than the noise of the machine. Go
// compiled to wasm is also slow at allocation and reflection:
// encoding/json in a reactor costs about 200 µs a decision. The tighten
// example shows a reactor near 50 µs.
//
// Figures on the project's 2-core VM (Go 1.26, wazero 1.12, amd64), shared
// with other engineers' builds and tests (load average 2 to 7), from
//
//	go test -run '^$' -bench . -benchtime 3s ./hooks/
//
// Each decision is one whole Chain.Decide with one hook on a realistic job
// (request encoding, call, decision parsing and validation included); p50
// and p99 are of single decisions; compile is NewChain for the 3.3 MB
// tighten module. Ranges are over several runs:
//
//	reactor, examples/hooks/tighten (adjusts)  p50  48-59 µs at load 2-4,  ~105 µs at load 5-7
//	reactor, examples/hooks/minimal-reactor    p50  5.3-5.6 µs
//	command, examples/hooks/denylist           p50  10-11 ms
//	command, examples/hooks/minimal            p50  7-9 ms
//	compile, no cache                          0.8-1.5 s
//	compile, warm on-disk cache (a restart)    125-155 ms
//
// The benchmarks also report cpu-µs/op, the process's CPU time per
// decision, which includes the host's and the guest's garbage collection.
package hooks

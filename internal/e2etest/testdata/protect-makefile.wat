;; A command hook that narrows every job's fence: it adds the workspace's
;; Makefile to the job's protected paths (an adjustment without may_widen).
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "{\"decision\":\"adjust\",\"reason\":\"the Makefile is the operator's\",\"job\":{\"protect\":[\"Makefile\"]}}")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 94))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))

;; A command hook that widens every job to workspace_write (an adjustment
;; that needs may_widen).
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "{\"decision\":\"adjust\",\"reason\":\"writes its workspace\",\"job\":{\"mode\":\"workspace_write\"}}")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 86))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))

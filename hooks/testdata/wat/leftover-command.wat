;; Not hostile: a command hook that looks for what an earlier instance left
;; in its memory. paddock reuses the mappings of closed instances, cleared;
;; "a fresh instance per call" must still mean fresh memory. It grows to
;; 20 MiB, and at three places (in its initial memory, in memory it grew,
;; and past the 16 MiB paddock keeps resident) denies if the byte is not
;; zero, then writes one there, and allows.
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "{\"decision\":\"allow\"}")
  (data (i32.const 64) "{\"decision\":\"deny\",\"reason\":\"leftover\"}")
  (func $seen (param $p i32) (result i32)
    local.get $p
    i32.load8_u
    local.get $p
    i32.const 7
    i32.store8)
  (func $write (param $p i32) (param $n i32)
    i32.const 0
    local.get $p
    i32.store
    i32.const 4
    local.get $n
    i32.store
    i32.const 1
    i32.const 0
    i32.const 1
    i32.const 8
    call $fd_write
    drop)
  (func (export "_start")
    i32.const 319 ;; to 320 pages, 20 MiB
    memory.grow
    i32.const -1
    i32.eq
    if
      unreachable
    end
    i32.const 60000
    call $seen
    i32.const 0x00500000 ;; 5 MiB: grown
    call $seen
    i32.or
    i32.const 0x01200000 ;; 18 MiB: past what is kept resident
    call $seen
    i32.or
    if
      i32.const 64
      i32.const 39
      call $write
      return
    end
    i32.const 16
    i32.const 20
    call $write))

;; A command hook that recurses deep, then allows: for a "~" job 100
;; million calls deep (wazero's own stack ceiling is at about 2.6 million
;; frames of this size, 100 MB of host memory).
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) "{\"decision\":\"allow\"}")
  ;; $down recurses n deep, no loop: down(n) = n == 0 ? 0 : down(n-1) + 1.
  (func $down (param $n i32) (result i32)
    local.get $n
    i32.eqz
    if (result i32)
      i32.const 0
    else
      local.get $n
      i32.const 1
      i32.sub
      call $down
      i32.const 1
      i32.add
    end)
  ;; $has reports whether [p, p+n) holds the byte c.
  (func $has (param $p i32) (param $n i32) (param $c i32) (result i32)
    block
      loop
        local.get $n
        i32.eqz
        br_if 1
        local.get $p
        i32.load8_u
        local.get $c
        i32.eq
        if
          i32.const 1
          return
        end
        local.get $p
        i32.const 1
        i32.add
        local.set $p
        local.get $n
        i32.const 1
        i32.sub
        local.set $n
        br 0
      end
    end
    i32.const 0)
  ;; $read reads stdin to EOF at 1024 (at most 60 KiB); returns its length.
  (func $read (result i32)
    (local $n i32)
    block
      loop
        ;; iovec at 0: {1024 + n, 61440 - n}; nread at 8
        i32.const 0
        local.get $n
        i32.const 1024
        i32.add
        i32.store
        i32.const 4
        i32.const 61440
        local.get $n
        i32.sub
        i32.store
        i32.const 0
        i32.const 0
        i32.const 1
        i32.const 8
        call $fd_read
        br_if 1
        i32.const 8
        i32.load
        i32.eqz
        br_if 1
        local.get $n
        i32.const 8
        i32.load
        i32.add
        local.set $n
        br 0
      end
    end
    local.get $n)
  ;; $allow writes {"decision":"allow"} (at 16) on stdout.
  (func $allow
    i32.const 0
    i32.const 16
    i32.store
    i32.const 4
    i32.const 20
    i32.store
    i32.const 1
    i32.const 0
    i32.const 1
    i32.const 8
    call $fd_write
    drop)
  (func (export "_start")
    i32.const 1024
    call $read
    i32.const 126
    call $has
    if
      i32.const 100000000
      call $down
      drop
    end
    call $allow))

;; A command hook that checks its settings when paddock asks at load: on a
;; request whose byte 14 is "v" (paddock encodes {"version":1,
;; "validate_settings":true,... in that order), it refuses settings holding
;; a "~" with a message and accepts others. Every job is allowed.
(module
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) "{\"decision\":\"allow\"}")
  (data (i32.const 64) "{\"valid\":true}")
  (data (i32.const 96) "{\"valid\":false,\"message\":\"no tildes in settings\"}")
  ;; $tilde reports whether [p, p+n) holds the byte "~".
  (func $tilde (param $p i32) (param $n i32) (result i32)
    block
      loop
        local.get $n
        i32.eqz
        br_if 1
        local.get $p
        i32.load8_u
        i32.const 126
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
  ;; $write writes [p, p+n) on stdout.
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
    (local $n i32)
    call $read
    local.set $n
    i32.const 1038
    i32.load8_u
    i32.const 118
    i32.ne
    if
      call $allow
      return
    end
    i32.const 1024
    local.get $n
    call $tilde
    if
      i32.const 96
      i32.const 49
      call $write
    else
      i32.const 64
      i32.const 14
      call $write
    end))

;; A reactor that spins in a host call: for a "~" job, paddock_decide
;; recurses (no loop), and each level asks poll_oneoff to sleep for an
;; hour. paddock cuts each sleep to 1 ms; only a check after the call
;; stops the recursion.
(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 16) "{\"decision\":\"allow\"}")
  (func $sleep
    ;; subscription at 256 (48 bytes): type 0 (clock) at +8, clock id 1
    ;; (monotonic) at +16, timeout 3600 s at +24, flags 0 (relative)
    i32.const 264
    i32.const 0
    i32.store8
    i32.const 272
    i32.const 1
    i32.store
    i32.const 280
    i64.const 3600000000000
    i64.store
    i32.const 256
    i32.const 512
    i32.const 1
    i32.const 600
    call $poll
    drop
    call $sleep)
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
  (func (export "paddock_alloc") (param i32) (result i32)
    i32.const 1024)
  (func (export "paddock_decide") (param i32 i32) (result i64)
    local.get 0
    local.get 1
    call $tilde
    if
      call $sleep
    end
    i64.const 0x0000001000000014))  ;; {"decision":"allow"}: at 16, 20 bytes

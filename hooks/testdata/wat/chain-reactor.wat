;; A reactor whose paddock_decide, for a "~" job, is a deep chain of distinct
;; functions, each calling the next sixteen times in straight-line code:
;; 16^8 (about 4 billion) calls, no loop, no recursion.
(module
  (memory (export "memory") 2)
  (data (i32.const 16) "{\"decision\":\"allow\"}")
  (global $sink (mut i32) (i32.const 0))
  (func $f8 global.get $sink i32.const 1 i32.add global.set $sink)
  (func $f7 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8 call $f8)
  (func $f6 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7 call $f7)
  (func $f5 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6 call $f6)
  (func $f4 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5 call $f5)
  (func $f3 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4 call $f4)
  (func $f2 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3 call $f3)
  (func $f1 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2 call $f2)
  (func $f0 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1 call $f1)
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
      call $f0
    end
    i64.const 0x0000001000000014))  ;; {"decision":"allow"}: at 16, 20 bytes

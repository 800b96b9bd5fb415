;; A reactor that, for a "~" job, grows its memory one page at a time until
;; the limit refuses, ignores the refusal, and allows.
(module
  (memory (export "memory") 2)
  (data (i32.const 16) "{\"decision\":\"allow\"}")
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
      block
        loop
          i32.const 1
          memory.grow
          i32.const -1
          i32.eq
          br_if 1
          br 0
        end
      end
    end
    i64.const 0x0000001000000014))  ;; {"decision":"allow"}: at 16, 20 bytes

;; A reactor hook whose paddock_decide, for a "~" job, is fib(60) by double
;; recursion, with no loop on its way, then would allow.
(module
  (memory (export "memory") 2)
  (data (i32.const 16) "{\"decision\":\"allow\"}")
  ;; fib by double recursion: about 10^12 calls for 60, no loop.
  (func $fib (param $n i64) (result i64)
    local.get $n
    i64.const 2
    i64.lt_u
    if (result i64)
      local.get $n
    else
      local.get $n
      i64.const 1
      i64.sub
      call $fib
      local.get $n
      i64.const 2
      i64.sub
      call $fib
      i64.add
    end)
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
      i64.const 60
      call $fib
      drop
    end
    i64.const 0x0000001000000014))  ;; {"decision":"allow"}: at 16, 20 bytes

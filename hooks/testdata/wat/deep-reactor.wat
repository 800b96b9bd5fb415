;; A reactor hook that recurses deep, then allows: for a "~" job 100
;; million calls deep (wazero's own stack ceiling is at about 2.6 million
;; frames of this size, 100 MB of host memory), for a "^" job 20,000 deep
;; (within paddock's call-stack limit, past what a pooled instance may
;; keep).
(module
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
  (func (export "paddock_alloc") (param i32) (result i32)
    i32.const 1024)
  (func (export "paddock_decide") (param i32 i32) (result i64)
    local.get 0
    local.get 1
    i32.const 126
    call $has
    if
      i32.const 100000000
      call $down
      drop
    end
    local.get 0
    local.get 1
    i32.const 94
    call $has
    if
      i32.const 20000
      call $down
      drop
    end
    i64.const 0x0000001000000014))  ;; {"decision":"allow"}: at 16, 20 bytes

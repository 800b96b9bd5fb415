;; A reactor that checks its settings at load (paddock_validate_settings):
;; settings holding a "~" are refused with a message, settings holding a
;; "!" make the check trap, anything else is accepted. Every job is allowed.
(module
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
  ;; $bang reports whether [p, p+n) holds the byte "!".
  (func $bang (param $p i32) (param $n i32) (result i32)
    block
      loop
        local.get $n
        i32.eqz
        br_if 1
        local.get $p
        i32.load8_u
        i32.const 33
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
  (func (export "paddock_validate_settings") (param i32 i32) (result i64)
    local.get 0
    local.get 1
    call $bang
    if
      unreachable
    end
    local.get 0
    local.get 1
    call $tilde
    if (result i64)
      i64.const 0x0000006000000031 ;; the refusal: at 96, 49 bytes
    else
      i64.const 0x000000400000000e ;; {"valid":true}: at 64, 14 bytes
    end)
  (func (export "paddock_decide") (param i32 i32) (result i64)
    i64.const 0x0000001000000014))

;; Not a hook: a module whose exports exercise the control flow, calls and
;; bulk memory instructions that paddock's rewrite (meter) must leave
;; meaning the same. The tests run each export on the original and on the
;; rewritten module and compare.
(module
  (type $binop (func (param i32 i32) (result i32)))
  (type $pair (func (param i32) (result i32 i32)))
  (memory (export "memory") 1 4)
  (table 4 funcref)
  (elem (i32.const 0) $add $sub $mul $fact)
  (global $calls (mut i32) (i32.const 0))

  (func $add (type $binop) local.get 0 local.get 1 i32.add)
  (func $sub (type $binop) local.get 0 local.get 1 i32.sub)
  (func $mul (type $binop) local.get 0 local.get 1 i32.mul)
  (func $fact (param i32 i32) (result i32)
    global.get $calls i32.const 1 i32.add global.set $calls
    local.get 0
    i32.const 2
    i32.lt_u
    if (result i32)
      i32.const 1
    else
      local.get 0
      local.get 0
      i32.const 1
      i32.sub
      i32.const 0
      call $fact
      i32.mul
    end)

  ;; br_table whose targets include the function's own label, carrying a value.
  (func (export "table") (param i32) (result i32)
    block (result i32)
      block (result i32)
        i32.const 100
        local.get 0
        br_table 0 1 2 0
      end
      i32.const 1
      i32.add
      return
    end
    i32.const 2
    i32.add)

  ;; br_if out of nested blocks with values; a return from deep inside.
  (func (export "nested") (param i32) (result i32)
    (local i32)
    block (result i32)
      block (result i32)
        block (result i32)
          local.get 0
          local.get 0
          i32.const 10
          i32.gt_s
          br_if 2
          drop
          local.get 0
          i32.const 5
          i32.gt_s
          if
            local.get 0
            i32.const 1000
            i32.add
            return
          end
          local.get 0
          i32.const 3
          i32.mul
        end
        i32.const 7
        i32.add
      end
      i32.const 11
      i32.add
    end
    call $noop
    i32.const 1
    i32.add)
  (func $noop)

  ;; A loop with a block type that takes parameters (multi-value): sums 1..n.
  (func (export "sumloop") (param i32) (result i32)
    i32.const 0
    local.get 0
    loop (param i32 i32) (result i32)
      local.tee 0
      i32.add
      local.get 0
      i32.const 1
      i32.sub
      local.tee 0
      i32.const 0
      i32.ne
      if (param i32) (result i32)
        local.get 0
        br 1
      end
    end)

  ;; Multi-value calls and blocks.
  (func $split (type $pair) local.get 0 i32.const 16 i32.shr_u local.get 0 i32.const 0xffff i32.and)
  (func (export "multi") (param i32) (result i32)
    local.get 0
    call $split
    block (type $binop)
      i32.sub
    end
    local.get 0
    call $split
    select (result i32))

  ;; call_indirect through the table; an out-of-range index traps.
  (func (export "indirect") (param i32) (result i32)
    i32.const 7
    i32.const 5
    local.get 0
    call_indirect (type $binop))

  (func (export "fact") (param i32) (result i32)
    local.get 0
    i32.const 0
    call $fact)
  (func (export "calls") (param i32) (result i32) global.get $calls)

  ;; Doubly recursive fib: enough calls to spend the budget several times.
  (func $fib (param i32) (result i32)
    local.get 0
    i32.const 2
    i32.lt_u
    if (result i32)
      local.get 0
    else
      local.get 0
      i32.const 1
      i32.sub
      call $fib
      local.get 0
      i32.const 2
      i32.sub
      call $fib
      i32.add
    end)
  (func (export "fib") (param i32) (result i32) local.get 0 call $fib)

  ;; memory.fill and memory.copy, then a checksum of the first 4 KiB.
  (func (export "bulk") (param i32) (result i32)
    (local $i i32) (local $sum i32)
    i32.const 0
    local.get 0
    i32.const 4096
    memory.fill
    i32.const 100
    i32.const 7
    i32.store8
    i32.const 200
    i32.const 100
    i32.const 50
    memory.copy
    block
      loop
        local.get $i
        i32.const 4096
        i32.ge_u
        br_if 1
        local.get $sum
        local.get $i
        i32.load8_u
        local.get $i
        i32.mul
        i32.add
        local.set $sum
        local.get $i
        i32.const 1
        i32.add
        local.set $i
        br 0
      end
    end
    local.get $sum)

  ;; memory.grow: the old size, or -1 past the declared maximum (4 pages).
  (func (export "grow") (param i32) (result i32)
    local.get 0
    memory.grow)

  ;; SIMD: lanes, shuffles, loads and stores of lanes.
  (func (export "simd") (param i32) (result i32)
    i32.const 0
    v128.const i32x4 1 2 3 4
    local.get 0
    i32x4.splat
    i32x4.add
    v128.store
    i32.const 16
    i32.const 0
    v128.load
    v128.const i32x4 10 20 30 40
    i8x16.shuffle 0 1 2 3 20 21 22 23 8 9 10 11 28 29 30 31
    v128.store
    i32.const 16
    v128.load
    i32x4.extract_lane 3
    i32.const 0
    v128.const i64x2 0 0
    v128.load32_lane 1
    i32x4.extract_lane 1
    i32.add))

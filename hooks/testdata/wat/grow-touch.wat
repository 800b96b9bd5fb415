;; Not hostile: a command hook that grows its memory from 1 to 64 MiB in 1 MiB
;; steps, writing one byte in every 4 KiB page it gets (so the pages are
;; resident), then allows. What a decision's memory growth costs the host
;; is measured with it (BenchmarkMemoryGrowth, and by hand with
;; `paddock hook test grow-touch.wasm -- true` under /usr/bin/time).
(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 16)
  (data (i32.const 16) "{\"decision\":\"allow\"}")
  (func (export "_start")
    (local $p i32)
    block
      loop
        ;; 1024 pages (64 MiB) reached: done
        memory.size
        i32.const 1024
        i32.ge_u
        br_if 1
        i32.const 16
        memory.grow
        i32.const -1
        i32.eq
        br_if 1
        ;; touch every 4 KiB page of the new MiB
        memory.size
        i32.const 16
        i32.sub
        i32.const 16
        i32.shl
        local.set $p
        block
          loop
            local.get $p
            memory.size
            i32.const 16
            i32.shl
            i32.ge_u
            br_if 1
            local.get $p
            i32.const 1
            i32.store8
            local.get $p
            i32.const 4096
            i32.add
            local.set $p
            br 0
          end
        end
        br 0
      end
    end
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
    drop))

;; Test fixture: recover logs the line "line" (error level) as many times as
;; its config has bytes, then answers the bare verdict 1 (recover): a policy
;; that logs a few lines, or a thousand in one call and returns normally.
(module
  (import "sluice" "log" (func $log (param i32 i32 i32)))
  (import "sluice" "config" (func $config (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 1024) "line")
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (func (export "sluice_recover") (param i32 i32) (result i64)
    (local $left i32)
    (local.set $left (call $config (i32.const 0) (i32.const 0)))
    (block $done
      (loop $more
        (br_if $done (i32.le_s (local.get $left) (i32.const 0)))
        (call $log (i32.const 4) (i32.const 1024) (i32.const 4))
        (local.set $left (i32.sub (local.get $left) (i32.const 1)))
        (br $more)))
    (i64.const 1))
)

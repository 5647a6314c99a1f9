;; Test fixture for `sluice policy test` (no rollback in a test): a recover
;; policy that traps on an input longer than 100 bytes and answers recover
;; (bare verdict 1) on any shorter one.
;; Build: wat2wasm trap_long_recover.wat -o trap_long_recover.wasm
(module
  (memory (export "memory") 1)
  (func (export "sluice_abi_version") (result i32) (i32.const 2))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 61440)) (then (unreachable)))
    (i32.const 4096))
  (func (export "sluice_hooks") (result i32) (i32.const 1)) ;; recover
  (func (export "sluice_recover") (param $p i32) (param $n i32) (result i64)
    (if (i32.gt_u (local.get $n) (i32.const 100)) (then (unreachable)))
    (i64.const 1))
)

;; Test fixture: a valid recover policy whose _initialize export has the wrong
;; type (it returns an i32); rejected at load.
(module
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (func (export "_initialize") (result i32) (i32.const 0))
  (func (export "sluice_recover") (param i32 i32) (result i64) (i64.const 1))
)

;; Test fixture: a recover policy without sluice_alloc; rejected at load,
;; naming the missing export.
(module
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  (func (export "sluice_recover") (param i32 i32) (result i64) (i64.const 1))
)

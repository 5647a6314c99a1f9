;; Test fixture: _initialize never returns (the load-time limit must stop
;; it); recover answers the bare verdict 1 (recover).
(module
  (memory (export "memory") 1)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 32768)) (then (unreachable)))
    (i32.const 32768))
  (func (export "_initialize") (loop $l (br $l)))
  (func (export "sluice_recover") (param i32 i32) (result i64) (i64.const 1))
)

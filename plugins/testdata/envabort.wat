;; Test fixture: imports env.abort, as AssemblyScript does when built without
;; --use abort=; rejected at load, naming the import and the flag.
(module
  (import "env" "abort" (func $abort (param i32 i32 i32 i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (func (export "sluice_recover") (param i32 i32) (result i64) (i64.const 1))
)

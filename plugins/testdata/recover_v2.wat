;; Test fixture: recover hook answers {"verdict":2,"code":"from_v2"} through ptr<<32|len.
(module
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "{\"verdict\":2,\"code\":\"from_v2\"}") ;; out: 30 bytes
  (func (export "sluice_recover") (param i32 i32) (result i64) (i64.const 1099511627806))
)

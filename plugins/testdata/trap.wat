;; Test fixture: recover traps (unreachable) when its input length is odd, else verdict 1; loads fine (self-test passes).
(module
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (func (export "sluice_recover") (param $p i32) (param $n i32) (result i64)
    (if (i32.and (local.get $n) (i32.const 1)) (then (unreachable)))
    (i64.const 1))
  (func (export "sluice_self_test") (result i32) (i32.const 0))
)

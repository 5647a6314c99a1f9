;; Test fixture: rewrite rejects with 403 blocked_by_policy.
(module
  (import "sluice" "reject" (func $reject (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "{\"status\":403,\"code\":\"blocked_by_policy\",\"message\":\"model not allowed\",\"param\":\"model\"}") ;; rej: 87 bytes
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (drop (call $reject (i32.const 256) (i32.const 87)))
    (i64.const 0))
)

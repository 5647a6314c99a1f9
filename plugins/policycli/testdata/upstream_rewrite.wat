;; Test fixture for `sluice policy test` verdicts: a rewrite that leaves the
;; body and headers alone and only picks the upstream named "secondary".
;; Build: wat2wasm upstream_rewrite.wat -o upstream_rewrite.wasm
(module
  (import "sluice" "use_upstream" (func $use_upstream (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "secondary") ;; 9 bytes
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (drop (call $use_upstream (i32.const 256) (i32.const 9)))
    (i64.const 0))
)

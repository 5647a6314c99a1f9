;; Test fixture for `sluice policy test` verdicts: a rewrite that leaves the
;; body alone and only sets the header x-policy: v2 on the upstream request.
;; Build: wat2wasm header_rewrite.wat -o header_rewrite.wasm
(module
  (import "sluice" "header_set" (func $header_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "x-policy") ;; 8 bytes
  (data (i32.const 272) "v2") ;; 2 bytes
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (drop (call $header_set (i32.const 256) (i32.const 8) (i32.const 272) (i32.const 2)))
    (i64.const 0))
)

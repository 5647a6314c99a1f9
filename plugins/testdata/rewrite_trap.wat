;; Test fixture: rewrite sets model then traps (its edit must be dropped).
(module
  (import "sluice" "doc_set" (func $doc_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "model") ;; model: 5 bytes
  (data (i32.const 272) "\"edited-by-trap\"") ;; bad: 16 bytes
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (drop (call $doc_set (i32.const 256) (i32.const 5) (i32.const 272) (i32.const 16)))
    (unreachable))
)

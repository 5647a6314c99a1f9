;; Test fixture (TestRecordedRewriteNamesItsModule and the rewrite-chain
;; tests): rewrite sets the model to "m-rewritten".
(module
  (import "sluice" "doc_set" (func $doc_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 3))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "model")            ;; 5
  (data (i32.const 288) "\"m-rewritten\"")  ;; 13
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (drop (call $doc_set (i32.const 256) (i32.const 5) (i32.const 288) (i32.const 13)))
    (i64.const 0))
)

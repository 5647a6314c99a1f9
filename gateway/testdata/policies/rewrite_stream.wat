;; Test fixture (TestRewriteMustKeepStream): rewrite sets stream to false
;; and x-ok. A client that asked for SSE must not get JSON: the edits are
;; an invalid rewrite and are discarded as one unit (ABI.md §3.3).
(module
  (import "sluice" "doc_set" (func $doc_set (param i32 i32 i32 i32) (result i32)))
  (import "sluice" "header_set" (func $header_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 3))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "stream")   ;; 6
  (data (i32.const 288) "false")    ;; 5
  (data (i32.const 320) "x-ok")     ;; 4
  (data (i32.const 352) "partial")  ;; 7
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (drop (call $doc_set (i32.const 256) (i32.const 6) (i32.const 288) (i32.const 5)))
    (drop (call $header_set (i32.const 320) (i32.const 4) (i32.const 352) (i32.const 7)))
    (i64.const 0))
)

;; Test fixture (TestOverlongNamesAreTooLarge): rewrite sets a header with
;; a 300-byte name and picks an upstream with a 300-byte name, and tells
;; the upstream (policy_saw in the body) when both were too_large (-6).
(module
  (import "sluice" "doc_set" (func $doc_set (param i32 i32 i32 i32) (result i32)))
  (import "sluice" "header_set" (func $header_set (param i32 i32 i32 i32) (result i32)))
  (import "sluice" "use_upstream" (func $use_upstream (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 3))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "policy_saw")     ;; 10
  (data (i32.const 288) "\"too_large\"")  ;; 11
  (data (i32.const 320) "v")              ;; 1
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (memory.fill (i32.const 1024) (i32.const 97) (i32.const 300)) ;; "aaa…", 300 bytes
    (if (i32.and
          (i32.eq (call $header_set (i32.const 1024) (i32.const 300) (i32.const 320) (i32.const 1)) (i32.const -6))
          (i32.eq (call $use_upstream (i32.const 1024) (i32.const 300)) (i32.const -6)))
      (then (drop (call $doc_set (i32.const 256) (i32.const 10) (i32.const 288) (i32.const 11)))))
    (i64.const 0))
)

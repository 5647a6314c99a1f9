;; Test fixture (TestRewriteOverTheBodyLimit): rewrite sets "pad" to a
;; string of 8000 'a's and x-ok; over a limits.max_body_bytes of 4096 the
;; edits are an invalid rewrite and are discarded (ABI.md §3.3).
(module
  (import "sluice" "doc_set" (func $doc_set (param i32 i32 i32 i32) (result i32)))
  (import "sluice" "header_set" (func $header_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 3))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "pad")      ;; 3
  (data (i32.const 320) "x-ok")     ;; 4
  (data (i32.const 352) "partial")  ;; 7
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (local $i i32)
    ;; the JSON string "aaa…a" (8000 a's) at 1024, 8002 bytes
    (i32.store8 (i32.const 1024) (i32.const 34))
    (local.set $i (i32.const 1025))
    (block $done (loop $fill
      (br_if $done (i32.ge_u (local.get $i) (i32.const 9025)))
      (i32.store8 (local.get $i) (i32.const 97))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $fill)))
    (i32.store8 (i32.const 9025) (i32.const 34))
    (drop (call $doc_set (i32.const 256) (i32.const 3) (i32.const 1024) (i32.const 8002)))
    (drop (call $header_set (i32.const 320) (i32.const 4) (i32.const 352) (i32.const 7)))
    (i64.const 0))
)

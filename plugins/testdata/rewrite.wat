;; Test fixture: rewrite copies model to previous_model, renames model, drops the web_search tool, sets x-policy, removes x-drop, chooses upstream secondary.
(module
  (import "sluice" "doc_get" (func $doc_get (param i32 i32 i32 i32) (result i32)))
  (import "sluice" "doc_set" (func $doc_set (param i32 i32 i32 i32) (result i32)))
  (import "sluice" "doc_delete" (func $doc_delete (param i32 i32) (result i32)))
  (import "sluice" "header_set" (func $header_set (param i32 i32 i32 i32) (result i32)))
  (import "sluice" "header_remove" (func $header_remove (param i32 i32) (result i32)))
  (import "sluice" "use_upstream" (func $use_upstream (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "model") ;; model: 5 bytes
  (data (i32.const 272) "\"renamed\"") ;; renamed: 9 bytes
  (data (i32.const 288) "tools.#(type==\"web_search\")") ;; query: 27 bytes
  (data (i32.const 320) "previous_model") ;; prev: 14 bytes
  (data (i32.const 336) "x-policy") ;; hname: 8 bytes
  (data (i32.const 352) "wat") ;; hval: 3 bytes
  (data (i32.const 368) "x-drop") ;; hdrop: 6 bytes
  (data (i32.const 384) "secondary") ;; up: 9 bytes
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (local $n i32)
    (local.set $n (call $doc_get (i32.const 256) (i32.const 5) (i32.const 8192) (i32.const 1024)))
    (if (i32.and (i32.ge_s (local.get $n) (i32.const 0)) (i32.le_s (local.get $n) (i32.const 1024)))
      (then (drop (call $doc_set (i32.const 320) (i32.const 14) (i32.const 8192) (local.get $n)))))
    (drop (call $doc_set (i32.const 256) (i32.const 5) (i32.const 272) (i32.const 9)))
    (drop (call $doc_delete (i32.const 288) (i32.const 27)))
    (drop (call $header_set (i32.const 336) (i32.const 8) (i32.const 352) (i32.const 3)))
    (drop (call $header_remove (i32.const 368) (i32.const 6)))
    (drop (call $use_upstream (i32.const 384) (i32.const 9)))
    (i64.const 0))
)

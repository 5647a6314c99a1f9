;; Test fixture (TestPolicyCannotTouchCredentials): rewrite tries to set
;; every credential header and to remove x-api-key, sets x-ok, and tells
;; the upstream (policy_saw in the body) when the host refused all six.
(module
  (import "sluice" "doc_set" (func $doc_set (param i32 i32 i32 i32) (result i32)))
  (import "sluice" "header_set" (func $header_set (param i32 i32 i32 i32) (result i32)))
  (import "sluice" "header_remove" (func $header_remove (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 3))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "authorization")        ;; 13
  (data (i32.const 288) "api-key")              ;; 7
  (data (i32.const 320) "x-api-key")            ;; 9
  (data (i32.const 352) "cookie")               ;; 6
  (data (i32.const 384) "proxy-authorization")  ;; 19
  (data (i32.const 416) "x-ok")                 ;; 4
  (data (i32.const 448) "evil")                 ;; 4
  (data (i32.const 480) "yes")                  ;; 3
  (data (i32.const 512) "policy_saw")           ;; 10
  (data (i32.const 544) "\"all_refused\"")      ;; 13
  (func $refused (param $code i32) (result i32) (i32.eq (local.get $code) (i32.const -3)))
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (local $n i32)
    (local.set $n (call $refused (call $header_set (i32.const 256) (i32.const 13) (i32.const 448) (i32.const 4))))
    (local.set $n (i32.add (local.get $n) (call $refused (call $header_set (i32.const 288) (i32.const 7) (i32.const 448) (i32.const 4)))))
    (local.set $n (i32.add (local.get $n) (call $refused (call $header_set (i32.const 320) (i32.const 9) (i32.const 448) (i32.const 4)))))
    (local.set $n (i32.add (local.get $n) (call $refused (call $header_set (i32.const 352) (i32.const 6) (i32.const 448) (i32.const 4)))))
    (local.set $n (i32.add (local.get $n) (call $refused (call $header_set (i32.const 384) (i32.const 19) (i32.const 448) (i32.const 4)))))
    (local.set $n (i32.add (local.get $n) (call $refused (call $header_remove (i32.const 320) (i32.const 9)))))
    (drop (call $header_set (i32.const 416) (i32.const 4) (i32.const 480) (i32.const 3)))
    (if (i32.eq (local.get $n) (i32.const 6))
      (then (drop (call $doc_set (i32.const 512) (i32.const 10) (i32.const 544) (i32.const 13)))))
    (i64.const 0))
)

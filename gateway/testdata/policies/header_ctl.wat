;; Test fixture (TestPolicyHeaderWithAControlByte): rewrite forwards a value
;; with a control byte as a header, as a policy copying a body field into
;; x-session-id would, and tells the upstream (policy_saw in the body) when
;; the host refused it.
(module
  (import "sluice" "doc_set" (func $doc_set (param i32 i32 i32 i32) (result i32)))
  (import "sluice" "header_set" (func $header_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 3))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "x-session-id")    ;; 12 bytes
  (data (i32.const 288) "caf\c3\a9\01")     ;; "café\x01", 6 bytes
  (data (i32.const 320) "policy_saw")      ;; 10 bytes
  (data (i32.const 336) "\"bad_value\"")   ;; 11 bytes
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (if (i32.eq (call $header_set (i32.const 256) (i32.const 12) (i32.const 288) (i32.const 6)) (i32.const -3))
      (then (drop (call $doc_set (i32.const 320) (i32.const 10) (i32.const 336) (i32.const 11)))))
    (i64.const 0))
)

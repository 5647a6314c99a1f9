;; Test fixture (TestRewriteChoosingAnUnknownUpstream): rewrite sends every
;; request to the upstream "ghost", which no test config has.
(module
  (import "sluice" "use_upstream" (func $use_upstream (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "sluice_abi_version") (result i32) (i32.const 3))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 32768)) (then (unreachable)))
    (i32.const 32768))
  (data (i32.const 256) "ghost") ;; 5
  (func (export "sluice_rewrite_request") (param i32 i32) (result i64)
    (drop (call $use_upstream (i32.const 256) (i32.const 5)))
    (i64.const 0))
)

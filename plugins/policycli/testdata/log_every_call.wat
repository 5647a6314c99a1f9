;; Test fixture for the policy log lines of `sluice policy check` and
;; `test`: the self-test logs a line and passes; recover logs its input at
;; warn and defers.
;; Build: wat2wasm log_every_call.wat -o log_every_call.wasm
(module
  (import "sluice" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 1)
  (data (i32.const 1024) "self-test ran") ;; 13 bytes
  (func (export "sluice_abi_version") (result i32) (i32.const 2))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 61440)) (then (unreachable)))
    (i32.const 4096))
  (func (export "sluice_self_test") (result i32)
    (call $log (i32.const 2) (i32.const 1024) (i32.const 13))
    (i32.const 0))
  (func (export "sluice_recover") (param $p i32) (param $n i32) (result i64)
    (call $log (i32.const 3) (local.get $p) (local.get $n))
    (i64.const -1))
)

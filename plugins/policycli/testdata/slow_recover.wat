;; Test fixture for policy_limits.call_timeout: recover spins until now_ms
;; has moved 200 ms past its start, then answers the bare verdict 1
;; (recover). Under the default 50 ms deadline it always faults (timeout);
;; under a deadline of seconds it answers.
;; Build: wat2wasm slow_recover.wat -o slow_recover.wasm
(module
  (import "sluice" "now_ms" (func $now (result i64)))
  (memory (export "memory") 1)
  (func (export "sluice_abi_version") (result i32) (i32.const 2))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 61440)) (then (unreachable)))
    (i32.const 4096))
  (func (export "sluice_recover") (param $p i32) (param $n i32) (result i64)
    (local $until i64)
    (local.set $until (i64.add (call $now) (i64.const 200)))
    (loop $l (br_if $l (i64.lt_s (call $now) (local.get $until))))
    (i64.const 1))
)

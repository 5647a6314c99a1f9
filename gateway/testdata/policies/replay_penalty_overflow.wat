;; Test fixture (TestReplayPenaltyOfCenturiesCoolsDown): replay sends every
;; failure to the next target with a penalty of about 295 years, which
;; overflows a time.Duration once multiplied by a millisecond.
(module
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 3))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "{\"verdict\":1,\"penalty_ms\":9300000000000}") ;; 40 bytes
  (func (export "sluice_replay") (param i32 i32) (result i64)
    (i64.or (i64.shl (i64.const 256) (i64.const 32)) (i64.const 40)))
)

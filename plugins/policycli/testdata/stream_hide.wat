;; Test fixture for `sluice policy test` with stream_event inputs: every
;; delta becomes "[hidden]" (the output {"delta":"[hidden]"}, which a done
;; text event ignores: it passes).
;; Build: wat2wasm stream_hide.wat -o stream_hide.wasm
(module
  (memory (export "memory") 1)
  (data (i32.const 1024) "{\"delta\":\"[hidden]\"}") ;; 20 bytes
  (func (export "sluice_abi_version") (result i32) (i32.const 2))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 61440)) (then (unreachable)))
    (i32.const 4096))
  (func (export "sluice_hooks") (result i32) (i32.const 16)) ;; stream_event
  (func (export "sluice_stream_event") (param $p i32) (param $n i32) (result i64)
    (i64.or (i64.shl (i64.const 1024) (i64.const 32)) (i64.const 20)))
)

;; Test fixture for policy_limits.memory_mib: a recover policy (it defers)
;; whose initial memory is 300 pages (18.75 MiB): over memory_mib 16 (256
;; pages), within the default 64 MiB.
;; Build: wat2wasm memory_300_pages.wat -o memory_300_pages.wasm
(module
  (memory (export "memory") 300)
  (func (export "sluice_abi_version") (result i32) (i32.const 2))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 61440)) (then (unreachable)))
    (i32.const 4096))
  (func (export "sluice_recover") (param $p i32) (param $n i32) (result i64) (i64.const -1))
)

;; Test fixture: _initialize logs a line with control characters (a newline
;; that would start a forged log line, an ANSI escape, a NUL); recover answers
;; the bare verdict 1 (recover). Tests hold or fail _initialize through the
;; runtime's logger.
(module
  (import "sluice" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 2)
  (data (i32.const 1024) "init\0a2026-01-01T00:00:00Z [ERROR] forged \1b[31mred\00end")
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (func (export "_initialize") (call $log (i32.const 2) (i32.const 1024) (i32.const 53)))
  (func (export "sluice_recover") (param i32 i32) (result i64) (i64.const 1))
  (func (export "sluice_self_test") (result i32) (i32.const 0))
)

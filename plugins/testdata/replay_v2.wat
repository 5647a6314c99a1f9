;; Test fixture (ABI version 2): a replay policy written from hostabi/ABI.md
;; alone. It scans the compact JSON input for member bytes (ABI.md §3) and
;; answers by the first rule that matches:
;;
;;   "failure_class":"server_error"  -> 0 no (overrides the table: never retry a 5xx)
;;   "tool_call_in_flight":true      -> 4 continue_restart (bare verdict)
;;   "phase":"after_content"         -> {"verdict":3,"penalty_ms":7} (continue_prefill, JSON output)
;;   "has_next_target":true          -> 1 replay_other_upstream
;;   anything else                   -> -1 defer
(module
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 2))
  ;; every input goes to one buffer at 65536 (inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))

  (data (i32.const 256) "\"failure_class\":\"server_error\"") ;; 30 bytes
  (data (i32.const 320) "\"tool_call_in_flight\":true")      ;; 26 bytes
  (data (i32.const 384) "\"phase\":\"after_content\"")       ;; 23 bytes
  (data (i32.const 448) "\"has_next_target\":true")          ;; 22 bytes
  (data (i32.const 512) "{\"verdict\":3,\"penalty_ms\":7}") ;; 28 bytes

  ;; $find: 1 when the $m needle bytes at $q occur in [$p, $p+$n), else 0
  (func $find (param $p i32) (param $n i32) (param $q i32) (param $m i32) (result i32)
    (local $i i32) (local $j i32)
    (if (i32.lt_u (local.get $n) (local.get $m)) (then (return (i32.const 0))))
    (block $done
      (loop $outer
        (br_if $done (i32.gt_u (local.get $i) (i32.sub (local.get $n) (local.get $m))))
        (local.set $j (i32.const 0))
        (block $mismatch
          (loop $inner
            (if (i32.eq (local.get $j) (local.get $m)) (then (return (i32.const 1))))
            (br_if $mismatch
              (i32.ne
                (i32.load8_u (i32.add (i32.add (local.get $p) (local.get $i)) (local.get $j)))
                (i32.load8_u (i32.add (local.get $q) (local.get $j)))))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $inner)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $outer)))
    (i32.const 0))

  (func (export "sluice_replay") (param $p i32) (param $n i32) (result i64)
    (if (call $find (local.get $p) (local.get $n) (i32.const 256) (i32.const 30)) (then (return (i64.const 0))))
    (if (call $find (local.get $p) (local.get $n) (i32.const 320) (i32.const 26)) (then (return (i64.const 4))))
    (if (call $find (local.get $p) (local.get $n) (i32.const 384) (i32.const 23))
      (then (return (i64.or (i64.shl (i64.const 512) (i64.const 32)) (i64.const 28)))))
    (if (call $find (local.get $p) (local.get $n) (i32.const 448) (i32.const 22)) (then (return (i64.const 1))))
    (i64.const -1))
)

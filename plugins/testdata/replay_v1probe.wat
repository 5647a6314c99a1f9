;; Test fixture (ABI version 1): a replay policy that must never see an
;; ABI-2 member. It traps when the input contains "phase" (a fault the host
;; reports) and otherwise answers 1 (replay_other_upstream).
(module
  (memory (export "memory") 2)
  (func (export "sluice_abi_version") (result i32) (i32.const 1))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 65536)) (then (unreachable)))
    (i32.const 65536))
  (data (i32.const 256) "\"phase\"") ;; 7 bytes
  (func (export "sluice_replay") (param $p i32) (param $n i32) (result i64)
    (local $i i32) (local $j i32)
    (block $done
      (loop $outer
        (br_if $done (i32.gt_s (local.get $i) (i32.sub (local.get $n) (i32.const 7))))
        (local.set $j (i32.const 0))
        (block $mismatch
          (loop $inner
            (if (i32.eq (local.get $j) (i32.const 7)) (then (unreachable)))
            (br_if $mismatch
              (i32.ne
                (i32.load8_u (i32.add (i32.add (local.get $p) (local.get $i)) (local.get $j)))
                (i32.load8_u (i32.add (i32.const 256) (local.get $j)))))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $inner)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $outer)))
    (i64.const 1))
)

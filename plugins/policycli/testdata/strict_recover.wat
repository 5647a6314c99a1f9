;; Test fixture for `sluice policy test -recording`: a recover policy stricter
;; than the default. A transport fault (input member "transport":true) fails
;; closed (bare verdict 2, upstream_unavailable) instead of passing; every
;; other input defers to the built-in default.
;; Build: wat2wasm strict_recover.wat -o strict_recover.wasm
(module
  (memory (export "memory") 1)
  (data (i32.const 1024) "\"transport\":true") ;; 16 bytes
  (global $in i32 (i32.const 4096))
  (func (export "sluice_abi_version") (result i32) (i32.const 2))
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 61440)) (then (unreachable)))
    (global.get $in))
  (func (export "sluice_hooks") (result i32) (i32.const 1)) ;; recover
  ;; $find: 1 when the 16 needle bytes at 1024 occur in [p, p+n), else 0
  (func $find (param $p i32) (param $n i32) (result i32)
    (local $i i32) (local $j i32)
    (if (i32.lt_u (local.get $n) (i32.const 16)) (then (return (i32.const 0))))
    (block $done
      (loop $outer
        (br_if $done (i32.gt_u (local.get $i) (i32.sub (local.get $n) (i32.const 16))))
        (local.set $j (i32.const 0))
        (block $mismatch
          (loop $inner
            (br_if $mismatch
              (i32.ne
                (i32.load8_u (i32.add (i32.add (local.get $p) (local.get $i)) (local.get $j)))
                (i32.load8_u (i32.add (i32.const 1024) (local.get $j)))))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (if (i32.eq (local.get $j) (i32.const 16)) (then (return (i32.const 1))))
            (br $inner)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $outer)))
    (i32.const 0))
  (func (export "sluice_recover") (param $p i32) (param $n i32) (result i64)
    (if (result i64) (call $find (local.get $p) (local.get $n))
      (then (i64.const 2))
      (else (i64.const -1))))
)

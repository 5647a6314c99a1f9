;; Test fixture: the stream_event hook (ABI.md §3.5). In
;; response.output_text.delta events it replaces the word "secret" with
;; "[redacted]" (answering {"delta":"…"}); every other event passes (0).
;; It exports only stream_event: no recover, replay or rewrite.
(module
  (memory (export "memory") 2)
  ;; 1024: the type member the hook acts on (35 bytes)
  (data (i32.const 1024) "\"type\":\"response.output_text.delta\"")
  ;; 1088: the delta member's start (10 bytes)
  (data (i32.const 1088) ",\"delta\":\"")
  ;; 1104: the word (6 bytes) and 1120: its replacement (10 bytes)
  (data (i32.const 1104) "secret")
  (data (i32.const 1120) "[redacted]")
  ;; 1136: the output's head (10 bytes)
  (data (i32.const 1136) "{\"delta\":\"")
  (func (export "sluice_abi_version") (result i32) (i32.const 2))
  ;; inputs go to one buffer at 65536 (up to 32 KiB); outputs are built at 98304
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (i32.const 32768)) (then (unreachable)))
    (i32.const 65536))
  ;; $find: the offset of needle [n, n+nl) in [h, h+hl), or -1
  (func $find (param $h i32) (param $hl i32) (param $n i32) (param $nl i32) (result i32)
    (local $i i32) (local $j i32)
    (block $none
      (loop $outer
        (br_if $none (i32.gt_s (i32.add (local.get $i) (local.get $nl)) (local.get $hl)))
        (local.set $j (i32.const 0))
        (block $miss
          (loop $inner
            (if (i32.ge_u (local.get $j) (local.get $nl)) (then (return (local.get $i))))
            (br_if $miss (i32.ne
              (i32.load8_u (i32.add (local.get $h) (i32.add (local.get $i) (local.get $j))))
              (i32.load8_u (i32.add (local.get $n) (local.get $j)))))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (br $inner)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $outer)))
    (i32.const -1))
  (func (export "sluice_stream_event") (param $p i32) (param $n i32) (result i64)
    (local $i i32) (local $end i32) (local $o i32) (local $c i32) (local $hits i32)
    (if (i32.lt_s (call $find (local.get $p) (local.get $n) (i32.const 1024) (i32.const 35)) (i32.const 0))
      (then (return (i64.const 0))))
    (local.set $i (call $find (local.get $p) (local.get $n) (i32.const 1088) (i32.const 10)))
    (if (i32.lt_s (local.get $i) (i32.const 0)) (then (return (i64.const 0))))
    (local.set $i (i32.add (local.get $p) (i32.add (local.get $i) (i32.const 10))))
    (local.set $end (i32.add (local.get $p) (local.get $n)))
    ;; the head
    (memory.copy (i32.const 98304) (i32.const 1136) (i32.const 10))
    (local.set $o (i32.const 98314))
    (block $done
      (loop $copy
        (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
        (local.set $c (i32.load8_u (local.get $i)))
        (br_if $done (i32.eq (local.get $c) (i32.const 34))) ;; the closing quote
        (if (i32.eq (local.get $c) (i32.const 92)) ;; a backslash: copy it and the next byte
          (then
            (i32.store8 (local.get $o) (local.get $c))
            (local.set $o (i32.add (local.get $o) (i32.const 1)))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br_if $done (i32.ge_u (local.get $i) (local.get $end)))
            (i32.store8 (local.get $o) (i32.load8_u (local.get $i)))
            (local.set $o (i32.add (local.get $o) (i32.const 1)))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $copy)))
        ;; "secret" here? (a 6-byte window: it cannot match across the closing quote)
        (if (i32.eqz (call $find (local.get $i) (i32.const 6) (i32.const 1104) (i32.const 6)))
          (then
            (memory.copy (local.get $o) (i32.const 1120) (i32.const 10))
            (local.set $o (i32.add (local.get $o) (i32.const 10)))
            (local.set $i (i32.add (local.get $i) (i32.const 6)))
            (local.set $hits (i32.add (local.get $hits) (i32.const 1)))
            (br $copy)))
        (i32.store8 (local.get $o) (local.get $c))
        (local.set $o (i32.add (local.get $o) (i32.const 1)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $copy)))
    (if (i32.eqz (local.get $hits)) (then (return (i64.const 0))))
    (i32.store8 (local.get $o) (i32.const 34))
    (i32.store8 (i32.add (local.get $o) (i32.const 1)) (i32.const 125))
    (local.set $o (i32.add (local.get $o) (i32.const 2)))
    ;; ptr << 32 | len
    (i64.or
      (i64.shl (i64.const 98304) (i64.const 32))
      (i64.extend_i32_u (i32.sub (local.get $o) (i32.const 98304)))))
)

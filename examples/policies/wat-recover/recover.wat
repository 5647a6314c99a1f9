;; An example Sluice policy written by hand in WebAssembly text, from
;; hostabi/ABI.md alone (no SDK). It implements the recover hook:
;;
;;   - if the input has "code":"upstream_context_lost" it answers verdict 1
;;     (recover: the client gets the retryable stream_incomplete error) with
;;     the code "context_lost_upstream" through a JSON output (ptr<<32|len);
;;   - otherwise it answers -1 (defer): the next policy and finally the
;;     built-in default decide.
;;
;; The host writes inputs as compact JSON with no insignificant whitespace
;; (ABI.md §3), so scanning the bytes for `"code":"upstream_context_lost"`
;; (closing quote included) is exact: inside a string value the quotes would
;; be escaped.
;;
;; Build: wat2wasm recover.wat -o ../05-wat-recover.wasm   (Debian: wabt)
(module
  (import "sluice" "log" (func $log (param i32 i32 i32)))

  (memory (export "memory") 1)

  ;; constants
  (data (i32.const 1024) "\"code\":\"upstream_context_lost\"")  ;; 30 bytes
  (data (i32.const 1088) "wat-recover: upstream_context_lost -> recover") ;; 45 bytes
  (data (i32.const 1152) "{\"verdict\":1,\"code\":\"context_lost_upstream\"}") ;; 44 bytes

  ;; inputs go to one buffer at 4096, up to the end of the first page
  (global $in i32 (i32.const 4096))
  (global $in_cap i32 (i32.const 61440))

  (func (export "sluice_abi_version") (result i32) (i32.const 1))

  ;; sluice_alloc: hand out the fixed buffer; trap on inputs too big (a
  ;; fault the host survives; recover inputs are small)
  (func (export "sluice_alloc") (param $n i32) (result i32)
    (if (i32.gt_u (local.get $n) (global.get $in_cap)) (then (unreachable)))
    (global.get $in))

  ;; only the recover hook, plus a self-test
  (func (export "sluice_hooks") (result i32) (i32.const 9)) ;; recover | self_test

  ;; $find: 1 when the 30 needle bytes at 1024 occur in [p, p+n), else 0
  (func $find (param $p i32) (param $n i32) (result i32)
    (local $i i32) (local $j i32)
    (if (i32.lt_u (local.get $n) (i32.const 30)) (then (return (i32.const 0))))
    (local.set $i (i32.const 0))
    (block $done
      (loop $outer
        (br_if $done (i32.gt_u (local.get $i) (i32.sub (local.get $n) (i32.const 30))))
        (local.set $j (i32.const 0))
        (block $mismatch
          (loop $inner
            (br_if $mismatch
              (i32.ne
                (i32.load8_u (i32.add (i32.add (local.get $p) (local.get $i)) (local.get $j)))
                (i32.load8_u (i32.add (i32.const 1024) (local.get $j)))))
            (local.set $j (i32.add (local.get $j) (i32.const 1)))
            (if (i32.eq (local.get $j) (i32.const 30)) (then (return (i32.const 1))))
            (br $inner)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $outer)))
    (i32.const 0))

  (func (export "sluice_recover") (param $p i32) (param $n i32) (result i64)
    (if (call $find (local.get $p) (local.get $n))
      (then
        (call $log (i32.const 2) (i32.const 1088) (i32.const 45))
        ;; output location: ptr << 32 | len
        (return (i64.or (i64.shl (i64.const 1152) (i64.const 32)) (i64.const 44)))))
    (i64.const -1))

  ;; self-test: the needle is found in a sample input and not in another
  (data (i32.const 2048) "{\"surface\":\"chat_json\",\"upstream\":\"u\",\"code\":\"upstream_context_lost\"}") ;; 69 bytes
  (func (export "sluice_self_test") (result i32)
    (if (i32.eqz (call $find (i32.const 2048) (i32.const 69))) (then (return (i32.const 1))))
    (if (call $find (i32.const 2048) (i32.const 60)) (then (return (i32.const 2))))
    (i32.const 0))
)

package plugins

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
)

// Tests that pin behaviour sampled mutation testing found unchecked.

// TestRejectsWrongInitializeType: every optional export's type is checked,
// the last one (_initialize) too.
func TestRejectsWrongInitializeType(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{"initsig.wasm": fixture(t, "initsig")}})
	st, ok := statusOf(r, "initsig")
	if !ok || st.State != StateRejected || !strings.Contains(st.LastError, "export _initialize has type") {
		t.Fatalf("%+v", st)
	}
}

// TestFallbackReasonNoPolicy: without a module for the hook, the default
// decides and the fallback is counted as no_policy, not deferred.
func TestFallbackReasonNoPolicy(t *testing.T) {
	r := newRuntime(t, Options{})
	r.Recover(context.Background(), hostabi.RecoverInput{Code: "x"})
	if n := counterValue(t, r, "sluice_policy_fallbacks_total", map[string]string{"hook": "recover", "reason": "no_policy"}); n != 1 {
		t.Fatalf("no_policy fallbacks = %v", n)
	}
	if n := counterValue(t, r, "sluice_policy_fallbacks_total", map[string]string{"hook": "recover", "reason": "deferred"}); n != 0 {
		t.Fatalf("deferred fallbacks = %v", n)
	}
}

// TestReadI32RejectsOverlong: a wasm i32 takes at most 5 LEB128 bytes; a
// sixth is an encoding error, not a value.
func TestReadI32RejectsOverlong(t *testing.T) {
	if v, n := readI32([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}); n != 0 {
		t.Fatalf("6-byte i32 decoded as %d (%d bytes)", v, n)
	}
	if v, n := readI32([]byte{0xff, 0xff, 0xff, 0xff, 0x07}); n != 5 || v != 1<<31-1 {
		t.Fatalf("max i32 = %d (%d bytes)", v, n)
	}
}

// TestMergeDataSegmentsTruncated: a data segment that claims more bytes
// than its section holds leaves the module unchanged (for the compiler to
// reject), even when the section ends the module.
func TestMergeDataSegmentsTruncated(t *testing.T) {
	body := []byte{
		2,                              // two segments
		0x00, 0x41, 0x00, 0x0b, 1, 'a', // active, i32.const 0, 1 byte
		0x00, 0x41, 0x10, 0x0b, 2, 'b', // active, i32.const 16, claims 2 bytes, has 1
	}
	mod := append([]byte("\x00asm\x01\x00\x00\x00"), 11, byte(len(body)))
	mod = append(mod, body...)
	mod = mod[:len(mod):len(mod)]
	want := bytes.Clone(mod)
	if got := mergeDataSegments(mod); !bytes.Equal(got, want) {
		t.Fatalf("merged a truncated data section: % x", got)
	}
}

// TestDecideGivesUpOnStaleSets: a set whose versions are all swapped out
// is retried a bounded number of times, then the default decides.
func TestDecideGivesUpOnStaleSets(t *testing.T) {
	r := newRuntime(t, Options{})
	stale := &version{name: "stale"}
	stale.refs.Store(-1) // closed: acquire always fails
	set := &activeSet{}
	set.byHook[hRecover] = []*version{stale}
	orig := r.active.Swap(set)
	t.Cleanup(func() { r.active.Store(orig) })
	done := make(chan Trace, 1)
	go func() {
		_, tr := r.RecoverTrace(context.Background(), hostabi.RecoverInput{Code: "x"})
		done <- tr
	}()
	select {
	case tr := <-done:
		if tr.Outcome != "default" {
			t.Fatalf("%+v", tr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("decide kept retrying a stale set")
	}
}

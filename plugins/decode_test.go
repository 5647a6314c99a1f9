package plugins

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
)

// mem builds a guest memory with data at offset 1024.
func mem(data string) byteMem {
	m := make(byteMem, 1024+len(data)+64)
	copy(m[1024:], data)
	return m
}

func TestDecodeResults(t *testing.T) {
	out, kind, err := decodeRecoverResult(1, nil, 2)
	if err != nil || kind != resDecided || out.Verdict != hostabi.RecoverRecover {
		t.Fatal(out, kind, err)
	}
	if _, kind, err = decodeRecoverResult(hostabi.ResultDefer, nil, 2); err != nil || kind != resDefer {
		t.Fatal(kind, err)
	}
	if _, kind, err = decodeRecoverResult(hostabi.ResultError, nil, 2); err != nil || kind != resError {
		t.Fatal(kind, err)
	}
	j := `{"verdict":2,"code":"c","message":"m","extra":[1,{"x":null}]}`
	out, _, err = decodeRecoverResult(hostabi.PackPtrLen(1024, uint32(len(j))), mem(j), 2)
	if err != nil || out.Verdict != hostabi.RecoverFailClosed || out.Code != "c" || out.Message != "m" {
		t.Fatal(out, err)
	}
	bad := []uint64{
		3,                                  // undefined verdict before ABI 3
		hostabi.PackPtrLen(1024, 1<<20),    // too long
		hostabi.PackPtrLen(0xFFFF0000, 10), // outside memory
		hostabi.PackPtrLen(1024, 5),        // truncated JSON
	}
	for _, r := range bad {
		if _, _, err := decodeRecoverResult(r, mem(j), 2); !errors.Is(err, errInvalidOutput) {
			t.Errorf("%#x: %v", r, err)
		}
	}
	for _, s := range []string{`{"code":"x"}`, `{"verdict":-1}`, `{"verdict":"1"}`, `{"verdict":1.5}`, `[1]`, `{"verdict":1}x`} {
		if _, _, err := decodeRecoverResult(hostabi.PackPtrLen(1024, uint32(len(s))), mem(s), 2); !errors.Is(err, errInvalidOutput) {
			t.Errorf("%s accepted", s)
		}
	}
	// Rehydrate is ABI 3's: a version-3 module may answer it, bare or in JSON.
	for _, r := range []uint64{3, hostabi.PackPtrLen(1024, 13)} {
		if out, _, err := decodeRecoverResult(r, mem(`{"verdict":3}`), 3); err != nil || out.Verdict != hostabi.RecoverRehydrate {
			t.Errorf("v3 %#x: %+v %v", r, out, err)
		}
		if _, _, err := decodeRecoverResult(r, mem(`{"verdict":3}`), 2); !errors.Is(err, errInvalidOutput) {
			t.Errorf("v2 %#x: %v", r, err)
		}
	}
	if _, _, err := decodeRecoverResult(4, nil, 3); !errors.Is(err, errInvalidOutput) {
		t.Errorf("recover verdict 4 accepted: %v", err)
	}
	rj := `{"verdict":1,"penalty_ms":30000}`
	for abi := int32(1); abi <= 2; abi++ {
		rout, _, err := decodeReplayResult(hostabi.PackPtrLen(1024, uint32(len(rj))), mem(rj), abi)
		if err != nil || rout.Verdict != hostabi.ReplayOtherUpstream || rout.PenaltyMillis != 30000 {
			t.Fatal(rout, err)
		}
		if _, _, err := decodeReplayResult(hostabi.PackPtrLen(1024, 26), mem(`{"verdict":1,"penalty_ms":-5}`), abi); err == nil {
			t.Fatal("negative penalty accepted")
		}
	}
	// The continue verdicts are ABI 2's: a version-1 module answering them
	// faults, bare or in JSON.
	for _, r := range []uint64{3, 4, hostabi.PackPtrLen(1024, 13)} {
		if _, _, err := decodeReplayResult(r, mem(`{"verdict":4}`), 1); !errors.Is(err, errInvalidOutput) {
			t.Errorf("v1 %#x: %v", r, err)
		}
		if out, _, err := decodeReplayResult(r, mem(`{"verdict":4}`), 2); err != nil || out.Verdict < 3 {
			t.Errorf("v2 %#x: %+v %v", r, out, err)
		}
	}
	if _, _, err := decodeReplayResult(5, nil, 2); !errors.Is(err, errInvalidOutput) {
		t.Errorf("verdict 5 accepted: %v", err)
	}
	for r, want := range map[uint64]resultKind{0: resDecided, hostabi.ResultDefer: resDefer, hostabi.ResultError: resError} {
		if k, err := decodeRewriteResult(r); err != nil || k != want {
			t.Fatal(r, k, err)
		}
	}
	if _, err := decodeRewriteResult(1); err == nil {
		t.Fatal("rewrite result 1 accepted")
	}
}

// FuzzDecodeRecoverResult: a guest may return any i64 with any memory; the
// host never panics and rejects what is out of range.
func FuzzDecodeRecoverResult(f *testing.F) {
	f.Add(uint64(1), []byte{})
	f.Add(hostabi.PackPtrLen(4, 13), []byte("....{\"verdict\":1}"))
	f.Add(hostabi.PackPtrLen(0, 2), []byte("{}"))
	f.Add(uint64(0xFFFFFFFF00000010), []byte("x"))
	f.Fuzz(func(t *testing.T, r uint64, m []byte) {
		out, kind, err := decodeRecoverResult(r, byteMem(m), hostabi.ABIVersion)
		_, ptr, n := hostabi.UnpackResult(r)
		if err == nil && kind == resDecided && ptr != 0 && uint64(ptr)+uint64(n) > uint64(len(m)) {
			t.Fatalf("accepted an output outside memory: %#x", r)
		}
		if err == nil && !hostabi.ValidRecoverVerdict(uint32(out.Verdict)) {
			t.Fatalf("accepted verdict %d", out.Verdict)
		}
	})
}

// FuzzDecodeReplayResult is FuzzDecodeRecoverResult for replay outputs.
func FuzzDecodeReplayResult(f *testing.F) {
	f.Add(uint64(2), []byte{})
	f.Add(hostabi.PackPtrLen(1, 30), []byte(" {\"verdict\":1,\"penalty_ms\":30}"))
	f.Fuzz(func(t *testing.T, r uint64, m []byte) {
		for abi := int32(1); abi <= hostabi.ABIVersion; abi++ {
			out, kind, err := decodeReplayResult(r, byteMem(m), abi)
			_, ptr, n := hostabi.UnpackResult(r)
			if err == nil && kind == resDecided && ptr != 0 && uint64(ptr)+uint64(n) > uint64(len(m)) {
				t.Fatalf("accepted an output outside memory: %#x", r)
			}
			if err == nil && (!hostabi.ValidReplayVerdictVersion(uint32(out.Verdict), abi) || out.PenaltyMillis < 0) {
				t.Fatalf("ABI %d accepted %+v", abi, out)
			}
		}
	})
}

// TestNonObjectOutputIsNamed: a hook output that is well-formed JSON but
// not an object breaks ABI.md §4 by its kind, not its syntax, and the
// fault says so; malformed JSON is still called malformed.
func TestNonObjectOutputIsNamed(t *testing.T) {
	decoders := map[string]func(r uint64, m memView) error{
		"recover": func(r uint64, m memView) error { _, _, err := decodeRecoverResult(r, m, 3); return err },
		"replay":  func(r uint64, m memView) error { _, _, err := decodeReplayResult(r, m, 3); return err },
		"stream_event": func(r uint64, m memView) error {
			_, _, err := decodeStreamEventResult(r, m)
			return err
		},
	}
	for _, tc := range []struct{ output, want string }{
		{`[1]`, "output must be a JSON object, got an array"},
		{` null `, "output must be a JSON object, got null"},
		{`5`, "output must be a JSON object, got a number"},
		{`"verdict"`, "output must be a JSON object, got a string"},
		{`true`, "output must be a JSON object, got a boolean"},
		{`[1`, "malformed JSON"},
		{`{"verdict":1}x`, "malformed JSON"},
	} {
		for hook, decode := range decoders {
			err := decode(hostabi.PackPtrLen(1024, uint32(len(tc.output))), mem(tc.output))
			if !errors.Is(err, errInvalidOutput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s output %s: %v; want %q", hook, tc.output, err, tc.want)
			}
		}
	}
}

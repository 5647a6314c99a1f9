package plugins

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

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

// FuzzDecodeRecoverResult: a guest may return any i64 with any memory, to
// a host of any ABI version; the host never panics, and its answer is the
// one ABI.md §4 gives that result (checkHookResult). An output it accepts
// that is JSON holds the members encoding/json reads in it, and re-encodes
// to an output that decodes to the same value.
func FuzzDecodeRecoverResult(f *testing.F) {
	f.Add(uint64(1), []byte{})
	f.Add(hostabi.PackPtrLen(4, 13), []byte("....{\"verdict\":1}"))
	f.Add(hostabi.PackPtrLen(0, 2), []byte("{}"))
	f.Add(uint64(0xFFFFFFFF00000010), []byte("x"))
	f.Fuzz(func(t *testing.T, r uint64, m []byte) {
		for abi := int32(1); abi <= hostabi.ABIVersion; abi++ {
			out, kind, err := decodeRecoverResult(r, byteMem(m), abi)
			maxVerdict := uint32(2) // ABI.md §3: pass, recover, fail_closed; version 3 adds rehydrate
			if abi >= 3 {
				maxVerdict = 3
			}
			members := checkHookResult(t, abi, r, m, maxVerdict, kind, err, uint32(out.Verdict), out == hostabi.RecoverOutput{Verdict: out.Verdict})
			if members != nil && (stdNumber(t, members, "verdict") != float64(out.Verdict) ||
				stdString(t, members, "code") != validUTF8(out.Code) || stdString(t, members, "message") != validUTF8(out.Message)) {
				t.Fatalf("ABI %d: decoded %+v, encoding/json reads %q", abi, out, members)
			}
			if err != nil || kind != resDecided || r>>32 == 0 {
				continue
			}
			enc := hostabi.AppendRecoverOutput(nil, out)
			back, kind, err := decodeRecoverResult(hostabi.PackPtrLen(1, uint32(len(enc))), byteMem(append([]byte{' '}, enc...)), abi)
			want := hostabi.RecoverOutput{Verdict: out.Verdict, Code: validUTF8(out.Code), Message: validUTF8(out.Message)}
			if err != nil || kind != resDecided || back != want {
				t.Fatalf("ABI %d: %+v re-encodes to %q, which decodes to %+v (%v)", abi, out, enc, back, err)
			}
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
			maxVerdict := uint32(2) // ABI.md §3: no, other upstream, same upstream; version 2 adds the continue verdicts
			if abi >= 2 {
				maxVerdict = 4
			}
			members := checkHookResult(t, abi, r, m, maxVerdict, kind, err, uint32(out.Verdict), out.PenaltyMillis == 0)
			if members != nil && (stdNumber(t, members, "verdict") != float64(out.Verdict) ||
				stdNumber(t, members, "penalty_ms") != float64(out.PenaltyMillis)) {
				t.Fatalf("ABI %d: decoded %+v, encoding/json reads %q", abi, out, members)
			}
			if err == nil && out.PenaltyMillis < 0 {
				t.Fatalf("ABI %d accepted %+v", abi, out)
			}
			if err != nil || kind != resDecided || r>>32 == 0 {
				continue
			}
			enc := hostabi.AppendReplayOutput(nil, out)
			back, kind, err := decodeReplayResult(hostabi.PackPtrLen(1, uint32(len(enc))), byteMem(append([]byte{' '}, enc...)), abi)
			if err != nil || kind != resDecided || back != out {
				t.Fatalf("ABI %d: %+v re-encodes to %q, which decodes to %+v (%v)", abi, out, enc, back, err)
			}
		}
	})
}

// checkHookResult holds a recover or replay decoder's answer to the result
// r, with guest memory m, to ABI.md §4, written out here rather than taken
// from hostabi: -1 defers and -2 is the guest's error, neither a fault; a
// result whose high 32 bits are zero is a bare verdict, taken when it is at
// most maxVerdict (bare: nothing else set) and a fault otherwise; anything
// else locates an output in memory, a fault unless it lies inside memory,
// within hostabi.MaxOutputBytes, and is an object. Every fault wraps
// errInvalidOutput. For an accepted output that is JSON, it returns its
// members as encoding/json reads them, for the caller to compare.
func checkHookResult(t *testing.T, abi int32, r uint64, m []byte, maxVerdict uint32, kind resultKind, err error, verdict uint32,
	bare bool) (members map[string]json.RawMessage) {
	t.Helper()
	if err != nil && !errors.Is(err, errInvalidOutput) {
		t.Fatalf("ABI %d, result %#x: a fault that is not errInvalidOutput: %v", abi, r, err)
	}
	switch ptr, n := r>>32, uint32(r); {
	case r == 0xFFFF_FFFF_FFFF_FFFF:
		if kind != resDefer || err != nil {
			t.Fatalf("ABI %d: defer (-1) decoded as kind %d, %v", abi, kind, err)
		}
	case r == 0xFFFF_FFFF_FFFF_FFFE:
		if kind != resError || err != nil {
			t.Fatalf("ABI %d: error (-2) decoded as kind %d, %v", abi, kind, err)
		}
	case kind != resDecided:
		t.Fatalf("ABI %d, result %#x: kind %d", abi, r, kind)
	case ptr == 0: // a bare verdict, even where it would be an address in memory
		if (err == nil) != (n <= maxVerdict) || (err == nil && (verdict != n || !bare)) {
			t.Fatalf("ABI %d, bare verdict %d (at most %d defined): got verdict %d (bare %v), %v", abi, n, maxVerdict, verdict, bare, err)
		}
	case err == nil:
		if ptr+uint64(n) > uint64(len(m)) || n > hostabi.MaxOutputBytes {
			t.Fatalf("ABI %d: accepted an output outside memory or too long: [%d,+%d) of %d bytes", abi, ptr, n, len(m))
		}
		out := bytes.TrimLeft(m[ptr:ptr+uint64(n)], " \t\r\n")
		if len(out) == 0 || out[0] != '{' {
			t.Fatalf("ABI %d: accepted the output %q, which is not an object", abi, m[ptr:ptr+uint64(n)])
		}
		if verdict > maxVerdict {
			t.Fatalf("ABI %d: accepted verdict %d from an output (at most %d defined)", abi, verdict, maxVerdict)
		}
		// Output is decoded strictly (ABI.md §4): an accepted output is
		// JSON throughout, unknown members included.
		if !json.Valid(out) {
			t.Fatalf("ABI %d: accepted the output %q, which is not JSON", abi, out)
		}
		if err := json.Unmarshal(out, &members); err != nil {
			t.Fatalf("ABI %d: accepted the output %q, which is not an object: %v", abi, out, err)
		}
	}
	return members
}

// stdNumber is a JSON member's number as encoding/json reads it (0 when
// absent or null).
func stdNumber(t *testing.T, members map[string]json.RawMessage, key string) float64 {
	t.Helper()
	var f float64
	if raw, ok := members[key]; ok {
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatalf("member %q: encoding/json cannot read %s as a number: %v", key, raw, err)
		}
	}
	return f
}

// stdString is a JSON member's string as encoding/json reads it ("" when
// absent or null).
func stdString(t *testing.T, members map[string]json.RawMessage, key string) string {
	t.Helper()
	var s string
	if raw, ok := members[key]; ok {
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("member %q: encoding/json cannot read %s as a string: %v", key, raw, err)
		}
	}
	return s
}

// validUTF8 is s with each invalid UTF-8 byte replaced by U+FFFD, as a
// re-encoded output carries it (jsonx.AppendQuote).
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r) // ranging yields utf8.RuneError for each invalid byte
	}
	return b.String()
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
		// Unknown members are ignored, but must be JSON too (ABI.md §4).
		{"{\"verdict\":0,\"0\x11\":\"x\"}", "malformed JSON"},
		{`{"verdict":1,"penalty:":00}`, "malformed JSON"},
		{`{"verdict":1,"note":[1,}`, "malformed JSON"},
	} {
		for hook, decode := range decoders {
			err := decode(hostabi.PackPtrLen(1024, uint32(len(tc.output))), mem(tc.output))
			if !errors.Is(err, errInvalidOutput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s output %s: %v; want %q", hook, tc.output, err, tc.want)
			}
		}
	}
}

// TestOutputTypeFaultNamesTheMember: well-formed output whose member has
// the wrong type or range is a fault that says which member and what ABI.md
// §4 (§3.5 for stream_event) asks of it, not "malformed JSON"; values the
// ABI accepts still decode.
func TestOutputTypeFaultNamesTheMember(t *testing.T) {
	decoders := map[string]func(r uint64, m memView) error{
		"recover": func(r uint64, m memView) error { _, _, err := decodeRecoverResult(r, m, 3); return err },
		"replay":  func(r uint64, m memView) error { _, _, err := decodeReplayResult(r, m, 3); return err },
		"stream_event": func(r uint64, m memView) error {
			_, _, err := decodeStreamEventResult(r, m)
			return err
		},
	}
	all := []string{"recover", "replay", "stream_event"}
	for _, tc := range []struct {
		hooks        []string
		output, want string // want "" means the output decodes
	}{
		{all, `{"verdict":"1"}`, `"verdict": must be an integer, got a string`},
		{all, `{"verdict":1.5}`, `"verdict": must be an integer, got 1.5`},
		{all, `{"verdict":true}`, `"verdict": must be an integer, got a boolean`},
		{all, `{"verdict":[1]}`, `"verdict": must be an integer, got an array`},
		{all, `{"verdict":{"n":1}}`, `"verdict": must be an integer, got an object`},
		{all, `{"verdict":1e30}`, `"verdict": must be an integer, got 1e30`},
		{all, `{"verdict":"1","verdict":1}`, `"verdict": must be an integer, got a string`},
		{all, `{"verd\u0069ct":"1"}`, `"verdict": must be an integer, got a string`},
		{all, `{"verdict":1` + strings.Repeat("0", 40) + `}`, `"verdict": must be an integer, got a number`},
		{[]string{"replay"}, `{"verdict":1,"penalty_ms":1.5}`, `"penalty_ms": must be a non-negative integer (at most 2^62 ms), got 1.5`},
		{[]string{"replay"}, `{"verdict":1,"penalty_ms":1e30}`, `"penalty_ms": must be a non-negative integer (at most 2^62 ms), got 1e30`},
		{[]string{"replay"}, `{"verdict":1,"penalty_ms":-5}`, `"penalty_ms": must be a non-negative integer (at most 2^62 ms), got -5`},
		{[]string{"replay"}, `{"verdict":1,"penalty_ms":"30"}`, `"penalty_ms": must be a non-negative integer (at most 2^62 ms), got a string`},
		{[]string{"recover"}, `{"verdict":2,"code":5}`, `"code": must be a string, got 5`},
		{[]string{"recover"}, `{"verdict":2,"message":{}}`, `"message": must be a string, got an object`},
		{[]string{"stream_event"}, `{"verdict":2,"delta":false}`, `"delta": must be a string, got a boolean`},
		{[]string{"stream_event"}, `{"verdict":2,"text":1}`, `"text": must be a string, got 1`},
		// Faults that are not about a type keep their words.
		{all, `{"verdict":9}`, `unknown verdict`},
		{[]string{"recover", "replay"}, `{"note":"x"}`, `no verdict`},
		{all, `{"verdict":"1"`, `malformed JSON`},
		// What the ABI accepts: integral numbers in any spelling, null as zero,
		// unknown members of any type.
		{all, `{"verdict":1.0,"code":null,"extra":"x"}`, ``},
		{[]string{"recover", "replay"}, `{"verdict":1e0,"penalty_ms":1e3,"text":5}`, ``},
		{[]string{"recover", "replay"}, `{"verdict":null}`, ``},
	} {
		for _, hook := range tc.hooks {
			err := decoders[hook](hostabi.PackPtrLen(1024, uint32(len(tc.output))), mem(tc.output))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s output %s: %v; want it decoded", hook, tc.output, err)
			case tc.want != "" && (!errors.Is(err, errInvalidOutput) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%s output %s: %v; want %q", hook, tc.output, err, tc.want)
			case tc.want != "malformed JSON" && err != nil && strings.Contains(err.Error(), "malformed"):
				t.Errorf("%s output %s: %v; it is well-formed JSON", hook, tc.output, err)
			}
		}
	}
}

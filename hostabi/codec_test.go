package hostabi

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCodecMatchesJSONTags(t *testing.T) {
	rin := RecoverInput{Surface: "responses_stream", Upstream: "u\"1", HTTPStatus: 400, EventType: "error",
		Code: "c", Type: "t", Param: "p", Message: "m <&> \u2028 é \x01", Transport: true,
		OwnerRemoved: true, OwnerDownMillis: 360000, RehydrateAfterMillis: 300000, Portable: true}
	pin := ReplayInput{Surface: "websocket", Upstream: "u", Code: "transport", HTTPStatus: 503, ReplayCount: 1,
		ResponseCreatedSeen: true, ResponseIDAssigned: true, PendingRequests: 2, HasPreviousResponseID: true,
		PinnedOwner: "o", RetryAfterMillis: 1500}
	pin2 := fullReplayInput()
	ctx := RewriteContext{Surface: "chat_json", Endpoint: "/v1/chat/completions", Model: "m", Stream: true, BodyBytes: 12,
		Headers: map[string]string{"b": "2", "a": "1\n"}}
	cases := []struct {
		v      any
		enc    []byte
		decode func([]byte) (any, error)
	}{
		{rin, AppendRecoverInput(nil, rin), func(b []byte) (any, error) { return DecodeRecoverInput(b) }},
		{RecoverInput{}, AppendRecoverInput(nil, RecoverInput{}), func(b []byte) (any, error) { return DecodeRecoverInput(b) }},
		{pin, AppendReplayInput(nil, pin), func(b []byte) (any, error) { return DecodeReplayInput(b) }},
		{ReplayInput{}, AppendReplayInput(nil, ReplayInput{}), func(b []byte) (any, error) { return DecodeReplayInput(b) }},
		{pin2, AppendReplayInput(nil, pin2), func(b []byte) (any, error) { return DecodeReplayInput(b) }},
		{ReplayOutput{Verdict: ReplayContinueRestart}, AppendReplayOutput(nil, ReplayOutput{Verdict: ReplayContinueRestart}), func(b []byte) (any, error) { return DecodeReplayOutput(b) }},
		{ctx, AppendRewriteContext(nil, ctx), func(b []byte) (any, error) { return DecodeRewriteContext(b) }},
		{RecoverOutput{Verdict: 2, Code: "x"}, AppendRecoverOutput(nil, RecoverOutput{Verdict: 2, Code: "x"}), func(b []byte) (any, error) { return DecodeRecoverOutput(b) }},
		{ReplayOutput{Verdict: 1, PenaltyMillis: 5}, AppendReplayOutput(nil, ReplayOutput{Verdict: 1, PenaltyMillis: 5}), func(b []byte) (any, error) { return DecodeReplayOutput(b) }},
	}
	for _, c := range cases {
		// Our encoding is exactly what encoding/json produces from the tags,
		// modulo encoding/json's HTML escaping.
		std, _ := json.Marshal(c.v)
		var a, b any
		if err := json.Unmarshal(c.enc, &a); err != nil {
			t.Fatalf("%T: invalid JSON %s", c.v, c.enc)
		}
		_ = json.Unmarshal(std, &b)
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%T:\n ours %s\n std  %s", c.v, c.enc, std)
		}
		got, err := c.decode(c.enc)
		if err != nil || !reflect.DeepEqual(got, c.v) {
			t.Errorf("%T round trip: %+v %v", c.v, got, err)
		}
		// encoding/json's output decodes the same.
		if got, err := c.decode(std); err != nil || !reflect.DeepEqual(got, c.v) {
			t.Errorf("%T from encoding/json: %+v %v", c.v, got, err)
		}
	}
}

func TestDecodeLenient(t *testing.T) {
	in, err := DecodeRecoverInput([]byte(` { "code" : "x\u0041" , "unknown" : {"a":[1,2]}, "http_status": null, "message": null, "transport": false } `))
	if err != nil || in.Code != "xA" || in.HTTPStatus != 0 {
		t.Fatal(in, err)
	}
	for _, s := range []string{``, `{`, `{"code":1}`, `{"http_status":"1"}`, `{"transport":"yes"}`, `[]`, `{"code":"x"} {}`, `{"http_status":1e400}`} {
		if _, err := DecodeRecoverInput([]byte(s)); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	if e, err := DecodeRejectError([]byte(`{}`)); err != nil || e.Status != 400 || e.Type != "invalid_request_error" || e.Code != "rejected_by_policy" {
		t.Fatal(e, err)
	}
	if _, err := DecodeRejectError([]byte(`{"status":200}`)); err == nil {
		t.Fatal("status 200 accepted")
	}
}

// FuzzDecodeInputs: guests decode host inputs with these; the host decodes
// guest outputs. Nothing may panic, and whatever decodes round-trips: its
// encoding is valid JSON that decodes back to the same value, with its
// strings' invalid UTF-8 bytes each replaced by U+FFFD, which is what the
// encoder writes for them (jsonx.AppendQuote); a reject error decodes with
// its defaults applied.
func FuzzDecodeInputs(f *testing.F) {
	f.Add([]byte(`{"surface":"responses_stream","upstream":"u","code":"previous_response_not_found"}`))
	f.Add([]byte(`{"verdict":1,"penalty_ms":30000,"code":"c"}`))
	f.Add([]byte(`{"surface":"s","endpoint":"/v1/responses","headers":{"a":"\ud83d\ude00"},"stream":true}`))
	f.Add([]byte(`{"status":403,"message":"m"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if in, err := DecodeRecoverInput(b); err == nil {
			checkRoundTrip(t, "recover input", in, AppendRecoverInput, DecodeRecoverInput)
		}
		if in, err := DecodeReplayInput(b); err == nil {
			checkRoundTrip(t, "replay input", in, AppendReplayInput, DecodeReplayInput)
		}
		if c, err := DecodeRewriteContext(b); err == nil {
			checkRoundTrip(t, "rewrite context", c, AppendRewriteContext, DecodeRewriteContext)
		}
		if out, err := DecodeRecoverOutput(b); err == nil {
			checkRoundTrip(t, "recover output", out, AppendRecoverOutput, DecodeRecoverOutput)
		}
		if out, err := DecodeReplayOutput(b); err == nil {
			checkRoundTrip(t, "replay output", out, AppendReplayOutput, DecodeReplayOutput)
		}
		if e, err := DecodeRejectError(b); err == nil {
			if e.Status < 400 || e.Status > 599 || e.Type == "" || e.Code == "" {
				t.Fatalf("reject error %+v: the defaults were not applied", e)
			}
			checkRoundTrip(t, "reject error", e, AppendRejectError, DecodeRejectError)
		}
	})
}

// checkRoundTrip checks that in, a decoded value, encodes to valid JSON
// that decodes to in with its strings made valid UTF-8, and that this
// value's encoding decodes to it again.
func checkRoundTrip[T any](t *testing.T, what string, in T, encode func([]byte, T) []byte, decode func([]byte) (T, error)) {
	t.Helper()
	enc := encode(nil, in)
	if !json.Valid(enc) {
		t.Fatalf("%s %+v encodes to invalid JSON %q", what, in, enc)
	}
	back, err := decode(enc)
	if err != nil {
		t.Fatalf("%s %+v: its encoding %q does not decode: %v", what, in, enc, err)
	}
	want, exact := withValidUTF8(in)
	if exact && !reflect.DeepEqual(back, want) {
		t.Fatalf("%s %+v: its encoding %q decodes to %+v", what, in, enc, back)
	}
	// back's strings are valid UTF-8, so from here the encoding is a fixed
	// point (an invalid byte is written "\ufffd", the rune itself as is).
	enc2 := encode(nil, back)
	if back2, err := decode(enc2); err != nil || !reflect.DeepEqual(back2, back) || string(encode(nil, back2)) != string(enc2) {
		t.Fatalf("%s %+v encodes to %q, which decodes to %+v (%v)", what, back, enc2, back2, err)
	}
}

// withValidUTF8 is v (a struct) with each string, header names and values
// included, made valid UTF-8 as jsonx.AppendQuote writes it: every invalid
// byte becomes U+FFFD. An empty header map becomes nil, as its encoding
// leaves it out. exact is false when two header names become one: the
// encoding then holds the name twice and the decoder keeps the last, so the
// round trip is not defined (a Go HTTP server never passes such names on).
func withValidUTF8[T any](v T) (out T, exact bool) {
	exact = true
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(perByteValidUTF8(f.String()))
		case reflect.Map:
			h, ok := f.Interface().(map[string]string)
			if !ok {
				panic("withValidUTF8: a map that is not map[string]string in " + rv.Type().String())
			}
			var norm map[string]string
			for k, val := range h {
				if norm == nil {
					norm = map[string]string{}
				}
				k = perByteValidUTF8(k)
				if _, dup := norm[k]; dup {
					exact = false
				}
				norm[k] = perByteValidUTF8(val)
			}
			f.Set(reflect.ValueOf(norm))
		}
	}
	return v, exact
}

// perByteValidUTF8 replaces each byte of s that is not part of valid UTF-8
// with U+FFFD.
func perByteValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r) // ranging yields utf8.RuneError for each invalid byte
	}
	return b.String()
}

// fullReplayInput sets every member, the ABI-2 ones included.
func fullReplayInput() ReplayInput {
	return ReplayInput{Surface: "responses_stream", Upstream: "p", Code: "server_error", HTTPStatus: 500, ReplayCount: 1,
		ResponseCreatedSeen: true, ResponseIDAssigned: true, PendingRequests: 1, HasPreviousResponseID: true,
		PinnedOwner: "o", RetryAfterMillis: 1500,
		Phase: PhaseAfterContent, FailureClass: FailureServerError, BytesSent: 1234, ItemsSent: 2, ToolCallInFlight: true,
		HasTools: true, TargetIndex: 1, TargetCount: 3, HasNextTarget: true, NextModelDiffers: true, SameTargetRetries: 1,
		MaxWaitMillis: 5000, Continuation: "auto", PrefillAllowed: true}
}

// TestReplayInputVersions: ABI.md §3.2's bytes, member for member. A
// version-1 module gets exactly the version-1 encoding, whatever the
// version-2 members hold; version 2 appends its members after them.
func TestReplayInputVersions(t *testing.T) {
	in := fullReplayInput()
	const v1 = `{"surface":"responses_stream","upstream":"p","code":"server_error","http_status":500,"replay_count":1,` +
		`"response_created_seen":true,"response_id_assigned":true,"pending_requests":1,"has_previous_response_id":true,` +
		`"pinned_owner":"o","retry_after_ms":1500}`
	v2 := v1[:len(v1)-1] + `,"phase":"after_content","failure_class":"server_error","bytes_sent":1234,"items_sent":2,` +
		`"tool_call_in_flight":true,"has_tools":true,"target_index":1,"target_count":3,"has_next_target":true,` +
		`"next_model_differs":true,"same_target_retries":1,"max_wait_ms":5000,"continuation":"auto","prefill_allowed":true}`
	if got := string(AppendReplayInputVersion(nil, in, 1)); got != v1 {
		t.Errorf("version 1:\n got %s\nwant %s", got, v1)
	}
	if got := string(AppendReplayInputVersion(nil, in, 2)); got != v2 {
		t.Errorf("version 2:\n got %s\nwant %s", got, v2)
	}
	if got := string(AppendReplayInput(nil, in)); got != v2 {
		t.Errorf("current version: %s", got)
	}
	// What version 1 sent for a version-1 input is what version 2 sends.
	old := ReplayInput{Surface: "chat_json", Upstream: "u", Code: "transport"}
	if a, b := AppendReplayInputVersion(nil, old, 1), AppendReplayInputVersion(nil, old, 2); string(a) != string(b) ||
		string(a) != `{"surface":"chat_json","upstream":"u","code":"transport","replay_count":0,"response_created_seen":false,"response_id_assigned":false,"pending_requests":0,"has_previous_response_id":false}` {
		t.Errorf("a version-1 input: %s / %s", a, b)
	}
	// A version-2 guest decodes a version-1 input (the new members zero).
	got, err := DecodeReplayInput([]byte(v1))
	want := in
	want.Phase, want.FailureClass, want.BytesSent, want.ItemsSent, want.ToolCallInFlight, want.HasTools = "", "", 0, 0, false, false
	want.TargetIndex, want.TargetCount, want.HasNextTarget, want.NextModelDiffers, want.SameTargetRetries = 0, 0, false, false, 0
	want.MaxWaitMillis, want.Continuation, want.PrefillAllowed = 0, "", false
	if err != nil || got != want {
		t.Errorf("v1 input decoded by v2: %+v %v", got, err)
	}
}

func TestReplayVerdictsByVersion(t *testing.T) {
	for v := uint32(0); v <= 5; v++ {
		if got, want := ValidReplayVerdictVersion(v, 1), v <= 2; got != want {
			t.Errorf("v1 verdict %d valid=%v", v, got)
		}
		if got, want := ValidReplayVerdictVersion(v, 2), v <= 4; got != want {
			t.Errorf("v2 verdict %d valid=%v", v, got)
		}
		b := []byte(`{"verdict":` + string(rune('0'+v)) + `}`)
		if _, err := DecodeReplayOutputVersion(b, 1); (err == nil) != (v <= 2) {
			t.Errorf("v1 decode %s: %v", b, err)
		}
		if out, err := DecodeReplayOutputVersion(b, 2); (err == nil) != (v <= 4) || (err == nil && uint32(out.Verdict) != v) {
			t.Errorf("v2 decode %s: %+v %v", b, out, err)
		}
		if out, err := DecodeReplayOutput(b); (err == nil) != (v <= 4) || (err == nil && uint32(out.Verdict) != v) {
			t.Errorf("v3 decode %s: %+v %v", b, out, err)
		}
	}
	if !SupportedABI(1) || !SupportedABI(2) || !SupportedABI(3) || SupportedABI(0) || SupportedABI(4) {
		t.Fatal("SupportedABI")
	}
	for v, name := range map[ReplayVerdict]string{0: "no", 1: "replay_other_upstream", 2: "replay_same_upstream", 3: "continue_prefill", 4: "continue_restart", 5: "unknown"} {
		if v.String() != name {
			t.Errorf("%d: %s", v, v.String())
		}
	}
}

// TestRecoverABI3: the owner_unavailable members and the rehydrate verdict
// are version 3's: never encoded for an older module, a fault from one.
func TestRecoverABI3(t *testing.T) {
	in := RecoverInput{Surface: "responses_stream", Upstream: "a", Code: CodeOwnerUnavailable, Message: "gone",
		OwnerRemoved: true, OwnerDownMillis: 7, RehydrateAfterMillis: 300000, Portable: true}
	const v2 = `{"surface":"responses_stream","upstream":"a","code":"owner_unavailable","message":"gone"}`
	v3 := v2[:len(v2)-1] + `,"owner_removed":true,"owner_down_ms":7,"rehydrate_after_ms":300000,"portable":true}`
	for v, want := range map[int32]string{1: v2, 2: v2, 3: v3} {
		if got := string(AppendRecoverInputVersion(nil, in, v)); got != want {
			t.Errorf("version %d:\n got %s\nwant %s", v, got, want)
		}
	}
	if got := string(AppendRecoverInput(nil, in)); got != v3 {
		t.Errorf("current version: %s", got)
	}
	for v := uint32(0); v <= 4; v++ {
		if got, want := ValidRecoverVerdictVersion(v, 2), v <= 2; got != want {
			t.Errorf("v2 recover verdict %d valid=%v", v, got)
		}
		if got, want := ValidRecoverVerdictVersion(v, 3), v <= 3; got != want {
			t.Errorf("v3 recover verdict %d valid=%v", v, got)
		}
		b := []byte(`{"verdict":` + string(rune('0'+v)) + `}`)
		if _, err := DecodeRecoverOutputVersion(b, 2); (err == nil) != (v <= 2) {
			t.Errorf("v2 decode %s: %v", b, err)
		}
		if out, err := DecodeRecoverOutput(b); (err == nil) != (v <= 3) || (err == nil && uint32(out.Verdict) != v) {
			t.Errorf("v3 decode %s: %+v %v", b, out, err)
		}
	}
	for v, name := range map[RecoverVerdict]string{0: "pass", 1: "recover", 2: "fail_closed", 3: "rehydrate", 4: "unknown"} {
		if v.String() != name {
			t.Errorf("%d: %s", v, v.String())
		}
	}
}

// TestReplayPenaltyBounds: penalty_ms is a non-negative integer of at most
// 2^62 ms (ABI.md §4), read exactly: 2^62+1 is a fault, not rounded to 2^62.
func TestReplayPenaltyBounds(t *testing.T) {
	for _, c := range []struct {
		penalty string
		want    int64
		ok      bool
	}{
		{"0", 0, true},
		{"250", 250, true},
		{"2.5e2", 250, true},
		{"4611686018427387903", 1<<62 - 1, true},
		{"4611686018427387904", 1 << 62, true},
		{"4611686018427387905", 0, false},
		{"4611686018427388000", 0, false},
		{"4611686018427388500", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{`"5"`, 0, false},
	} {
		out, err := DecodeReplayOutput([]byte(`{"verdict":1,"penalty_ms":` + c.penalty + `}`))
		if (err == nil) != c.ok || (c.ok && out.PenaltyMillis != c.want) {
			t.Errorf("penalty_ms %s: %+v, %v; want %d, ok=%v", c.penalty, out, err, c.want, c.ok)
			continue
		}
		if !c.ok && !strings.Contains(err.Error(), "at most 2^62 ms") {
			t.Errorf("penalty_ms %s: the fault does not name the bound: %v", c.penalty, err)
		}
	}
}

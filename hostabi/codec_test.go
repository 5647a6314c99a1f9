package hostabi

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestCodecMatchesJSONTags(t *testing.T) {
	rin := RecoverInput{Surface: "responses_stream", Upstream: "u\"1", HTTPStatus: 400, EventType: "error",
		Code: "c", Type: "t", Param: "p", Message: "m <&> \u2028 é \x01", Transport: true}
	pin := ReplayInput{Surface: "websocket", Upstream: "u", Code: "transport", HTTPStatus: 503, ReplayCount: 1,
		ResponseCreatedSeen: true, ResponseIDAssigned: true, PendingRequests: 2, HasPreviousResponseID: true,
		PinnedOwner: "o", RetryAfterMillis: 1500}
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
// guest outputs. Nothing may panic, and what decodes re-encodes to the same.
func FuzzDecodeInputs(f *testing.F) {
	f.Add([]byte(`{"surface":"responses_stream","upstream":"u","code":"previous_response_not_found"}`))
	f.Add([]byte(`{"verdict":1,"penalty_ms":30000,"code":"c"}`))
	f.Add([]byte(`{"surface":"s","endpoint":"/v1/responses","headers":{"a":"\ud83d\ude00"},"stream":true}`))
	f.Add([]byte(`{"status":403,"message":"m"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if in, err := DecodeRecoverInput(b); err == nil {
			if back, err := DecodeRecoverInput(AppendRecoverInput(nil, in)); err != nil || back != in {
				// Strings with invalid UTF-8 are normalised to U+FFFD.
				if !json.Valid(AppendRecoverInput(nil, in)) {
					t.Fatalf("re-encoding %+v gave invalid JSON", in)
				}
			}
		}
		if in, err := DecodeReplayInput(b); err == nil && !json.Valid(AppendReplayInput(nil, in)) {
			t.Fatalf("replay %+v", in)
		}
		if c, err := DecodeRewriteContext(b); err == nil && !json.Valid(AppendRewriteContext(nil, c)) {
			t.Fatalf("ctx %+v", c)
		}
		if out, err := DecodeRecoverOutput(b); err == nil && !ValidRecoverVerdict(uint32(out.Verdict)) {
			t.Fatalf("verdict %d", out.Verdict)
		}
		if out, err := DecodeReplayOutput(b); err == nil && (!ValidReplayVerdict(uint32(out.Verdict)) || out.PenaltyMillis < 0) {
			t.Fatalf("replay out %+v", out)
		}
		_, _ = DecodeRejectError(b)
	})
}

//go:build !wasip1

package sdk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/sdk"
)

func TestHarnessHooks(t *testing.T) {
	p := sdk.Policy{
		Recover: func(in sdk.RecoverInput) (sdk.RecoverOutput, error) {
			switch in.Code {
			case "defer":
				return sdk.RecoverOutput{}, sdk.ErrDefer
			case "err":
				return sdk.RecoverOutput{}, errors.New("boom")
			}
			sdk.Log(sdk.LevelWarn, "cfg="+sdk.Config())
			return sdk.RecoverOutput{Verdict: sdk.FailClosed, Message: in.Message + "!"}, nil
		},
		Replay: func(in sdk.ReplayInput) (sdk.ReplayOutput, error) {
			return sdk.ReplayOutput{Verdict: sdk.ReplaySameUpstream, PenaltyMillis: sdk.Now().UnixMilli()}, nil
		},
	}
	h := &sdk.Harness{Policy: p, Config: `{"k":1}`, Now: func() time.Time { return time.UnixMilli(42) }}
	out, deferred, err := h.Recover(sdk.RecoverInput{Code: "x", Message: "é\"\n"})
	if err != nil || deferred || out.Verdict != sdk.FailClosed || out.Message != "é\"\n!" {
		t.Fatal(out, deferred, err)
	}
	if len(h.Logs) != 1 || h.Logs[0].Message != `cfg={"k":1}` || h.Logs[0].Level != sdk.LevelWarn {
		t.Fatal(h.Logs)
	}
	if _, deferred, _ := h.Recover(sdk.RecoverInput{Code: "defer"}); !deferred {
		t.Fatal("not deferred")
	}
	if _, _, err := h.Recover(sdk.RecoverInput{Code: "err"}); !errors.Is(err, sdk.ErrHookError) {
		t.Fatal(err)
	}
	rout, _, err := h.Replay(sdk.ReplayInput{})
	if err != nil || rout.PenaltyMillis != 42 || rout.Verdict != sdk.ReplaySameUpstream {
		t.Fatal(rout, err)
	}
	if _, deferred, _ := (&sdk.Harness{Policy: sdk.Policy{Replay: p.Replay}}).Recover(sdk.RecoverInput{}); !deferred {
		t.Fatal("missing hook must defer")
	}
}

func TestRequest(t *testing.T) {
	var checks []string
	p := sdk.Policy{Rewrite: func(req *sdk.Request) error {
		check := func(ok bool, what string) {
			if !ok {
				checks = append(checks, what)
			}
		}
		check(req.Model() == "m" && req.Stream() && req.Endpoint() == "/v1/chat/completions" && req.Surface() == "chat_stream", "context")
		check(req.Header("x-a") == "1" && req.Header("authorization") == "", "headers")
		check(req.Context().BodyBytes > 0, "body bytes")
		n, ok := req.Len("messages")
		check(ok && n == 2, "len")
		s, ok := req.GetString("messages.1.content")
		check(ok && s == "two", "getstring")
		_, ok = req.Get("nope")
		check(!ok, "get missing")
		removed, err := req.Delete("nope")
		check(!removed && err == nil, "delete missing")
		removed, err = req.Delete(`messages.#(role=="system")`)
		check(removed && err == nil, "delete query")
		check(req.Set("temperature", "0.5") == nil, "set")
		check(req.Set("temperature", "{bad") != nil, "set bad")
		err = req.Set("a..b", "1")
		var he *sdk.HostError
		check(errors.As(err, &he) && he.Code == hostabi.CodeBadPath, "bad path")
		check(req.SetString("model", `q"uote`) == nil, "setstring")
		check(req.SetHeader("X-B", "2") == nil && req.SetHeader("Host", "x") != nil && req.SetHeader("x-c", "a\nb") != nil, "headers set")
		check(req.RemoveHeader("x-a") == nil, "header remove")
		check(req.UseUpstream("u2") == nil && req.UseUpstream("") != nil, "upstream")
		check(req.Reject(0, "c", "p", "m") == nil, "reject")
		return nil
	}}
	body := `{"model":"m","stream":true,"messages":[{"role":"system","content":"one"},{"role":"user","content":"two"}]}`
	out, err := (&sdk.Harness{Policy: p}).Rewrite(hostabi.RewriteInput{Surface: "chat_stream", Endpoint: "/v1/chat/completions",
		Body: []byte(body), Headers: map[string]string{"X-A": "1", "Authorization": "k"}})
	if err != nil || len(checks) > 0 {
		t.Fatal(err, checks)
	}
	if string(out.Body) != `{"model":"q\"uote","stream":true,"messages":[{"role":"user","content":"two"}],"temperature":0.5}` {
		t.Fatalf("%s", out.Body)
	}
	if out.SetHeaders["x-b"] != "2" || len(out.RemoveHeaders) != 1 || out.Upstream != "u2" ||
		out.Reject == nil || out.Reject.Status != 400 || out.Reject.Code != "c" || out.Reject.Type != "invalid_request_error" {
		t.Fatalf("%+v", out)
	}
}

func TestJSONHelpers(t *testing.T) {
	cfg := `{"a":{"b.c":["x","y"]},"n":3}`
	if v, ok := sdk.Lookup(cfg, "a."+sdk.EscapeKey("b.c")+".1"); !ok || v != `"y"` {
		t.Fatal(v, ok)
	}
	if v, ok := sdk.LookupString(cfg, "a.b\\.c.0"); !ok || v != "x" {
		t.Fatal(v, ok)
	}
	var keys []string
	sdk.EachMember(cfg, func(k, v string) bool { keys = append(keys, k); return true })
	if len(keys) != 2 {
		t.Fatal(keys)
	}
	n := 0
	if !sdk.EachElement(`[1,{"a":2},"x"]`, func(int, string) bool { n++; return true }) || n != 3 {
		t.Fatal(n)
	}
	if s, ok := sdk.Unquote(sdk.Quote("a\"b")); !ok || s != "a\"b" {
		t.Fatal(s)
	}
}

// TestHarnessABI2: the ABI-2 members reach the handler through the encoding
// and the continue verdicts come back, bare and in JSON.
func TestHarnessABI2(t *testing.T) {
	var got sdk.ReplayInput
	h := &sdk.Harness{Policy: sdk.Policy{Replay: func(in sdk.ReplayInput) (sdk.ReplayOutput, error) {
		got = in
		switch in.FailureClass {
		case sdk.FailureCut:
			return sdk.ReplayOutput{Verdict: sdk.ReplayContinueRestart}, nil
		case sdk.FailureStall:
			return sdk.ReplayOutput{Verdict: sdk.ReplayContinuePrefill, PenaltyMillis: 9}, nil
		case "bad":
			return sdk.ReplayOutput{Verdict: 7}, nil
		}
		return sdk.DefaultReplay(in), nil
	}}}
	in := sdk.ReplayInput{Surface: "responses_stream", Upstream: "p", Code: "transport", Phase: sdk.PhaseAfterContent,
		FailureClass: sdk.FailureCut, BytesSent: 42, ItemsSent: 1, ToolCallInFlight: true, HasTools: true, TargetIndex: 1,
		TargetCount: 3, HasNextTarget: true, NextModelDiffers: true, SameTargetRetries: 1, MaxWaitMillis: 5000,
		Continuation: "restart", PrefillAllowed: true, RetryAfterMillis: 10}
	out, deferred, err := h.Replay(in)
	if err != nil || deferred || out.Verdict != sdk.ReplayContinueRestart || got != in {
		t.Fatalf("%+v %v %v; handler saw %+v", out, deferred, err, got)
	}
	in.FailureClass = sdk.FailureStall
	if out, _, err := h.Replay(in); err != nil || out.Verdict != sdk.ReplayContinuePrefill || out.PenaltyMillis != 9 {
		t.Fatalf("%+v %v", out, err)
	}
	in.FailureClass = "bad"
	if _, _, err := h.Replay(in); !errors.Is(err, hostabi.ErrBadVerdict) {
		t.Fatalf("verdict 7: %v", err)
	}
	in = sdk.ReplayInput{Phase: sdk.PhaseBeforeHeaders, FailureClass: sdk.FailureServerError, HTTPStatus: 502, HasNextTarget: true}
	if out, _, _ := h.Replay(in); out.Verdict != sdk.ReplaySameUpstream {
		t.Fatalf("the table through the SDK: %+v", out)
	}
	if sdk.ABIVersion != 3 || sdk.Rehydrate != 3 || sdk.EffectiveReplay(sdk.ReplayInput{Phase: sdk.PhaseBeforeContent}, sdk.ReplayContinuePrefill) != sdk.ReplayOtherUpstream {
		t.Fatal("re-exports")
	}
}

func TestHarnessStreamEvent(t *testing.T) {
	h := &sdk.Harness{Policy: sdk.Policy{StreamEvent: func(ev sdk.StreamEvent) (sdk.StreamVerdict, error) {
		switch {
		case ev.Delta == "drop":
			return sdk.DropEvent(), nil
		case ev.Delta == "defer":
			return sdk.StreamVerdict{}, sdk.ErrDefer
		case ev.HasText:
			return sdk.ReplaceText(ev.Text + "!"), nil
		case ev.HasDelta && ev.Delta != "keep":
			return sdk.ReplaceDelta("[" + ev.Delta + "]"), nil
		}
		return sdk.PassEvent(), nil
	}}}
	ev := func(delta string) sdk.StreamEvent {
		return sdk.StreamEvent{Type: "response.output_text.delta", OutputIndex: 0, ContentIndex: -1, Delta: delta, HasDelta: true}
	}
	if out, _, err := h.StreamEvent(ev("x")); err != nil || out.Verdict != hostabi.StreamReplace || out.Delta != "[x]" {
		t.Fatalf("replace: %+v %v", out, err)
	}
	if out, _, err := h.StreamEvent(ev("drop")); err != nil || out.Verdict != hostabi.StreamDrop {
		t.Fatalf("drop: %+v %v", out, err)
	}
	if out, _, err := h.StreamEvent(ev("keep")); err != nil || out.Verdict != hostabi.StreamPass {
		t.Fatalf("pass: %+v %v", out, err)
	}
	if _, deferred, err := h.StreamEvent(ev("defer")); err != nil || !deferred {
		t.Fatalf("defer: %v %v", deferred, err)
	}
	done := sdk.StreamEvent{Type: "response.output_text.done", OutputIndex: 0, ContentIndex: 0, Text: "all", HasText: true}
	if out, _, err := h.StreamEvent(done); err != nil || !out.HasText || out.Text != "all!" {
		t.Fatalf("text: %+v %v", out, err)
	}
}

// TestHarnessOwnerQuestion: the ABI-3 owner_unavailable question reaches a
// Go policy with its members, and a rehydrate answer comes back.
func TestHarnessOwnerQuestion(t *testing.T) {
	h := &sdk.Harness{Policy: sdk.Policy{Recover: func(in sdk.RecoverInput) (sdk.RecoverOutput, error) {
		if in.OwnerQuestion() && in.Portable && in.OwnerDownMillis > 1000 {
			return sdk.RecoverOutput{Verdict: sdk.Rehydrate}, nil
		}
		return sdk.DefaultRecover(in), nil
	}}}
	in := sdk.RecoverInput{Surface: sdk.SurfaceResponsesStream, Upstream: "a", Code: sdk.CodeOwnerUnavailable, OwnerDownMillis: 2000,
		RehydrateAfterMillis: 300000, Portable: true}
	if out, _, err := h.Recover(in); err != nil || out.Verdict != sdk.Rehydrate || sdk.EffectiveRecover(in, out.Verdict) != sdk.Rehydrate {
		t.Fatal(out, err)
	}
	in.OwnerDownMillis = 10
	if out, _, err := h.Recover(in); err != nil || out.Verdict != sdk.FailClosed {
		t.Fatal(out, err)
	}
}

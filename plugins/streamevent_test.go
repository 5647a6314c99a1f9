package plugins

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/policies"
)

func streamDelta(delta string) hostabi.StreamEventInput {
	return hostabi.StreamEventInput{Surface: hostabi.SurfaceResponsesStream, Upstream: "primary",
		Type: "response.output_text.delta", SequenceNumber: 7, OutputIndex: 0, ContentIndex: 0,
		ItemID: "msg_1", Delta: delta, HasDelta: true}
}

// TestStreamEventHook runs the stream_event hook of the WAT fixture, the Go
// fixture and the AssemblyScript fixture: each replaces "secret" with
// "[redacted]" in text deltas and passes everything else.
func TestStreamEventHook(t *testing.T) {
	for _, name := range []string{"stream_redact", "gofixture", "asfixture"} {
		t.Run(name, func(t *testing.T) {
			r := newRuntime(t, Options{Embedded: map[string][]byte{"s.wasm": fixture(t, name)}, CallTimeout: 5 * time.Second})
			if !r.StreamHookActive() {
				t.Fatal("StreamHookActive is false")
			}
			ctx := context.Background()
			out := r.StreamEvent(ctx, streamDelta(`the secret plan, "quoted" secret`))
			if out.Verdict != hostabi.StreamReplace || !out.HasDelta || out.Delta != `the [redacted] plan, "quoted" [redacted]` {
				t.Fatalf("got %+v", out)
			}
			if out := r.StreamEvent(ctx, streamDelta("nothing to hide")); out.Verdict != hostabi.StreamPass {
				t.Fatalf("clean delta: %+v", out)
			}
			in := streamDelta("secret")
			in.Type = "response.function_call_arguments.delta"
			if out := r.StreamEvent(ctx, in); out.Verdict != hostabi.StreamPass {
				t.Fatalf("other type: %+v", out)
			}
			if got := counterValue(t, r, "sluice_policy_calls_total", map[string]string{"hook": "stream_event", "outcome": "ok"}); got != 3 {
				t.Fatalf("ok calls = %v", got)
			}
		})
	}
}

// TestStreamHookInactive: the embedded policies export no stream_event
// hook (the Go SDK exports the function, sluice_hooks leaves its bit out),
// so the gateway never builds an input.
func TestStreamHookInactive(t *testing.T) {
	r := newRuntime(t, Options{Embedded: policies.Defaults(), CallTimeout: 5 * time.Second})
	if r.StreamHookActive() {
		t.Fatal("StreamHookActive with the embedded policies")
	}
	if out := r.StreamEvent(context.Background(), streamDelta("secret")); out.Verdict != hostabi.StreamPass {
		t.Fatalf("got %+v", out)
	}
}

func TestStreamEventCodec(t *testing.T) {
	in := streamDelta("a\"b")
	in.OutputIndex, in.ContentIndex = 2, -1
	b := hostabi.AppendStreamEventInput(nil, in)
	want := `{"surface":"responses_stream","upstream":"primary","type":"response.output_text.delta","sequence_number":7,"output_index":2,"item_id":"msg_1","delta":"a\"b"}`
	if string(b) != want {
		t.Fatalf("encoded %s", b)
	}
	got, err := hostabi.DecodeStreamEventInput(b)
	if err != nil || got != in {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	for _, c := range []struct {
		res  string
		want hostabi.StreamEventOutput
		bad  bool
	}{
		{`{"delta":"x"}`, hostabi.StreamEventOutput{Verdict: hostabi.StreamReplace, Delta: "x", HasDelta: true}, false},
		{`{"verdict":1}`, hostabi.StreamEventOutput{Verdict: hostabi.StreamDrop}, false},
		{`{"verdict":2}`, hostabi.StreamEventOutput{}, true},
		{`{"verdict":3,"delta":"x"}`, hostabi.StreamEventOutput{}, true},
	} {
		mem := append(make(byteMem, 8), c.res...)
		out, kind, err := decodeStreamEventResult(hostabi.PackPtrLen(8, uint32(len(c.res))), mem)
		if (err != nil) != c.bad || kind != resDecided || (!c.bad && out != c.want) {
			t.Errorf("%s: %+v %v %v", c.res, out, kind, err)
		}
	}
	if _, _, err := decodeStreamEventResult(2, nil); err == nil {
		t.Error("bare verdict 2 accepted")
	}
}

// BenchmarkStreamEvent is the cost of the hook per event: a WAT guest, a
// Go SDK guest and an AssemblyScript SDK guest, on a delta that is replaced
// and on one that passes.
func BenchmarkStreamEvent(b *testing.B) {
	for _, name := range []string{"stream_redact", "gofixture", "asfixture"} {
		r := newRuntime(b, Options{Embedded: map[string][]byte{"s.wasm": fixture(b, name)}, CallTimeout: time.Second})
		for _, c := range []struct{ name, delta string }{{"replace", "the secret plan"}, {"pass", "the open plan"}} {
			b.Run(name+"/"+c.name, func(b *testing.B) {
				ctx := context.Background()
				in := streamDelta(c.delta)
				b.ReportAllocs()
				for b.Loop() {
					r.StreamEvent(ctx, in)
				}
			})
		}
	}
}

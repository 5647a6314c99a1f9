package gateway

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// goStreamPolicy is an in-process stream hook: it drops the delta " drop"
// and replaces "secret" with "[redacted]" in deltas.
type goStreamPolicy struct {
	BuiltinPolicy
	active bool
	calls  int
}

func (p *goStreamPolicy) StreamHookActive() bool { return p.active }

func (p *goStreamPolicy) StreamEvent(_ context.Context, in hostabi.StreamEventInput) hostabi.StreamEventOutput {
	p.calls++
	switch {
	case !in.HasDelta:
	case in.Delta == " drop":
		return hostabi.StreamEventOutput{Verdict: hostabi.StreamDrop}
	case strings.Contains(in.Delta, "secret"):
		return hostabi.StreamEventOutput{Verdict: hostabi.StreamReplace, HasDelta: true, Delta: strings.ReplaceAll(in.Delta, "secret", "[redacted]")}
	}
	return hostabi.StreamEventOutput{}
}

// recordSink keeps what the client got.
type recordSink struct{ evs [][]byte }

func (s *recordSink) Event(_ string, data []byte) error {
	s.evs = append(s.evs, bytes.Clone(data))
	return nil
}
func (*recordSink) Done() error                   { return nil }
func (*recordSink) KeepAlive(time.Duration) error { return nil }

type recordResponder struct{ sink *recordSink }

func (recordResponder) fail(*clientRequest, *apierr.Error, failKind)   {}
func (recordResponder) relay(*clientRequest, int, http.Header, []byte) {}
func (r recordResponder) commit(http.Header) eventSink                 { return r.sink }

func streamHookServer(t testing.TB, p Policy) *Server {
	t.Helper()
	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: "http://127.0.0.1:1/v1"}}, upstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Pool: pool, Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hookReq() *clientRequest {
	return &clientRequest{ep: responsesEndpoint, stream: true, model: "m", body: []byte(`{"model":"m","input":"hi","stream":true}`)}
}

// feed sends the upstream events through cs as the pump does.
func feed(t testing.TB, cs *clientStream, raw [][]byte) {
	t.Helper()
	for _, e := range raw {
		data := bytes.Clone(e)
		f, _ := scanEvent(data)
		var err error
		switch f.Type.Str {
		case "response.created", "response.in_progress", "response.queued":
			err = cs.lifecycle(f.Type.Str, data, &f)
		default:
			err = cs.sendFrom("A", f.Type.Str, data, &f)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestStreamHookDropKeepsNumbersAndText: a dropped delta is not numbered
// (the client's sequence numbers stay contiguous) and is not in the text
// the done events and response.completed repeat; a replaced one is there
// as replaced.
func TestStreamHookDropKeepsNumbersAndText(t *testing.T) {
	p := &goStreamPolicy{active: true}
	s := streamHookServer(t, p)
	sink := &recordSink{}
	cs := s.newClientStream(context.Background(), recordResponder{sink}, hookReq(), time.Now())
	defer cs.close()
	if cs.hook == nil {
		t.Fatal("no hook on the stream")
	}
	feed(t, cs, upstreamtest.ResponsesEvents("resp_1", "m", "the secret drop plan", 4))
	var deltas strings.Builder
	for k, e := range sink.evs {
		d := gjson.ParseBytes(e)
		if n := d.Get("sequence_number").Int(); n != int64(k) {
			t.Errorf("event %d numbered %d: %s", k, n, e)
		}
		if bytes.Contains(e, []byte("secret")) || bytes.Contains(e, []byte("drop")) {
			t.Errorf("event %d: %s", k, e)
		}
		if d.Get("type").Str == "response.output_text.delta" {
			deltas.WriteString(d.Get("delta").Str)
		}
	}
	const want = "the [redacted] plan"
	last := gjson.ParseBytes(sink.evs[len(sink.evs)-1])
	if deltas.String() != want || last.Get("type").Str != "response.completed" ||
		last.Get("response.output.0.content.0.text").Str != want {
		t.Fatalf("deltas %q, last %s", deltas.String(), last.Raw)
	}
	if p.calls != 5 { // 4 deltas and output_text.done
		t.Fatalf("hook calls %d", p.calls)
	}
}

// deltaSendAllocs is the allocations of sending one text delta through a
// client stream of a server with policy p.
func deltaSendAllocs(t *testing.T, p Policy) (float64, *clientStream) {
	s := streamHookServer(t, p)
	cs := s.newClientStream(context.Background(), discard{}, hookReq(), time.Now())
	t.Cleanup(cs.close)
	raw := upstreamtest.ResponsesEvents("resp_1", "m", "hello", 1)
	feed(t, cs, raw[:4]) // created, in_progress, output_item.added, content_part.added
	cs.seq = 1000
	data := []byte(`{"type":"response.output_text.delta","sequence_number":1000,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" the","logprobs":[]}`)
	f, _ := scanEvent(data)
	allocs := testing.AllocsPerRun(1000, func() {
		if err := cs.sendFrom("A", "response.output_text.delta", data, &f); err != nil {
			t.Fatal(err)
		}
	})
	return allocs, cs
}

// TestStreamNoHookAllocatesNothing: without a stream hook (no StreamPolicy,
// or one whose hook is not active) sending a delta allocates nothing.
func TestStreamNoHookAllocatesNothing(t *testing.T) {
	for name, p := range map[string]Policy{"builtin": BuiltinPolicy{}, "inactive": &goStreamPolicy{}} {
		allocs, cs := deltaSendAllocs(t, p)
		if cs.hook != nil || allocs != 0 {
			t.Errorf("%s: hook %v, %v allocs per delta", name, cs.hook != nil, allocs)
		}
	}
}

// BenchmarkStreamHookSend: the client stream's cost per text delta without
// a hook and with an in-process hook that passes every event (the cost of
// building the input and calling out; a Wasm guest adds its call, see
// plugins.BenchmarkStreamEvent).
func BenchmarkStreamHookSend(b *testing.B) {
	for _, c := range []struct {
		name string
		p    Policy
	}{{"no-hook", BuiltinPolicy{}}, {"go-hook-pass", &goStreamPolicy{active: true}}} {
		b.Run(c.name, func(b *testing.B) {
			s := streamHookServer(b, c.p)
			cs := s.newClientStream(context.Background(), discard{}, hookReq(), time.Now())
			defer cs.close()
			feed(b, cs, upstreamtest.ResponsesEvents("resp_1", "m", "hello", 1)[:4])
			cs.seq = 1000
			data := []byte(`{"type":"response.output_text.delta","sequence_number":1000,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" the","logprobs":[]}`)
			f, _ := scanEvent(data)
			b.ReportAllocs()
			for b.Loop() {
				_ = cs.sendFrom("A", "response.output_text.delta", data, &f)
			}
		})
	}
}

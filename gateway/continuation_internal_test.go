package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

func TestSumUsage(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{``, `{"input_tokens":8}`, `{"input_tokens":8}`},
		{`{"input_tokens":8}`, ``, `{"input_tokens":8}`},
		{`{"input_tokens":8,"input_tokens_details":{"cached_tokens":2},"x":"a"}`,
			`{"input_tokens":3,"input_tokens_details":{"cached_tokens":1},"output_tokens":4}`,
			`{"input_tokens":11,"input_tokens_details":{"cached_tokens":3},"output_tokens":4,"x":"a"}`},
		{`{"cost":0.5}`, `{"cost":0.25}`, `{"cost":0.75}`},
		// A count that is not a token count is no count: the other stands.
		{`{"output_tokens":-50}`, `{"output_tokens":7}`, `{"output_tokens":7}`},
		{`{"output_tokens":9}`, `{"output_tokens":-3}`, `{"output_tokens":9}`},
		{`{"output_tokens":9223372036854775807}`, `{"output_tokens":9223372036854775807}`, `{"output_tokens":9223372036854775807}`},
	} {
		if got := string(sumUsage([]byte(tc.a), []byte(tc.b))); got != tc.want {
			t.Errorf("%s + %s = %s, want %s", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestReproducer(t *testing.T) {
	r := reproducer{want: "The quick brown"}
	for _, step := range []struct {
		delta, surplus string
		ok             bool
	}{{"The qu", "", true}, {"ick", "", true}, {" brown fox", " fox", true}, {" jumps", " jumps", true}} {
		s, ok := r.feed(step.delta)
		if s != step.surplus || ok != step.ok {
			t.Fatalf("feed(%q) = %q, %v", step.delta, s, ok)
		}
	}
	r = reproducer{want: "The quick brown"}
	if _, ok := r.feed("The slow"); ok {
		t.Fatal("a contradiction was accepted")
	}
}

// sliceSource yields pre-rendered events, then EOF.
type sliceSource struct{ evs []sse.Event }

func (s *sliceSource) Next() (sse.Event, error) {
	if len(s.evs) == 0 {
		return sse.Event{}, io.EOF
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

// discard is a responder whose stream goes nowhere.
type discard struct{}

func (discard) fail(*clientRequest, *apierr.Error, failKind)   {}
func (discard) relay(*clientRequest, int, http.Header, []byte) {}
func (discard) commit(http.Header) eventSink                   { return discardSink{} }

// BenchmarkPumpContinuationArmed: the gateway's own cost per event of a
// healthy 2000-delta stream (no network: pre-rendered events into a sink
// that discards them), with the continuation armed (the stall bound resumed
// and paused around every read) and off, interleaved stream by stream so
// the machine's load falls on both alike.
func BenchmarkPumpContinuationArmed(b *testing.B) {
	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: "http://127.0.0.1:1/v1"}}, upstream.Options{})
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Options{Pool: pool})
	if err != nil {
		b.Fatal(err)
	}
	raw := upstreamtest.ResponsesEvents("resp_1", "m", strings.TrimSpace(strings.Repeat("word ", 2000)), 2000)
	stream := func(armed bool) time.Duration {
		evs := make([]sse.Event, len(raw))
		for k, e := range raw {
			evs[k] = sse.Event{Data: append([]byte(nil), e...)}
		}
		req := &clientRequest{ep: responsesEndpoint, stream: true, model: "m", body: []byte(`{"model":"m","input":"hi","stream":true}`)}
		cs := s.newClientStream(context.Background(), discard{}, req, time.Now())
		defer cs.close()
		src := &sliceSource{evs: evs}
		ctx := context.Background()
		p := &pump{s: s, cs: cs, ctx: ctx, upCtx: ctx, req: req, u: pool.Get("A"), src: src, surface: cs.surface, replayable: true}
		if armed {
			p.armed = true
			p.stall = newIdleTimer(60*time.Second, func() {})
			defer p.stall.stop()
		}
		first, _ := src.Next()
		start := time.Now()
		if end := p.run(first, nil); end.reason != reasonCompleted {
			b.Fatalf("ended %+v", end)
		}
		return time.Since(start)
	}
	var tArmed, tOff time.Duration
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			tArmed += stream(true)
			tOff += stream(false)
		} else {
			tOff += stream(false)
			tArmed += stream(true)
		}
	}
	n := float64(b.N * len(raw))
	b.ReportMetric(float64(tArmed.Nanoseconds())/n, "armed-ns/event")
	b.ReportMetric(float64(tOff.Nanoseconds())/n, "off-ns/event")
	b.ReportMetric(float64(tArmed-tOff)/n, "overhead-ns/event")
}

// eventWithWait puts the wait in the message the pump reads from each
// error-shaped event (errorField's order), once, and leaves alone a message
// that already says a wait or an event without a message.
func TestEventWithWait(t *testing.T) {
	for _, c := range []struct {
		name, data, path, want string
	}{
		{"error frame", `{"type":"error","status":429,"error":{"code":"rate_limit_exceeded","message":"slow down"}}`,
			"error.message", "slow down; please try again in 2s"},
		{"bare error event", `{"type":"error","code":"rate_limit_exceeded","message":"slow down"}`,
			"message", "slow down; please try again in 2s"},
		{"response.failed", `{"type":"response.failed","response":{"error":{"code":"rate_limit_exceeded","message":"slow down"}}}`,
			"response.error.message", "slow down; please try again in 2s"},
		{"a wait already said", `{"type":"error","error":{"message":"Please try again in 7s."}}`,
			"error.message", "Please try again in 7s."},
		{"no message", `{"type":"error","error":{"code":"rate_limit_exceeded"}}`, "error.message", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := eventWithWait(sse.Event{Data: []byte(c.data)}, 2*time.Second)
			if m := gjson.GetBytes(got.Data, c.path).String(); m != c.want {
				t.Fatalf("%s = %q, want %q (event %s)", c.path, m, c.want, got.Data)
			}
		})
	}
	got := eventWithWait(sse.Event{Error: []byte(`{"message":"slow down"}`)}, 2*time.Second)
	if m := gjson.GetBytes(got.Error, "message").String(); m != "slow down; please try again in 2s" {
		t.Fatalf("an error: field's message %q", m)
	}
}

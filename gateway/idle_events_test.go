package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// idleTestTimeout is timeouts.idle in these tests; idleTestGap, the gap
// between an upstream's frames, is far shorter, so that counting bytes
// would never see the upstream silent, while the frames that are not
// complete events last far longer than idleTestTimeout.
const (
	idleTestTimeout = 300 * time.Millisecond
	idleTestGap     = 50 * time.Millisecond
)

// keepalives is n SSE keepalive comments, one frame each.
func keepalives(n int) []upstreamtest.Frame {
	fs := make([]upstreamtest.Frame, n)
	for i := range fs {
		fs[i] = upstreamtest.RawFrame([]byte(": keepalive\n\n"))
	}
	return fs
}

// trickled is frame f cut into n frames, so that its event is complete
// only with the last one.
func trickled(f upstreamtest.Frame, n int) []upstreamtest.Frame {
	raw, fs := f.Raw, make([]upstreamtest.Frame, 0, n)
	size := (len(raw) + n - 1) / n
	for len(raw) > 0 {
		k := min(size, len(raw))
		fs = append(fs, upstreamtest.RawFrame(raw[:k]))
		raw = raw[k:]
	}
	return fs
}

// deltaText is the text of a Responses stream's output_text deltas.
func deltaText(evs []eventLike) string {
	var text strings.Builder
	for _, ev := range evs {
		if ev.typ == "response.output_text.delta" {
			text.WriteString(gjson.GetBytes(ev.data, "delta").Str)
		}
	}
	return text.String()
}

// An upstream that sends its headers and then only keepalive comments, or
// its first event a few bytes at a time, sends no event: it is a silent
// target once timeouts.idle has passed without a complete event (README
// "Failover and replay"), and the route's next target answers, however
// busy the connection is with bytes that are not events.
func TestKeepalivesAndPartialEventsAreSilenceBeforeContent(t *testing.T) {
	late := upstreamtest.ResponsesStream(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "Hello from late A", 3)
	lateChat := upstreamtest.ChatStream(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "Hello from late A", 3)
	tests := []struct {
		name     string
		protocol string
		script   upstreamtest.Script
	}{
		{"keepalives", "responses", upstreamtest.Script{Frames: append(keepalives(30), late...), Gap: idleTestGap}},
		{"trickled first event", "responses", upstreamtest.Script{Frames: append(trickled(late[0], 30), late[1:]...), Gap: idleTestGap}},
		{"keepalives from a Chat upstream", "chat", upstreamtest.Script{ChatFrames: append(keepalives(30), lateChat...), Gap: idleTestGap}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := routedPairHarness(t, map[string]string{"A": tt.protocol, "B": tt.protocol}, gateway.Options{IdleTimeout: idleTestTimeout})
			h.ups["A"].Enqueue(tt.script)
			_, evs := h.responsesStream(`{"model":"cm","input":"hi","stream":true}`)
			if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
				t.Fatalf("terminal %s %s, want B's response.completed", last.typ, last.code)
			}
			if text := deltaText(evs); text != "Hello from B" {
				t.Fatalf("the client got %q, want B's answer: A was silent past timeouts.idle", text)
			}
			if m := h.metrics(); !strings.Contains(m, `sluice_upstream_attempts_total{outcome="idle_timeout",upstream="A"} 1`) {
				t.Fatalf("no idle_timeout attempt counted for A:\n%s", grepLines(m, "sluice_upstream_attempts_total"))
			}
		})
	}
}

// After content, an upstream that sends only keepalives for longer than
// timeouts.idle (the route has no stall bound) has stalled: the stream is
// continued on the route's next target (README "Continuation"), not held
// open by the comments until the upstream resumes.
func TestKeepalivesAfterContentAreAStall(t *testing.T) {
	h := contHarnessStall(t, "", 0, harnessConfig{opts: gateway.Options{IdleTimeout: idleTestTimeout}})
	// P says "The quick brown", then only keepalives, then would finish
	// with its own words; B continues from P's text.
	own := upstreamtest.ResponsesStream(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "The quick brown cat sleeps", 5)
	var frames []upstreamtest.Frame
	deltas := 0
	for _, f := range own {
		frames = append(frames, f)
		if strings.Contains(string(f.Raw), "response.output_text.delta") {
			if deltas++; deltas == 3 {
				frames = append(frames, keepalives(30)...)
			}
		}
	}
	h.ups["P"].Enqueue(upstreamtest.Script{Frames: frames, Gap: idleTestGap})
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 9))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s %s, want the continued response.completed", last.typ, last.code)
	}
	if text := deltaText(evs); text != fullAnswer {
		t.Fatalf("the client got %q, want %q: P's text continued by B", text, fullAnswer)
	}
	if n := h.ups["B"].RequestCount(); n != 1 {
		t.Fatalf("B got %d requests, want the continuation", n)
	}
}

// A WebSocket upstream's blank text frames are no events either: they do
// not restart timeouts.idle, and the route's next target answers.
func TestBlankFramesFromAWebSocketUpstreamAreSilence(t *testing.T) {
	opts := gateway.Options{IdleTimeout: idleTestTimeout,
		Routes: []gateway.Route{{Models: []string{"cm"}, Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}}}}
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		transport: map[string]string{"A": "websocket"}, opts: opts})
	blank := make([]upstreamtest.Frame, 30)
	for i := range blank {
		blank[i] = upstreamtest.Frame{Raw: []byte(": keepalive\n\n"), WS: []byte(" ")}
	}
	late := upstreamtest.ResponsesStream(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "Hello from late A", 3)
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: append(blank, late...), Gap: idleTestGap})
	_, evs := h.responsesStream(`{"model":"cm","input":"hi","stream":true}`)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s %s, want B's response.completed", last.typ, last.code)
	}
	if text := deltaText(evs); text == "Hello from late A" {
		t.Fatalf("the client got A's late answer: blank frames kept A alive past timeouts.idle")
	}
}

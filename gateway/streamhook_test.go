package gateway_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestStreamEventHookRedactsLiveStream: a live SSE stream through the
// gateway with the WAT stream_event fixture loaded in the real plugin
// runtime. The fixture replaces "secret" in text deltas; the host keeps
// every later form of the text (output_text.done, content_part.done,
// output_item.done and the upstream's response.completed) consistent with
// what the client was sent.
func TestStreamEventHookRedactsLiveStream(t *testing.T) {
	rt := moduleFileRuntime(t, "stream_redact.wasm", filepath.Join("..", "plugins", "testdata", "stream_redact.wasm"))
	if !rt.StreamHookActive() {
		t.Fatal("the fixture's stream_event hook is not active")
	}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})
	h.ups["A"].Enqueue(upstreamtest.Answer("the secret plan", 3))

	_, evs := h.streamEvents("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
	checkRedacted(t, evs)
	if !strings.Contains(string(h.ups["A"].Requests()[0].Body), `"input":"hi"`) {
		t.Fatal("upstream request changed")
	}
}

// checkRedacted checks a stream whose hook replaced "secret" with
// "[redacted]" in "the secret plan": every event is valid JSON, none says
// secret, numbering has no gap, and the deltas, the done text and the
// terminal output agree.
func checkRedacted(t *testing.T, evs []sse.Event) {
	t.Helper()
	var deltas strings.Builder
	var completed gjson.Result
	for k, ev := range evs {
		if strings.Contains(string(ev.Data), "secret") {
			t.Errorf("event %d still says secret: %s", k, ev.Data)
		}
		if !gjson.ValidBytes(ev.Data) { // gjson reads past some breakage: check first
			t.Errorf("event %d is not valid JSON: %s", k, ev.Data)
		}
		d := gjson.ParseBytes(ev.Data)
		if got := d.Get("sequence_number").Int(); got != int64(k) {
			t.Errorf("event %d numbered %d", k, got)
		}
		switch d.Get("type").Str {
		case "response.output_text.delta":
			deltas.WriteString(d.Get("delta").Str)
		case "response.output_text.done":
			if got := d.Get("text").Str; got != "the [redacted] plan" {
				t.Errorf("output_text.done text %q", got)
			}
		case "response.completed":
			completed = d
		}
	}
	if got := deltas.String(); got != "the [redacted] plan" {
		t.Fatalf("client deltas %q", got)
	}
	if got := completed.Get("response.output.0.content.0.text").Str; got != "the [redacted] plan" {
		t.Fatalf("response.completed output text %q (%s)", got, completed.Raw)
	}
}

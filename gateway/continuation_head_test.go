package gateway_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// twoModelHarness is P (serving gpt-fake-1) then B (serving gpt-fake-2)
// behind the route "m", continued after content (a short stall bound); the
// protocols as given (absent: responses).
func twoModelHarness(t *testing.T, protocol map[string]string) *harness {
	t.Helper()
	return newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}},
		protocol:  protocol,
		opts: gateway.Options{Routes: []gateway.Route{{Models: []string{"m"},
			Targets: []gateway.RouteTarget{{Upstream: "P", Model: "gpt-fake-1"}, {Upstream: "B", Model: "gpt-fake-2"}},
			Stall:   300 * time.Millisecond, Continuation: gateway.ContinuationAuto}}},
	})
}

// checkChargedToTheServingModel checks that the one request was charged
// under the model that served its end (B's gpt-fake-2), not the one the
// client was shown: the usage metrics price what served.
func checkChargedToTheServingModel(t *testing.T, h *harness) {
	t.Helper()
	waitAccessLines(t, h, 1)
	lines := grepLines(h.metrics(), "sluice_usage_requests_total{")
	if !strings.Contains(lines, `model="gpt-fake-2"`) || strings.Contains(lines, `model="gpt-fake-1"`) {
		t.Fatalf("usage charged as:\n%s\nwant the serving model gpt-fake-2", lines)
	}
}

// withoutFingerprint drops system_fingerprint from chunk frames.
func withoutFingerprint(fs []upstreamtest.Frame) []upstreamtest.Frame {
	out := make([]upstreamtest.Frame, len(fs))
	for i, f := range fs {
		out[i] = upstreamtest.RawFrame(bytes.ReplaceAll(f.Raw, []byte(`"system_fingerprint":"fp_upstreamtest",`), nil))
	}
	return out
}

// A Chat stream continued on a target whose chunks name another completion
// (id), time (created), model and system_fingerprint: every chunk the
// client gets carries the first chunk's, as one completion's chunks do on
// OpenAI (README "Continuation": one completion), and none where the first
// chunk had none. The usage is still charged to the model that served.
func TestContinuedChatStreamKeepsTheCompletionHead(t *testing.T) {
	const created = upstreamtest.FixedCreatedAt
	pFrames := upstreamtest.ChatSpec{ID: "chatcmpl-P", Model: upstreamtest.PlaceholderModel, Created: created,
		Text: fullAnswer, Deltas: 9}.Frames()[:4] // the role chunk, "The quick brown"
	bFrames := upstreamtest.ChatSpec{ID: "chatcmpl-B", Model: upstreamtest.PlaceholderModel, Created: created + 7,
		Text: strings.TrimPrefix(fullAnswer, sentPart), Deltas: 3, Usage: true}.Frames()
	for i, f := range bFrames {
		bFrames[i] = upstreamtest.RawFrame(bytes.ReplaceAll(f.Raw, []byte("fp_upstreamtest"), []byte("fp_other")))
	}
	for _, tc := range []struct {
		name        string
		p           upstreamtest.Script
		fingerprint string // what every chunk must carry; "" none
	}{
		{"cut", upstreamtest.Script{ChatFrames: pFrames, End: upstreamtest.EndCut}, `"fp_upstreamtest"`},
		{"stall", upstreamtest.Script{ChatFrames: pFrames, End: upstreamtest.EndHang}, `"fp_upstreamtest"`},
		{"cut, no fingerprint first", upstreamtest.Script{ChatFrames: withoutFingerprint(pFrames), End: upstreamtest.EndCut}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := twoModelHarness(t, map[string]string{"P": "chat", "B": "chat"})
			h.ups["P"].Enqueue(tc.p)
			h.ups["B"].Enqueue(upstreamtest.Script{ChatFrames: bFrames})
			resp, evs := h.streamEvents("/v1/chat/completions",
				`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			text, chunks := "", 0
			for _, ev := range evs {
				if string(ev.Data) == "[DONE]" {
					continue
				}
				chunks++
				c := gjson.ParseBytes(ev.Data)
				if c.Get("id").Str != "chatcmpl-P" || c.Get("created").Int() != created || c.Get("model").Str != "gpt-fake-1" ||
					c.Get("system_fingerprint").Raw != tc.fingerprint {
					t.Fatalf("chunk %s; every chunk should carry id chatcmpl-P, created %d, model gpt-fake-1, system_fingerprint %q",
						ev.Data, created, tc.fingerprint)
				}
				text += c.Get("choices.0.delta.content").Str
			}
			if text != fullAnswer || h.ups["B"].RequestCount() != 1 || chunks < 5 {
				t.Fatalf("client got %q in %d chunks; B called %d times", text, chunks, h.ups["B"].RequestCount())
			}
			checkChargedToTheServingModel(t, h)
		})
	}
}

// A Responses stream continued on a target serving another model: its
// response.created, in_progress and the spliced terminal event name the
// model the client was first shown, whatever the continuing target's
// Response says, on a Responses and on a Chat continuing upstream. The
// usage is still charged to the model that served.
func TestContinuedResponsesStreamKeepsTheModelShown(t *testing.T) {
	for _, protocol := range []string{"responses", "chat"} {
		t.Run(protocol, func(t *testing.T) {
			h := twoModelHarness(t, map[string]string{"B": protocol})
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
			_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
			last := assertOneTerminal(t, evs)
			if last.typ != "response.completed" || gjson.GetBytes(last.data, "response.output.0.content.0.text").Str != fullAnswer {
				t.Fatalf("terminal %s %s", last.typ, last.data)
			}
			if got := gjson.GetBytes(h.ups["B"].Requests()[0].Body, "model").Str; got != "gpt-fake-2" {
				t.Fatalf("B was asked for %q", got)
			}
			lifecycle := 0
			for _, ev := range evs {
				r := gjson.GetBytes(ev.data, "response")
				if !r.Exists() {
					continue
				}
				lifecycle++
				if r.Get("model").Str != "gpt-fake-1" {
					t.Fatalf("%s names model %s; the client was first shown gpt-fake-1", ev.typ, r.Get("model").Raw)
				}
			}
			if lifecycle != 3 {
				t.Fatalf("%d events carry a Response; want created, in_progress, completed", lifecycle)
			}
			checkChargedToTheServingModel(t, h)
		})
	}
}

package gateway_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// lifecycleThen is an upstream stream that sends response.created and
// response.in_progress, then frames.
func lifecycleThen(frames ...upstreamtest.Frame) []upstreamtest.Frame {
	return append(upstreamtest.ResponsesStream("resp_P", "fast", "unused", 1)[:2:2], frames...)
}

// TestRouteChargesFailureBeforeContent: a stream that fails before its
// first content event (after the held lifecycle events) is replayed on the
// next target and charged to the one that failed, as the same failure as an
// HTTP status or after content is (README "Routes and fallbacks": the same
// failures as the stream's first event cool the target down too; 3
// consecutive failures open its circuit). A client error is the request's
// own and costs the target nothing.
func TestRouteChargesFailureBeforeContent(t *testing.T) {
	garbage := upstreamtest.RawFrame([]byte("data: not json{{\n\n"))
	serverError := upstreamtest.Failure(upstreamtest.ShapeFailed, http.StatusInternalServerError,
		upstreamtest.ErrorBody("The server had an error while processing your request.", "server_error", "server_error", ""))
	for _, tc := range []struct {
		name   string
		script upstreamtest.Script
	}{
		{"cut after the lifecycle events", upstreamtest.Script{Frames: lifecycleThen(), End: upstreamtest.EndCut}},
		{"garbled after the lifecycle events", upstreamtest.Script{Frames: lifecycleThen(garbage, garbage, garbage)}},
		{"server_error as the first event", serverError.AfterCreated()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{
				upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}},
				opts: gateway.Options{Routes: []gateway.Route{
					{Models: []string{"fast"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B", Model: "gpt-4.1"}}},
				}},
			})
			h.ups["P"].Enqueue(tc.script, tc.script, tc.script)
			for i := range 3 {
				if text := streamedText(t, h, "fast"); text != "Hello from B" {
					t.Fatalf("request %d: client got %q, want B's answer", i, text)
				}
			}
			// A target is charged once its request is done with it, which
			// may be just after the client read its answer.
			h.waitMetric(`sluice_target_failures_total{class="server_error",model="fast",upstream="P"} 3`)
			if tg, _ := h.target("P", "fast"); tg.Circuit != "open" || tg.Failures != 3 || !strings.Contains(tg.LastFailure, "server_error") {
				t.Fatalf("after 3 failures before content: %+v", tg)
			}
			if m := h.metrics(); !strings.Contains(m, `sluice_target_failures_total{class="server_error",model="fast",upstream="P"} 3`) {
				t.Fatalf("failures not charged:\n%s", grep(m, "sluice_target"))
			}
			if text := streamedText(t, h, "fast"); text != "Hello from B" || h.ups["P"].RequestCount() != 3 {
				t.Fatalf("open circuit: client got %q, P called %d times", text, h.ups["P"].RequestCount())
			}
		})
	}

	// Failures about the request, which another target would refuse the
	// same way, cost the target nothing: a 4xx error event, and a
	// response.failed whose code is the request's (OpenAI's content
	// refusals carry no status).
	clientFaults := map[string]upstreamtest.Script{
		"client error as the first event": upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusBadRequest,
			upstreamtest.ErrorBody("Invalid value for 'temperature'.", "invalid_request_error", "invalid_value", "temperature")).AfterCreated(),
		"response.failed with a code about the prompt": upstreamtest.Failure(upstreamtest.ShapeFailed, 0,
			upstreamtest.ErrorBody("Invalid prompt: your prompt was flagged as potentially violating our usage policy.", "", "invalid_prompt", "")).AfterCreated(),
	}
	for name, invalid := range clientFaults {
		t.Run(name, func(t *testing.T) {
			clientFault(t, invalid)
		})
	}
}

// clientFault checks that a target answering three requests with the
// failure invalid, a fault of the request's, is neither skipped nor
// charged.
func clientFault(t *testing.T, invalid upstreamtest.Script) {
	t.Helper()
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}},
		opts: gateway.Options{Routes: []gateway.Route{
			{Models: []string{"fast"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B", Model: "gpt-4.1"}}},
		}},
	})
	h.ups["P"].Enqueue(invalid, invalid, invalid)
	for range 3 {
		streamedText(t, h, "fast")
	}
	if text := streamedText(t, h, "fast"); text != "Hello from P" {
		t.Fatalf("after 3 client errors P is skipped: client got %q", text)
	}
	if tg, listed := h.target("P", "fast"); listed && (tg.Circuit != "closed" || tg.Failures != 0) {
		t.Fatalf("client errors charged to P: %+v", tg)
	}
	if m := h.metrics(); strings.Contains(m, `sluice_target_failures_total{`) {
		t.Fatalf("client errors counted as target failures:\n%s", grep(m, "sluice_target_failures"))
	}
}

// streamedText sends a Responses stream request for model and returns the
// text the client was streamed.
func streamedText(t *testing.T, h *harness, model string) string {
	t.Helper()
	_, evs := h.responsesStream(`{"model":"` + model + `","input":"hi","stream":true}`)
	var text strings.Builder
	for _, ev := range evs {
		if ev.typ == "response.output_text.delta" {
			text.WriteString(gjson.GetBytes(ev.data, "delta").Str)
		}
	}
	return text.String()
}

// TestRouteNoTargetUsableAnswersStatus: when every target's circuit is
// open, no upstream is contacted and the client was sent nothing, so a
// Responses stream gets the HTTP 503 with Retry-After and the JSON error,
// as a Chat stream does (README "Failover and replay"), not a 200 whose
// response.failed SDKs and Codex retry at once.
func TestRouteNoTargetUsableAnswersStatus(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}},
		opts: gateway.Options{Routes: []gateway.Route{
			{Models: []string{"fast"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B", Model: "gpt-4.1"}}},
		}},
	})
	overloaded := upstreamtest.Status5xx(http.StatusServiceUnavailable)
	for _, name := range []string{"P", "B"} {
		h.ups[name].Enqueue(overloaded, overloaded, overloaded)
	}
	for i := range 3 { // both targets fail: their circuits open
		resp := h.post("/v1/responses", `{"model":"fast","input":"hi"}`)
		resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			t.Fatalf("request %d served", i)
		}
	}
	for _, name := range []string{"P", "B"} {
		model := map[string]string{"P": "fast", "B": "gpt-4.1"}[name]
		if tg, _ := h.target(name, model); tg.Circuit != "open" {
			t.Fatalf("%s's circuit: %+v", name, tg)
		}
	}
	for _, tc := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"fast","input":"hi","stream":true}`},
		{"/v1/chat/completions", `{"model":"fast","messages":[{"role":"user","content":"hi"}],"stream":true}`},
	} {
		resp := h.post(tc.path, tc.body)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		retryAfter, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != http.StatusServiceUnavailable || retryAfter <= 0 ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
			gjson.GetBytes(body, "error.code").Str != "upstream_unavailable" || gjson.GetBytes(body, "error.type").Str == "" {
			t.Fatalf("%s with every circuit open: %d Retry-After=%q %s", tc.path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	if p, b := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); p != 3 || b != 3 {
		t.Fatalf("open circuits called: P %d, B %d times", p, b)
	}
}

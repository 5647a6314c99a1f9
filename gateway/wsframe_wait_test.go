package gateway_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// wsRateLimitFrame is a WebSocket upstream's 429 error frame whose only
// wait is in its "headers" (name: value, as OpenAI's frames carry them):
// its message names no wait.
func wsRateLimitFrame(name, value string) upstreamtest.Script {
	h := http.Header{}
	h.Set(name, value)
	return upstreamtest.Script{Status: http.StatusTooManyRequests, Header: h,
		Body: upstreamtest.ErrorBody("Rate limit reached.", "requests", "rate_limit_exceeded", "")}
}

// A WebSocket upstream's 429 frame cools the target down for the wait its
// headers ask for, not the hintless default (5s), whichever client
// surface sent the request: the requests during the cooldown are told
// that wait.
func TestWebSocketFrameRetryAfterCoolsTheTargetDown(t *testing.T) {
	refuse := map[string]func(h *harness){
		"SSE client": func(h *harness) {
			_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
			if last := assertOneTerminal(t, evs); last.typ == "response.completed" {
				t.Fatalf("the 429 frame's request completed: %s", last.data)
			}
		},
		"WebSocket client": func(h *harness) {
			if evs := h.dialWS(nil).turn(createFrame("")); len(evs) != 1 || evs[0].typ != "error" {
				t.Fatalf("the 429 frame's request: %d frames, first %s", len(evs), evs[0].data)
			}
		},
	}
	for name, send := range refuse {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
			h.ups["A"].Enqueue(wsRateLimitFrame("Retry-After", "40"))
			send(h)
			a := postForRetry(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
			if a.status != http.StatusTooManyRequests || a.code != "rate_limit_exceeded" {
				t.Fatalf("during the cooldown: got %d %s, want 429 rate_limit_exceeded", a.status, a.body)
			}
			// 40s less the time this test took, never the 5s (±20%) default.
			checkRetryAfter(t, "during the cooldown", a, 30, 40)
			if n := h.ups["A"].RequestCount(); n != 1 {
				t.Fatalf("the cooling upstream was called %d times, want once", n)
			}
		})
	}
}

// A client WebSocket gets a WebSocket upstream's 429 frame with the wait
// of its headers, in OpenAI's frame form (README "What it promises").
func TestWebSocketFrameRetryAfterReachesTheWebSocketClient(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
	h.ups["A"].Enqueue(wsRateLimitFrame("Retry-After", "40"))
	evs := h.dialWS(nil).turn(createFrame(""))
	var got struct {
		Status  int
		Error   struct{ Code string }
		Headers map[string]string
	}
	if len(evs) != 1 || json.Unmarshal(evs[0].data, &got) != nil {
		t.Fatalf("%d frames, first %s", len(evs), evs[0].data)
	}
	if got.Status != http.StatusTooManyRequests || got.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("error frame %s, want the upstream's 429 rate_limit_exceeded", evs[0].data)
	}
	secs, err := strconv.Atoi(got.Headers["retry-after"])
	if err != nil || secs < 30 || secs > 40 || got.Headers["retry-after-ms"] == "" {
		t.Fatalf("error frame %s, want the upstream's 40s wait in its headers", evs[0].data)
	}
}

// A WebSocket upstream's 429 frame whose headers ask for a wait within
// retry.max_wait is waited out and retried on the same target, as the
// same 429 from an HTTP upstream is (README "Routes and fallbacks").
func TestWebSocketFrameShortWaitRetriesTheSameTarget(t *testing.T) {
	for _, transport := range []string{"http", "websocket"} {
		t.Run("upstream over "+transport, func(t *testing.T) {
			h := newHarness(t, harnessConfig{transport: map[string]string{"A": transport}})
			t.Run("SSE client", func(t *testing.T) {
				h.ups["A"].Enqueue(wsRateLimitFrame("Retry-After-Ms", "1"))
				before := h.ups["A"].RequestCount()
				_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
				if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
					t.Fatalf("terminal %s: %s", last.typ, last.data)
				}
				if n := h.ups["A"].RequestCount() - before; n != 2 {
					t.Fatalf("%d upstream requests, want the 429 and its retry", n)
				}
			})
			t.Run("WebSocket client", func(t *testing.T) {
				h.ups["A"].Enqueue(wsRateLimitFrame("Retry-After-Ms", "1"))
				before := h.ups["A"].RequestCount()
				evs := h.dialWS(nil).turn(createFrame(""))
				if last := evs[len(evs)-1]; last.typ != "response.completed" {
					t.Fatalf("terminal %s: %s", last.typ, last.data)
				}
				if n := h.ups["A"].RequestCount() - before; n != 2 {
					t.Fatalf("%d upstream requests, want the 429 and its retry", n)
				}
			})
		})
	}
}

// A 429 error frame that follows the upstream's response.created (the
// stream path, not the refusal of the response.create) is read with its
// headers too: the target cools down for their wait.
func TestWebSocketFrameRetryAfterAfterResponseCreated(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
	created := upstreamtest.ResponsesStream(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "x", 1)[0]
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: []upstreamtest.Frame{created, {WS: []byte(
		`{"type":"error","status":429,"error":{"type":"requests","code":"rate_limit_exceeded","message":"Rate limit reached.","param":null},"headers":{"retry-after":"40"}}`)}}})
	_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if last := assertOneTerminal(t, evs); last.typ == "response.completed" {
		t.Fatalf("the 429 frame's request completed: %s", last.data)
	}
	a := postForRetry(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
	if a.status != http.StatusTooManyRequests || a.code != "rate_limit_exceeded" {
		t.Fatalf("during the cooldown: got %d %s, want 429 rate_limit_exceeded", a.status, a.body)
	}
	checkRetryAfter(t, "during the cooldown", a, 30, 40)
}

// Only streaming requests use a transport: websocket upstream's socket
// (README "WebSocket"): a non-streaming one, a session's follow-up
// included, is an HTTP POST /v1/responses to the same upstream.
func TestWebSocketUpstreamJSONRequestGoesOverHTTP(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
	if _, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`); assertOneTerminal(t, evs).typ != "response.completed" {
		t.Fatal("the streaming request did not complete")
	}
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the non-streaming request: HTTP %d", resp.StatusCode)
	}
	reqs := h.ups["A"].Requests()
	if len(reqs) != 2 || !reqs[0].WebSocket || reqs[1].WebSocket || reqs[1].Method != http.MethodPost {
		t.Fatalf("upstream requests %+v, want the stream on the socket and the JSON request as an HTTP POST", reqs)
	}
}

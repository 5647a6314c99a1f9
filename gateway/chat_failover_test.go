package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// routedPairHarness is a gateway whose route "cm" tries A, then B; protocol
// names the upstreams' protocols (nil: responses).
func routedPairHarness(t *testing.T, protocol map[string]string, opts gateway.Options) *harness {
	t.Helper()
	opts.Routes = []gateway.Route{{Models: []string{"cm"}, Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}}}
	return newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}, protocol: protocol, opts: opts})
}

// faultEventBytes is limits.max_event_bytes for the faults of
// beforeFirstEvent: its oversized event is larger.
const faultEventBytes = 4096

// beforeFirstEvent are transport faults of a stream before its first
// event: a close right after the headers, events that cannot be read, a
// first event larger than faultEventBytes, and a [DONE] with nothing
// before it (an answer that ended empty).
func beforeFirstEvent() map[string]upstreamtest.Script {
	garbage := upstreamtest.RawFrame([]byte("data: not json{{\n\n"))
	garbled := []upstreamtest.Frame{garbage, garbage, garbage}
	big := []upstreamtest.Frame{upstreamtest.RawFrame([]byte(`data: {"pad":"` + strings.Repeat("x", 2*faultEventBytes) + "\"}\n\n"))}
	return map[string]upstreamtest.Script{
		"cut":      upstreamtest.CutAfter(0),
		"garbage":  {Frames: garbled, ChatFrames: garbled},
		"oversize": {Frames: big, ChatFrames: big},
		"done":     upstreamtest.DoneOnly(),
	}
}

// A routed Chat stream whose last target fails before its first event,
// after the replay was spent on the first, gets the HTTP status and JSON
// error: nothing reached the client (README "Failover and replay": "No
// upstream left: … the HTTP status and JSON error otherwise, Chat streams
// included").
func TestChatStreamFaultOnTheLastTargetGetsTheStatus(t *testing.T) {
	for name, fault := range beforeFirstEvent() {
		t.Run(name, func(t *testing.T) {
			h := routedPairHarness(t, nil, gateway.Options{MaxEventBytes: faultEventBytes})
			h.ups["A"].Enqueue(fault)
			h.ups["B"].Enqueue(fault)
			resp := h.post("/v1/chat/completions", `{"model":"cm","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			e := readError(t, resp)
			if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
				deref(e.Error.Code) != "stream_incomplete" {
				t.Fatalf("%d %s %+v, want 502 application/json stream_incomplete", resp.StatusCode, resp.Header.Get("Content-Type"), e)
			}
			if a, b := h.ups["A"].RequestCount(), h.ups["B"].RequestCount(); a != 1 || b != 1 {
				t.Fatalf("A got %d requests, B %d; want one each (one replay)", a, b)
			}
		})
	}
}

// The same failure on a Responses stream keeps its documented answer: the
// stream opens with response.created and ends with response.failed.
func TestResponsesStreamFaultOnTheLastTargetFailsTheStream(t *testing.T) {
	for name, fault := range beforeFirstEvent() {
		t.Run(name, func(t *testing.T) {
			h := routedPairHarness(t, nil, gateway.Options{MaxEventBytes: faultEventBytes})
			h.ups["A"].Enqueue(fault)
			h.ups["B"].Enqueue(fault)
			resp, evs := h.streamEvents("/v1/responses", `{"model":"cm","stream":true,"input":"hi"}`)
			if resp.StatusCode != http.StatusOK || len(evs) != 2 || eventType(evs[0]) != "response.created" || eventType(evs[1]) != "response.failed" {
				var types []string
				for _, ev := range evs {
					types = append(types, eventType(ev))
				}
				t.Fatalf("%d %v, want 200 with response.created then response.failed", resp.StatusCode, types)
			}
			if a, b := h.ups["A"].RequestCount(), h.ups["B"].RequestCount(); a != 1 || b != 1 {
				t.Fatalf("A got %d requests, B %d; want one each (one replay)", a, b)
			}
		})
	}
}

// A non-streaming answer whose body is cut or stalls after its headers is
// a transport fault before content: the next target serves the request.
func TestJSONAnswerCutAfterItsHeadersFailsOver(t *testing.T) {
	cut := upstreamtest.Script{BodyPrefix: 6, End: upstreamtest.EndCut}
	faults := map[string]struct {
		script  upstreamtest.Script
		outcome string
	}{
		"cut":   {cut, "cut_before_first_event"},
		"stall": {upstreamtest.HangMidBody(6), "idle_timeout"},
	}
	for name, f := range faults {
		for _, ep := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"model":"cm","messages":[{"role":"user","content":"hi"}]}`},
			{"/v1/responses", `{"model":"cm","input":"hi"}`},
		} {
			t.Run(name+ep.path, func(t *testing.T) {
				h := routedPairHarness(t, nil, gateway.Options{IdleTimeout: 200 * time.Millisecond})
				h.ups["A"].Enqueue(f.script)
				resp, body := postWithin(t, h, 30*time.Second, ep.path, ep.body)
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Hello from B") {
					t.Fatalf("%d %s, want B's answer", resp.StatusCode, body)
				}
				if a, b := h.ups["A"].RequestCount(), h.ups["B"].RequestCount(); a != 1 || b != 1 {
					t.Fatalf("A got %d requests, B %d; want one each", a, b)
				}
				if m := h.metrics(); !strings.Contains(m, `sluice_upstream_attempts_total{outcome="`+f.outcome+`",upstream="A"} 1`) {
					t.Fatalf("no %s attempt counted for A:\n%s", f.outcome, grepLines(m, "sluice_upstream_attempts_total"))
				}
			})
		}
	}
}

// chatCompletionAnswer is a whole chat.completion: text, two tool calls
// and usage.
const chatCompletionAnswer = `{"id":"chatcmpl-json","object":"chat.completion","created":1700000000,"model":"llama-x",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"Checking.","tool_calls":[` +
	`{"id":"call_1","type":"function","function":{"name":"f0","arguments":"{\"a\":1}"}},` +
	`{"id":"call_2","type":"function","function":{"name":"f1","arguments":"{\"b\":2}"}}]},` +
	`"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`

// An upstream that answers a Chat client's stream with a whole
// chat.completion (stream:true ignored): the client gets the stream of it,
// as a Responses client does (README "Chat-Completions-only upstreams"),
// and no other target is paid for the same answer. Through a Chat upstream
// and through a Responses upstream that passes the Chat request on alike.
func TestChatStreamAnsweredWithJSONBecomesChunks(t *testing.T) {
	for _, protocol := range []string{"chat", "responses"} {
		for _, includeUsage := range []bool{true, false} {
			name := protocol + "/include_usage=" + map[bool]string{true: "true", false: "false"}[includeUsage]
			t.Run(name, func(t *testing.T) {
				h := routedPairHarness(t, map[string]string{"A": protocol, "B": protocol}, gateway.Options{})
				h.ups["A"].Enqueue(upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}},
					ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame([]byte(chatCompletionAnswer))}})
				body := `{"model":"cm","stream":true,"messages":[{"role":"user","content":"hi"}]`
				if includeUsage {
					body += `,"stream_options":{"include_usage":true}`
				}
				resp, evs := h.streamEvents("/v1/chat/completions", body+"}")
				if resp.StatusCode != http.StatusOK || len(evs) == 0 || !evs[len(evs)-1].Done {
					t.Fatalf("%d, %d events; want 200 and a stream that ends with [DONE]", resp.StatusCode, len(evs))
				}
				var role, content, finish string
				var calls []string
				usages := 0
				for _, ev := range evs[:len(evs)-1] {
					if !json.Valid(ev.Data) || gjson.GetBytes(ev.Data, "error").Exists() {
						t.Fatalf("chunk %s", ev.Data)
					}
					if u := gjson.GetBytes(ev.Data, "usage"); u.IsObject() {
						usages++
						if u.Get("total_tokens").Int() != 7 {
							t.Fatalf("usage %s", u.Raw)
						}
					}
					gjson.GetBytes(ev.Data, "choices").ForEach(func(_, ch gjson.Result) bool {
						d := ch.Get("delta")
						role += d.Get("role").Str
						content += d.Get("content").Str
						d.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
							calls = append(calls, tc.Get("index").Raw+" "+tc.Get("id").Str+" "+tc.Get("function.name").Str+" "+tc.Get("function.arguments").Str)
							return true
						})
						finish += ch.Get("finish_reason").Str
						return true
					})
				}
				wantUsages := map[bool]int{true: 1, false: 0}[includeUsage]
				if role != "assistant" || content != "Checking." || finish != "tool_calls" || usages != wantUsages ||
					strings.Join(calls, "; ") != `0 call_1 f0 {"a":1}; 1 call_2 f1 {"b":2}` {
					t.Fatalf("role %q content %q finish %q usage chunks %d (want %d) calls %q", role, content, finish, usages, wantUsages, calls)
				}
				if a, b := h.ups["A"].RequestCount(), h.ups["B"].RequestCount(); a != 1 || b != 0 {
					t.Fatalf("A got %d requests, B %d; want A's answer only", a, b)
				}
			})
		}
	}
}

// A JSON answer to a Chat stream that is no chat.completion is still not
// relayed: the next target serves the stream.
func TestChatStreamAnsweredWithOtherJSONFailsOver(t *testing.T) {
	h := routedPairHarness(t, nil, gateway.Options{})
	h.ups["A"].Enqueue(upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}},
		ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame([]byte(`{"object":"list","data":[]}`))}})
	resp := h.post("/v1/chat/completions", `{"model":"cm","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"id":"chatcmpl-B-1"`) || h.ups["B"].RequestCount() != 1 {
		t.Fatalf("%d %s, want B's stream", resp.StatusCode, raw)
	}
}

// TestRateLimitEventOnTheLastTargetIsThe429: a 429 that arrives as the
// stream's first event (an error event) on every target is answered as the
// 429 it is, with the upstream's code and type, not as 503
// upstream_unavailable: a Chat stream gets the status, a Responses stream a
// response.failed with that code (README "Failover and replay"). Each is
// the first request, the one whose failures start the cooldowns.
func TestRateLimitEventOnTheLastTargetIsThe429(t *testing.T) {
	body, _ := json.Marshal(map[string]any{"error": map[string]any{"type": "requests", "code": "rate_limit_exceeded",
		"message": "Rate limit reached. Please try again in 2s."}})
	limited := upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusTooManyRequests, body)
	limitedHarness := func() *harness {
		h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
		for _, up := range h.ups {
			up.SetDefault(limited)
		}
		return h
	}
	resp, evs := postWith(t, limitedHarness(), "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, nil)
	if resp.StatusCode != http.StatusOK || len(evs) == 0 {
		t.Fatalf("Responses stream: %d, %d events", resp.StatusCode, len(evs))
	}
	last := evs[len(evs)-1].Data
	if gjson.GetBytes(last, "type").Str != "response.failed" || gjson.GetBytes(last, "response.error.code").Str != "rate_limit_exceeded" {
		t.Fatalf("Responses stream ended with %s, want response.failed rate_limit_exceeded", last)
	}
	resp = limitedHarness().post("/v1/chat/completions", `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || gjson.GetBytes(b, "error.code").Str != "rate_limit_exceeded" ||
		gjson.GetBytes(b, "error.type").Str != "requests" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("Chat stream: %d %v %s, want 429 rate_limit_exceeded (type requests) with Retry-After", resp.StatusCode, resp.Header, b)
	}

	// A response.failed whose error has no type (the spec's has none): the
	// 429's type, then and while the target cools down, is the code, never
	// the event's own type.
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}}})
	h.ups["A"].SetDefault(upstreamtest.QuotaEvent(upstreamtest.ShapeFailed))
	if _, evs := postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, nil); len(evs) == 0 {
		t.Fatal("no events")
	}
	resp = h.post("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || gjson.GetBytes(b, "error.type").Str != "usage_limit_reached" {
		t.Fatalf("Chat JSON while the target cools down after a typeless response.failed: %d %s, want 429 typed by its code", resp.StatusCode, b)
	}
}

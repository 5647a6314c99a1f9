package gateway_test

import (
	"bytes"
	"compress/gzip"
	"context"
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

// The gateway relays a 2xx upstream answer only when it is what the client
// asked for: a JSON object within limits.max_json_depth, or an event stream
// for a stream request (SECURITY.md: upstream bodies are size-, depth- and
// shape-checked). Anything else, and any redirect, is the target's failure:
// the next target serves, or the client gets an OpenAI-shaped gateway error.

const (
	respJSONBody   = `{"model":"gpt-fake-1","input":"hi"}`
	chatJSONBody   = `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`
	chatStreamBody = `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`
)

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type unusableCase struct {
	name   string
	script upstreamtest.Script
	why    string // in the client's error message
}

// unusableJSONAnswers are answers to a non-streaming request that no client
// may get as they are.
func unusableJSONAnswers() []unusableCase {
	html := http.Header{"Content-Type": {"text/html"}}
	deep := `{"id":"resp_deep","x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`
	return []unusableCase{
		{"HTML", upstreamtest.Script{Header: html, Body: []byte("<html>hello</html>")}, `not valid JSON (Content-Type "text/html")`},
		{"truncated JSON", upstreamtest.Script{Body: []byte(`{"id":"resp_x","object":"response",`)}, "not valid JSON"},
		{"JSON array", upstreamtest.Script{Body: []byte(`[1,2,3]`)}, "the answer is an array, not a JSON object"},
		{"empty 200", upstreamtest.Script{Body: []byte{}}, "HTTP 200 with an empty body"},
		{"204", upstreamtest.Script{Status: http.StatusNoContent}, "HTTP 204 with an empty body"},
		{"deeper than max_json_depth", upstreamtest.Script{Body: []byte(deep)}, "nests deeper than 128 levels"},
		{"brotli", upstreamtest.Script{Header: http.Header{"Content-Encoding": {"br"}}, Body: []byte("\x1b\x03\x00")}, `Content-Encoding "br", which the gateway does not decode`},
		// A whole body its decoder refuses is garbled, not cut in transit:
		// not replayed as a transport fault.
		{"corrupt gzip", upstreamtest.Script{Header: http.Header{"Content-Encoding": {"gzip"}}, Body: []byte("not gzip at all")},
			"HTTP 200: the answer's body could not be decoded (Content-Encoding gzip): gzip: invalid header"},
		{"302", upstreamtest.Script{Status: http.StatusFound, Header: http.Header{"Location": {"http://127.0.0.1:1/elsewhere"}}, Body: []byte{}},
			"HTTP 302 Found instead of an answer"},
	}
}

func TestUnusableJSONAnswerIsAGatewayError(t *testing.T) {
	for _, ep := range []struct{ path, body string }{{"/v1/responses", respJSONBody}, {"/v1/chat/completions", chatJSONBody}} {
		for _, tt := range unusableJSONAnswers() {
			t.Run(ep.path+" "+tt.name, func(t *testing.T) {
				h := newHarness(t, harnessConfig{})
				h.ups["A"].Enqueue(tt.script, tt.script) // a same-target retry fails alike
				resp := h.post(ep.path, ep.body)
				if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Location") != "" {
					t.Fatalf("status %d (Location %q), want 502 and no redirect", resp.StatusCode, resp.Header.Get("Location"))
				}
				e := readError(t, resp)
				if deref(e.Error.Code) != "upstream_unavailable" || !strings.Contains(e.Error.Message, tt.why) {
					t.Fatalf("error %q %q, want upstream_unavailable saying %q", deref(e.Error.Code), e.Error.Message, tt.why)
				}
			})
		}
	}
}

func TestUnusableJSONAnswerFailsOver(t *testing.T) {
	for _, ep := range []struct{ path, body string }{{"/v1/responses", respJSONBody}, {"/v1/chat/completions", chatJSONBody}} {
		for _, tt := range unusableJSONAnswers() {
			t.Run(ep.path+" "+tt.name, func(t *testing.T) {
				h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
				h.ups["A"].Enqueue(tt.script, tt.script)
				// B looks busy, so selection tries idle A first.
				release := h.pool.Get("B").Acquire()
				defer release()
				resp := h.post(ep.path, ep.body)
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Hello from B") {
					t.Fatalf("status %d body %s, want B's answer", resp.StatusCode, body)
				}
				if h.ups["A"].RequestCount() == 0 {
					t.Fatal("A was never tried")
				}
			})
		}
	}
}

// unusableStreamAnswers are answers to a stream request that are not an
// event stream.
func unusableStreamAnswers() []unusableCase {
	asJSON := http.Header{"Content-Type": {"application/json"}}
	html := http.Header{"Content-Type": {"text/html"}}
	return []unusableCase{
		// Each endpoint gets JSON that is not its answer: a chat.completion
		// becomes the Chat stream of it (TestChatStreamAnsweredWithJSONBecomesChunks),
		// a Response its events (TestResponsesStreamAnsweredWithWholeResponse).
		{"JSON instead of SSE", upstreamtest.Script{Header: asJSON,
			Frames:     []upstreamtest.Frame{upstreamtest.RawFrame(upstreamtest.ChatCompletionJSON("chatcmpl-json", "gpt-fake-1", "json instead of sse"))},
			ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame(upstreamtest.ResponseJSON("resp_json", "gpt-fake-1", "json instead of sse"))}},
			`HTTP 200 with Content-Type "application/json" instead of an event stream`},
		{"HTML", upstreamtest.Script{Header: html,
			Frames:     []upstreamtest.Frame{upstreamtest.RawFrame([]byte("<html>hello</html>"))},
			ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame([]byte("<html>hello</html>"))}},
			`Content-Type "text/html" instead of an event stream`},
		{"event stream in corrupt gzip", upstreamtest.Script{Header: http.Header{"Content-Encoding": {"gzip"}},
			Frames:     []upstreamtest.Frame{upstreamtest.RawFrame([]byte("not gzip at all"))},
			ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame([]byte("not gzip at all"))}},
			"HTTP 200: the answer's body could not be decoded (Content-Encoding gzip): gzip: invalid header"},
		{"204", upstreamtest.Script{Status: http.StatusNoContent}, ""},
		{"302", upstreamtest.Script{Status: http.StatusFound, Header: http.Header{"Location": {"http://127.0.0.1:1/elsewhere"}}, Body: []byte{}},
			"HTTP 302 Found instead of an answer"},
	}
}

func TestStreamRequestNeverGetsAnUnusableAnswer(t *testing.T) {
	for _, tt := range unusableStreamAnswers() {
		t.Run("responses "+tt.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.ups["A"].Enqueue(tt.script, tt.script)
			resp, evs := h.responsesStream(respBody)
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || resp.Header.Get("Location") != "" {
				t.Fatalf("status %d Content-Type %q Location %q, want an event stream", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Location"))
			}
			last := assertOneTerminal(t, evs)
			if msg := gjson.GetBytes(last.data, "response.error.message").String(); last.typ != "response.failed" || last.code != "upstream_unavailable" || !strings.Contains(msg, tt.why) {
				t.Fatalf("terminal %s %q: %s; want response.failed upstream_unavailable saying %q", last.typ, last.code, last.data, tt.why)
			}
		})
		// A Chat stream that failed before anything was sent gets the
		// status and JSON error, as from OpenAI's API (README).
		t.Run("chat "+tt.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.ups["A"].Enqueue(tt.script, tt.script)
			resp := h.post("/v1/chat/completions", chatStreamBody)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			want := http.StatusBadGateway // the 204 too: no upstream left to replay the empty answer on
			if resp.StatusCode != want || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || resp.Header.Get("Location") != "" {
				t.Fatalf("status %d Content-Type %q Location %q, want %d JSON", resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Location"), want)
			}
			if gjson.GetBytes(body, "error.code").Str != "upstream_unavailable" || !strings.Contains(gjson.GetBytes(body, "error.message").Str, tt.why) {
				t.Fatalf("body %s, want upstream_unavailable saying %q", body, tt.why)
			}
		})
	}
}

func TestStreamRequestWithUnusableAnswerFailsOver(t *testing.T) {
	for _, tt := range unusableStreamAnswers() {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
			h.ups["A"].Enqueue(tt.script, tt.script)
			release := h.pool.Get("B").Acquire()
			defer release()
			_, evs := h.responsesStream(respBody)
			if last := assertOneTerminal(t, evs); last.typ != "response.completed" || !strings.Contains(string(last.data), "Hello from B") {
				t.Fatalf("terminal %s: %s, want B's answer", last.typ, last.data)
			}
			if h.ups["A"].RequestCount() == 0 {
				t.Fatal("A was never tried")
			}
		})
	}
}

func TestGzipUpstreamAnswersAreDecodedAndScrubbed(t *testing.T) {
	const secret = "sk-UPSTREAM-SECRET-KEY-42"
	gz := http.Header{"Content-Encoding": {"gzip"}}
	h := newHarness(t, harnessConfig{keys: map[string]string{"A": secret}})

	plain := upstreamtest.ResponseJSON("resp_gz", "gpt-fake-1", "gzipped")
	h.ups["A"].Enqueue(upstreamtest.Script{Header: gz, Body: gzipped(t, plain)})
	resp := h.post("/v1/responses", respJSONBody)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" || string(body) != string(plain) {
		t.Fatalf("2xx: %d Content-Encoding %q body %q, want the decoded JSON", resp.StatusCode, resp.Header.Get("Content-Encoding"), body)
	}
	if got := h.ups["A"].Requests()[0].Header.Get("Accept-Encoding"); got != "identity" {
		t.Errorf("the upstream was sent Accept-Encoding %q, want identity", got)
	}

	// An error body quoting the key: the scrubber sees the decoded bytes.
	quoted := upstreamtest.ErrorBody("bad key: you sent Bearer "+secret, "invalid_request_error", "invalid_value", "")
	h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusBadRequest, Header: gz, Body: gzipped(t, quoted)})
	resp = h.post("/v1/responses", respJSONBody)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(body), secret) || !strings.Contains(string(body), "[redacted]") || !json.Valid(body) {
		t.Fatalf("error body: %d %q, want the decoded body with the key redacted", resp.StatusCode, body)
	}

	// An event stream.
	var stream []byte
	for _, f := range upstreamtest.ResponsesStream("resp_gzs", "gpt-fake-1", "Hello gzip", 3) {
		stream = append(stream, f.Raw...)
	}
	h.ups["A"].Enqueue(upstreamtest.Script{Header: gz, Frames: []upstreamtest.Frame{upstreamtest.RawFrame(gzipped(t, stream))}})
	_, evs := h.responsesStream(respBody)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" || !strings.Contains(string(last.data), "Hello gzip") {
		t.Fatalf("stream terminal %s: %s", last.typ, last.data)
	}
}

// postWithin is harness.post bounded by d, so a gateway that hangs fails the
// test instead of stalling it.
func postWithin(t *testing.T, h *harness, d time.Duration, path, body string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading the answer: %v", path, err)
	}
	return resp, b
}

func TestStalledJSONAnswerEndsAtTheIdleTimeout(t *testing.T) {
	for _, ep := range []struct{ path, body string }{{"/v1/responses", respJSONBody}, {"/v1/chat/completions", chatJSONBody}} {
		t.Run(ep.path, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: gateway.Options{IdleTimeout: 200 * time.Millisecond}})
			h.ups["A"].Enqueue(upstreamtest.HangMidBody(10))
			resp, body := postWithin(t, h, 10*time.Second, ep.path, ep.body)
			var e apiError
			// A silent target, as a stream without its first event is: with
			// no other target, the request fails with no upstream left.
			if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != http.StatusBadGateway ||
				deref(e.Error.Code) != "upstream_unavailable" || !strings.Contains(e.Error.Message, "idle timeout: nothing within 200ms") {
				t.Fatalf("%d %s, want 502 upstream_unavailable about the silence", resp.StatusCode, body)
			}
		})
	}
}

func TestStalledErrorBodyEndsAtTheIdleTimeout(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{IdleTimeout: 200 * time.Millisecond}})
	stalled := upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusBadRequest, upstreamtest.ErrorBody("bad tool", "invalid_request_error", "invalid_value", "tools"))
	stalled.BodyPrefix, stalled.End = 12, upstreamtest.EndHang
	h.ups["A"].Enqueue(stalled)
	resp, body := postWithin(t, h, 10*time.Second, "/v1/responses", respJSONBody)
	// The 4xx passes through with what came of its body, never as a cut
	// JSON document: an OpenAI error quoting it.
	var e apiError
	if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != http.StatusBadRequest || deref(e.Error.Code) != "upstream_error" ||
		e.Error.Message != `the upstream answered HTTP 400 Bad Request with an error body that was cut short, not relayed: {"error":{"m …` {
		t.Fatalf("%d %q, want the 400 as an OpenAI error quoting the part of its body that arrived", resp.StatusCode, body)
	}
}

// wsErrorOf decodes a WebSocket error frame.
func wsErrorOf(t *testing.T, ev eventLike) (status int, code, message string) {
	t.Helper()
	var v struct {
		Status int
		Error  struct{ Code, Message string }
	}
	if err := json.Unmarshal(ev.data, &v); err != nil || ev.typ != "error" {
		t.Fatalf("not an error frame: %s", ev.data)
	}
	return v.Status, v.Error.Code, v.Error.Message
}

func TestWebSocketUnusableAnswerGetsAnErrorFrame(t *testing.T) {
	html := upstreamtest.Script{Header: http.Header{"Content-Type": {"text/html"}},
		Frames: []upstreamtest.Frame{upstreamtest.RawFrame([]byte("<html>hello</html>"))}}
	tests := []struct {
		name   string
		script upstreamtest.Script
		status int
		code   string
		why    string
	}{
		{"HTML", html, http.StatusBadGateway, "upstream_unavailable", `Content-Type "text/html" instead of an event stream`},
		{"204", upstreamtest.Script{Status: http.StatusNoContent}, http.StatusBadGateway, "upstream_unavailable", "no upstream left"},
		{"302 without a body", upstreamtest.Script{Status: http.StatusFound, Body: []byte{}}, http.StatusBadGateway, "upstream_unavailable", "HTTP 302 Found instead of an answer"},
		{"400 without a body", upstreamtest.Script{Status: http.StatusBadRequest, Body: []byte{}}, http.StatusBadRequest, "upstream_error", "HTTP 400 Bad Request without an error message"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			h.ups["A"].Enqueue(tt.script) // none is retried on the same target
			c := h.dialWS(nil)
			evs := c.turn(createFrame(""))
			if len(evs) != 1 {
				t.Fatalf("want one error frame, got %d frames", len(evs))
			}
			status, code, msg := wsErrorOf(t, evs[0])
			if status != tt.status || code != tt.code || !strings.Contains(msg, tt.why) {
				t.Fatalf("error frame %s, want status %d code %q saying %q", evs[0].data, tt.status, tt.code, tt.why)
			}
			// The socket serves the next turn.
			if last := c.turn(createFrame(""))[0]; last.typ == "error" {
				t.Fatalf("next turn: %s", last.data)
			}
		})
	}
}

func TestMisspelledPathsGetA404NotARedirect(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tt := range []struct{ method, path string }{
		{http.MethodGet, "/v1/models/"},
		{http.MethodGet, "//v1/models"},
		{http.MethodGet, "/V1/MODELS"},
		{http.MethodPost, "/v1/responses/"},
		{http.MethodPost, "/V1/Responses"},
	} {
		req, _ := http.NewRequest(tt.method, h.url+tt.path, strings.NewReader(respJSONBody))
		req.Header.Set("Content-Type", "application/json")
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Location") != "" {
			resp.Body.Close()
			t.Fatalf("%s %s: %d Location %q, want 404", tt.method, tt.path, resp.StatusCode, resp.Header.Get("Location"))
		}
		if e := readError(t, resp); deref(e.Error.Code) != "not_found" {
			t.Fatalf("%s %s: code %q", tt.method, tt.path, deref(e.Error.Code))
		}
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("%d requests reached the upstream", n)
	}
}

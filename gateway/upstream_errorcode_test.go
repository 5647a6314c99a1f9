package gateway_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// clientSurfaces are the four ways a client asks: Chat and Responses, each
// as JSON and as a stream.
var clientSurfaces = []struct{ name, path, body string }{
	{"chat json", "/v1/chat/completions", chatJSONBody},
	{"chat stream", "/v1/chat/completions", chatStreamBody},
	{"responses json", "/v1/responses", respJSONBody},
	{"responses stream", "/v1/responses", respStreamBody},
}

// clientError posts body to path and returns the HTTP status and the error
// the client got: the JSON error, or a Responses stream's response.failed
// error (which has no type; typ is "" then, and status is the stream's 200).
func clientError(t *testing.T, h *harness, path, body string) (status int, code gjson.Result, typ, message string, raw []byte) {
	t.Helper()
	resp, b := readAll(t, h, path, body)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		e := gjson.GetBytes(b, "error")
		return resp.StatusCode, e.Get("code"), e.Get("type").Str, e.Get("message").Str, b
	}
	r := sse.NewReader(bytes.NewReader(b), 64<<20)
	var last sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		last = ev.Clone()
	}
	if eventType(last) != "response.failed" {
		t.Fatalf("%s: the stream ended with %s, want response.failed\n%s", path, last.Data, b)
	}
	e := gjson.GetBytes(last.Data, "response.error")
	return resp.StatusCode, e.Get("code"), "", e.Get("message").Str, b
}

// llamaError is llama.cpp's error body: the HTTP status as an integer code.
func llamaError(status int, typ, message string) []byte {
	return []byte(fmt.Sprintf(`{"error":{"code":%d,"message":%q,"type":%q}}`, status, message, typ))
}

// llamaContextOverflow is llama.cpp's answer to a prompt over its context.
var llamaContextOverflow = []byte(`{"error":{"code":400,"message":"request (5000 tokens) exceeds the available context size (4096 tokens), try increasing it",` +
	`"type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`)

// errorEnvelopeIn200 is a Chat upstream's 200 whose body is the error
// envelope body, to a JSON request and to a streaming one alike.
func errorEnvelopeIn200(body []byte) upstreamtest.Script {
	return upstreamtest.Script{Header: http.Header{"Content-Type": {"application/json"}}, Body: body,
		ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame(body)}}
}

// wantedError is the error a client gets: the HTTP status, the code (""
// for null) and the type ("" for a Responses stream's response.failed,
// which has none, with the stream's 200).
type wantedError struct {
	status    int
	code, typ string
}

func checkClientError(t *testing.T, h *harness, path, body string, want wantedError) {
	t.Helper()
	status, code, typ, _, raw := clientError(t, h, path, body)
	wantCode := want.code != "" && code.Type == gjson.String && code.Str == want.code || want.code == "" && code.Type == gjson.Null
	if status != want.status || !wantCode || typ != want.typ {
		t.Fatalf("%d %s\nwant %d with code %q and type %q", status, raw, want.status, want.code, want.typ)
	}
}

// A status a Chat upstream sends as its error code (llama.cpp's integer
// code) is no code to a client, on every path the error takes to it: a
// 429's is rate_limit_exceeded, the code clients that retry on rate limits
// branch on, another's null (README "Chat-Completions-only upstreams"). A
// rate limit reaches every surface as the 429 with rate_limit_exceeded and
// the upstream's type, a Responses stream as response.failed with that
// code (not server_error) from the request the upstream refused, and as
// the 429 from the next one, answered while the target cools down without
// trying it (README "Failover and replay"); the same errors in a 200's
// error envelope are judged as their status.
func TestStatusSentAsCodeIsNoCodeToClients(t *testing.T) {
	limited := wantedError{http.StatusTooManyRequests, "rate_limit_exceeded", "rate_limit_error"}
	limitedStream := wantedError{http.StatusOK, "rate_limit_exceeded", ""}
	for _, tc := range []struct {
		name         string
		script       upstreamtest.Script
		requests     int
		want, stream wantedError
	}{
		{"HTTP 429", upstreamtest.Script{Status: http.StatusTooManyRequests, Body: llamaError(429, "rate_limit_error", "too many")},
			2, limited, limitedStream},
		{"429 in a 200 error envelope", errorEnvelopeIn200(llamaError(429, "rate_limit_error", "too many")),
			2, limited, limitedStream},
		// A client error before any stream is its status on a Responses
		// stream too, as from the HTTP status (README "Chat-Completions-only
		// upstreams": judged the same way, streamed or not).
		{"400 in a 200 error envelope", errorEnvelopeIn200(llamaError(400, "invalid_request_error", "bad input")),
			1, wantedError{http.StatusBadRequest, "", "invalid_request_error"}, wantedError{http.StatusBadRequest, "", "invalid_request_error"}},
	} {
		for _, sf := range clientSurfaces {
			t.Run(tc.name+"/"+sf.name, func(t *testing.T) {
				h := singleChatUpstream(t, "chat", tc.script)
				want := tc.want
				if sf.name == "responses stream" {
					want = tc.stream
				}
				for i := 0; i < tc.requests; i++ {
					if i > 0 {
						// The target cools down: no upstream is tried, nothing
						// was sent, and a Responses stream gets the status too.
						want = tc.want
					}
					checkClientError(t, h, sf.path, sf.body, want)
				}
			})
		}
	}
}

// llama.cpp's 400 for a prompt over its context (type
// exceed_context_size_error, its code the bare status) reaches every
// surface as OpenAI says it, invalid_request_error with
// context_length_exceeded, the code clients compact or truncate on (README
// "Chat-Completions-only upstreams"), whether it came as the HTTP status or
// in a 200's error envelope, as it does as a stream's first event; its
// message kept.
func TestLlamaContextOverflowIsContextLengthExceeded(t *testing.T) {
	overflow := wantedError{http.StatusBadRequest, "context_length_exceeded", "invalid_request_error"}
	for _, tc := range []struct {
		name         string
		script       upstreamtest.Script
		want, stream wantedError
	}{
		// Failed before any stream: a Responses stream gets the status too,
		// whichever way it came.
		{"HTTP 400", upstreamtest.Script{Status: http.StatusBadRequest, Body: llamaContextOverflow}, overflow, overflow},
		{"400 in a 200 error envelope", errorEnvelopeIn200(llamaContextOverflow), overflow, overflow},
	} {
		for _, sf := range clientSurfaces {
			t.Run(tc.name+"/"+sf.name, func(t *testing.T) {
				want := tc.want
				if sf.name == "responses stream" {
					want = tc.stream
				}
				h := singleChatUpstream(t, "chat", tc.script)
				checkClientError(t, h, sf.path, sf.body, want)
				if _, _, _, msg, _ := clientError(t, h, sf.path, sf.body); !strings.HasPrefix(msg, "request (5000 tokens) exceeds the available context size") {
					t.Fatalf("message %q, want the upstream's", msg)
				}
			})
		}
	}
}

package gateway_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// badUTF8 puts two bytes that are not UTF-8 where body says QQ.
func badUTF8(body []byte) []byte { return bytes.ReplaceAll(body, []byte("QQ"), []byte("\xff\xfe")) }

// wantRepairedJSON fails the test unless body is UTF-8 and the string at
// path is want.
func wantRepairedJSON(t *testing.T, what string, body []byte, path, want string) {
	t.Helper()
	if !utf8.Valid(body) {
		t.Fatalf("%s: the answer is not UTF-8: %q", what, body)
	}
	if got := gjson.GetBytes(body, path).Str; got != want {
		t.Fatalf("%s: %s is %q, want %q: %s", what, path, got, want, body)
	}
}

// TestInvalidUTF8InJSONAnswersReachesClientsReplaced: bytes that are not
// UTF-8 inside the strings of an upstream's non-streaming answer reach the
// client as U+FFFD, one per byte, as they do in a stream's events (README
// "What it promises"): a Responses answer, a Chat upstream's answer to a
// Responses client (translated), a Chat answer to a Chat client, an
// upstream's OpenAI error, and a Response retrieved afterwards from the
// gateway's log. JSON is UTF-8 (RFC 8259): a strict client's decoder
// refuses anything else.
func TestInvalidUTF8InJSONAnswersReachesClientsReplaced(t *testing.T) {
	const want = "bad \uFFFD\uFFFD utf ok"
	const chatBody = `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name     string
		protocol string
		script   upstreamtest.Script
		path     string
		body     string
		status   int
		field    string // where the text is in the client's answer
		retrieve bool   // GET /v1/responses/{id} must give it alike
	}{
		{"responses", "responses", upstreamtest.Script{Body: badUTF8(upstreamtest.ResponseJSON("resp_badjson", "gpt-fake-1", "bad QQ utf ok"))},
			"/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`, 200, "output.0.content.0.text", true},
		{"chat_upstream_responses_client", "chat", upstreamtest.Script{Body: badUTF8(upstreamtest.ChatCompletionJSON("chatcmpl-bad", "gpt-fake-1", "bad QQ utf ok"))},
			"/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`, 200, "output.0.content.0.text", true},
		{"chat", "chat", upstreamtest.Script{Body: badUTF8(upstreamtest.ChatCompletionJSON("chatcmpl-bad", "gpt-fake-1", "bad QQ utf ok"))},
			"/v1/chat/completions", chatBody, 200, "choices.0.message.content", false},
		{"responses_error", "responses", upstreamtest.Script{Status: 400, Body: badUTF8(upstreamtest.ErrorBody("bad QQ utf ok", "invalid_request_error", "some_code", ""))},
			"/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`, 400, "error.message", false},
		{"chat_error", "chat", upstreamtest.Script{Status: 400, Body: badUTF8(upstreamtest.ErrorBody("bad QQ utf ok", "invalid_request_error", "some_code", ""))},
			"/v1/chat/completions", chatBody, 400, "error.message", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{protocol: map[string]string{"A": tc.protocol}})
			h.ups["A"].Enqueue(tc.script)
			resp := h.post(tc.path, tc.body)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %q", resp.StatusCode, tc.status, b)
			}
			wantRepairedJSON(t, "POST "+tc.path, b, tc.field, want)
			if !tc.retrieve {
				return
			}
			id := gjson.GetBytes(b, "id").Str
			got, stored := callRaw(t, h, http.MethodGet, "/v1/responses/"+id)
			if got.StatusCode != http.StatusOK {
				t.Fatalf("GET: %d %s", got.StatusCode, stored)
			}
			wantRepairedJSON(t, "GET /v1/responses/"+id, stored, tc.field, want)
		})
	}
}

// TestInvalidUTF8InOwnerAnswersReachesClientsReplaced: a resource call the
// gateway passes to the response's owner (it holds no log of it) relays
// the owner's JSON, a Response or an OpenAI error, with bytes that are not
// UTF-8 as U+FFFD, as the POST path does.
func TestInvalidUTF8InOwnerAnswersReachesClientsReplaced(t *testing.T) {
	const want = "bad \uFFFD\uFFFD utf ok"
	id, askOwner := replyingOwner(t)
	for _, tc := range []struct {
		name  string
		reply ownerReply
		field string
	}{
		{"response", ownerReply{200, string(badUTF8(upstreamtest.ResponseJSON(id, "gpt-fake-1", "bad QQ utf ok")))}, "output.0.content.0.text"},
		{"error", ownerReply{400, string(badUTF8(upstreamtest.ErrorBody("bad QQ utf ok", "invalid_request_error", "some_code", "")))}, "error.message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := askOwner(tc.name, tc.reply, http.MethodGet, "/v1/responses/"+id)
			if resp.StatusCode != tc.reply.status {
				t.Fatalf("status %d, want %d: %q", resp.StatusCode, tc.reply.status, b)
			}
			wantRepairedJSON(t, "GET", b, tc.field, want)
		})
	}
}

package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// chatRouteHarness is contHarness (P then B behind the route "m") with both
// upstreams Chat-only: a Responses client's request is translated, a Chat
// client's is passed through.
func chatRouteHarness(t *testing.T) *harness {
	t.Helper()
	return contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"P": "chat", "B": "chat"}})
}

// TestChatUpstreamErrorAfterContentIsJudgedAlike: a Chat upstream's error
// chunk after content is judged as it is before content, from either client
// protocol (README, "Chat-Completions-only upstreams"): a client error (the
// type invalid_request_error with no code, or a 4xx status sent as the code,
// as llama.cpp does) is not continued on the next target and ends the
// stream with the upstream's message; a server error is continued.
func TestChatUpstreamErrorAfterContentIsJudgedAlike(t *testing.T) {
	tails := []struct {
		name      string
		chunk     string
		continued bool
	}{
		{"invalid_request_error without a code", `{"error":{"message":"bad request here","type":"invalid_request_error","param":null,"code":null}}`, false},
		{"llama.cpp 400 as the code", `{"error":{"code":400,"message":"bad request here","type":"invalid_request_error"}}`, false},
		{"server_error without a code", `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`, true},
	}
	for _, tc := range tails {
		for _, s := range rescueSurfaces {
			t.Run(tc.name+"/"+s.name, func(t *testing.T) {
				p := upstreamtest.Answer(fullAnswer, 9)
				p.StopAfterDeltas = 3
				p.ChatTail = []upstreamtest.Frame{upstreamtest.SSEData([]byte(tc.chunk)), upstreamtest.SSEData([]byte("[DONE]"))}
				h := chatRouteHarness(t)
				h.ups["P"].Enqueue(p)
				h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
				var o rescueOutcome
				if s.chat && !tc.continued {
					o = chatErrorOutcome(t, h) // openai-go's stream reports an error chunk as no *openai.Error
				} else {
					o = s.do(t, h)
				}
				b := h.ups["B"].RequestCount()
				if tc.continued {
					if o.text != fullAnswer || (o.terminal != "response.completed" && o.terminal != "done") || b != 1 {
						t.Fatalf("client got %q ending %s %s, B called %d times; want the stream continued on B", o.text, o.terminal, o.code, b)
					}
					return
				}
				if b != 0 {
					t.Fatalf("B called %d times: a client error was continued (client got %q ending %s)", b, o.text, o.terminal)
				}
				if o.text != sentPart || (o.terminal != "response.failed" && o.terminal != "error") {
					t.Fatalf("client got %q ending %s %s; want %q ending with the upstream's error", o.text, o.terminal, o.code, sentPart)
				}
				msg := o.code // chatErrorOutcome: the error chunk's message
				if !s.chat {
					msg = gjson.Get(o.raw[len(o.raw)-1], "response.error.message").Str
				}
				if !strings.Contains(msg, "bad request here") {
					t.Fatalf("the stream ends without the upstream's message: %s", o.raw[len(o.raw)-1])
				}
			})
		}
	}
}

// chatErrorOutcome sends the continuation tests' request as a Chat stream
// whose end is expected to be an error chunk, and checks that it is: one
// role chunk, no finish, the error chunk, then the only [DONE]. code is the
// error chunk's message.
func chatErrorOutcome(t *testing.T, h *harness) rescueOutcome {
	t.Helper()
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	var o rescueOutcome
	roles := 0
	for i, ev := range evs {
		if ev.Done {
			if i != len(evs)-1 || i == 0 {
				t.Fatalf("[DONE] at %d of %d events", i, len(evs))
			}
			break
		}
		o.raw = append(o.raw, string(ev.Data))
		c := gjson.ParseBytes(ev.Data)
		if e := c.Get("error"); e.Exists() {
			if i != len(evs)-2 {
				t.Fatalf("error chunk at %d of %d events", i, len(evs))
			}
			o.terminal, o.code = "error", e.Get("message").Str
			continue
		}
		if c.Get("choices.0.delta.role").Str != "" {
			roles++
		}
		if f := c.Get("choices.0.finish_reason"); f.Str != "" {
			t.Fatalf("a finish chunk before the error: %s", ev.Data)
		}
		o.text += c.Get("choices.0.delta.content").Str
	}
	if roles != 1 || !evs[len(evs)-1].Done {
		t.Fatalf("%d role chunks; the stream ends with %q", roles, evs[len(evs)-1].Data)
	}
	return o
}

// TestChatUpstreamErrorEnvelopeIn200: a Chat upstream's 200 whose body is
// an error envelope is its error, judged as its status (README,
// "Chat-Completions-only upstreams"), for a Chat client, streamed or not: a
// client error reaches the client with its status, message and code, B
// untried; a server error goes on to B, whose answer the client gets.
func TestChatUpstreamErrorEnvelopeIn200(t *testing.T) {
	const (
		clientErr = `{"error":{"message":"bad stream req","type":"invalid_request_error","param":"n","code":"invalid_value"}}`
		serverErr = `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`
	)
	asJSON := http.Header{"Content-Type": {"application/json"}}
	for _, stream := range []bool{false, true} {
		for _, tc := range []struct {
			name, envelope string
			toB            bool
		}{
			{"client error", clientErr, false},
			{"server error", serverErr, true},
		} {
			name := "json/" + tc.name
			if stream {
				name = "stream/" + tc.name
			}
			t.Run(name, func(t *testing.T) {
				h := chatRouteHarness(t)
				script := upstreamtest.Script{Body: []byte(tc.envelope)}
				body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
				if stream {
					// The upstream answers the stream request with JSON.
					script = upstreamtest.Script{Header: asJSON, ChatFrames: []upstreamtest.Frame{upstreamtest.RawFrame([]byte(tc.envelope))}}
					body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
				}
				h.ups["P"].SetDefault(script)
				resp := h.post("/v1/chat/completions", body)
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				b := h.ups["B"].RequestCount()
				if tc.toB {
					if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), "chatcmpl-B-") || b != 1 {
						t.Fatalf("%d %s, B called %d times; want B's answer", resp.StatusCode, raw, b)
					}
					return
				}
				e := gjson.GetBytes(raw, "error")
				if resp.StatusCode != http.StatusBadRequest || e.Get("message").Str != "bad stream req" || e.Get("code").Str != "invalid_value" || b != 0 {
					t.Fatalf("%d %s, B called %d times; want the upstream's 400 invalid_value, B untried", resp.StatusCode, raw, b)
				}
			})
		}
	}
}

package gateway_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestChatUpstreamKeyIsNotKeptInItsHistory: a keyed Chat upstream that
// echoes its key in its answer has it reach the client as [redacted], and
// the history the gateway keeps for the follow-up (data_dir, and what a
// follow-up sends upstream) holds [redacted] too, never the key
// (SECURITY.md), for a stream and a JSON answer alike.
func TestChatUpstreamKeyIsNotKeptInItsHistory(t *testing.T) {
	const key = "sk-chat-upstream-key-0123456789"
	for _, stream := range []bool{true, false} {
		name := map[bool]string{true: "stream", false: "json"}[stream]
		t.Run(name, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st, Conversations: st},
				protocol: map[string]string{"C": "chat"}, keys: map[string]string{"C": key},
				upstreams: []upstreamtest.Options{{Name: "C"}}})
			answer := "the key is " + key
			if stream {
				h.ups["C"].Enqueue(upstreamtest.Script{ChatFrames: upstreamtest.ChatStream("chatcmpl-1", "gpt-fake-1", answer, 3)})
			} else {
				h.ups["C"].Enqueue(upstreamtest.Script{Body: upstreamtest.ChatCompletionJSON("chatcmpl-1", "gpt-fake-1", answer)})
			}
			body := `{"model":"gpt-fake-1","input":"hi","stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
			status, got := h.callBody("POST", "/v1/responses", body)
			if status != 200 || strings.Contains(string(got), key) || !strings.Contains(string(got), "[redacted]") {
				t.Fatalf("turn 1: %d %s", status, got)
			}
			id := gjson.GetBytes(got, "id").Str
			if stream {
				for _, line := range strings.Split(string(got), "\n") {
					if r := gjson.Get(strings.TrimPrefix(line, "data: "), "response.id"); r.Exists() {
						id = r.Str
					}
				}
			}
			if status, got := h.callBody("POST", "/v1/responses", `{"model":"gpt-fake-1","input":"and?","previous_response_id":"`+id+`"}`); status != 200 {
				t.Fatalf("turn 2: %d %s", status, got)
			}
			reqs := h.ups["C"].Requests()
			second := string(reqs[len(reqs)-1].Body)
			if strings.Contains(second, key) || !strings.Contains(second, "[redacted]") {
				t.Fatalf("turn 2 sent upstream the history %s", second)
			}
		})
	}
}

package gateway_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// outputTokensField finds an access line's output_tokens.
var outputTokensField = regexp.MustCompile(`output_tokens=(\d+)`)

// A Chat upstream's stream without usage, cut after its finish chunk, is
// charged one output token per delta that carried output (README "Usage"),
// the same whichever API its client speaks: the role chunk (role and
// content "") and the finish chunk (an empty delta) carry none, as the
// Responses events a Responses client gets of them hold no delta. With
// n=2, per choice the same.
func TestChatStreamEstimateCountsOnlyDeltasWithOutput(t *testing.T) {
	chunk := func(choice string) upstreamtest.Frame {
		return upstreamtest.SSEData([]byte(`{"id":"chatcmpl-est","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1","choices":[` + choice + `]}`))
	}
	// choiceFrames is one choice's stream: a role chunk, then deltas, then
	// the finish chunk.
	choiceFrames := func(index int, deltas ...string) []upstreamtest.Frame {
		frames := []upstreamtest.Frame{chunk(fmt.Sprintf(`{"index":%d,"delta":{"role":"assistant","content":""},"finish_reason":null}`, index))}
		for _, d := range deltas {
			frames = append(frames, chunk(fmt.Sprintf(`{"index":%d,"delta":%s,"finish_reason":null}`, index, d)))
		}
		return append(frames, chunk(fmt.Sprintf(`{"index":%d,"delta":{},"finish_reason":"stop"}`, index)))
	}
	text := func(s string) string { return `{"content":"` + s + `"}` }
	words := []string{text("one "), text("two "), text("three "), text("four ")}
	for _, tc := range []struct {
		name      string
		frames    []upstreamtest.Frame
		output    int64
		responses bool // a Responses client can ask for it too (n is not sent to a Chat upstream)
		n         string
	}{
		{name: "text", frames: choiceFrames(0, words...), output: 4, responses: true},
		{name: "reasoning and a refusal", frames: choiceFrames(0, `{"reasoning_content":"hmm"}`, `{"refusal":"no"}`, `{"content":"","refusal":""}`),
			output: 2, responses: true},
		{name: "a tool call", frames: choiceFrames(0,
			`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}`,
			`{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}`,
			`{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}`),
			output: 2, responses: true},
		{name: "n=2", frames: append(choiceFrames(0, words...), choiceFrames(1, words[:3]...)...), output: 7, n: `"n":2,`},
	} {
		for _, client := range []string{"chat", "responses"} {
			if client == "responses" && !tc.responses {
				continue
			}
			t.Run(tc.name+"/"+client, func(t *testing.T) {
				st := openStore(t, t.TempDir())
				h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}, opts: gateway.Options{Accounts: gateway.AccountsOptions{
					Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, KeyStore: st, Usage: st}}})
				h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: tc.frames, End: upstreamtest.EndCut})
				path, body := "/v1/chat/completions", `{"model":"gpt-fake-1","stream":true,`+tc.n+`"messages":[{"role":"user","content":"hi"}]}`
				if client == "responses" {
					path, body = "/v1/responses", `{"model":"gpt-fake-1","stream":true,"input":"hi"}`
				}
				_, evs := postWith(t, h, path, body, map[string]string{"Authorization": "Bearer " + teamAKey})
				if len(evs) == 0 {
					t.Fatal("no events")
				}
				rep := waitUsage(t, h, 1)
				if rep.Total.Requests != 1 || rep.Total.OutputTokens != tc.output {
					t.Fatalf("/admin/usage: %+v, want 1 request charged %d output tokens (one per delta with output)", rep.Total, tc.output)
				}
				waitAccessLines(t, h, 1)
				line := grepLines(h.logs.String(), "access: request")
				if m := outputTokensField.FindStringSubmatch(line); m == nil || m[1] != fmt.Sprint(tc.output) {
					t.Errorf("the access line does not show %d output tokens: %s", tc.output, line)
				}
			})
		}
	}
}

package gateway_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A Chat stream asked for n choices whose upstream finished some of them
// and then broke off (a cut, no [DONE]) is not a complete answer: the
// client gets the error chunk of an incomplete stream, not a [DONE] that
// says it has every choice. An upstream that ends with [DONE] after fewer
// choices than n (one that ignores n, as llama.cpp does) says the answer
// is whole: its [DONE] passes.
func TestChatStreamWithChoicesMissingIsIncomplete(t *testing.T) {
	chunk := func(choice string) upstreamtest.Frame {
		return upstreamtest.SSEData([]byte(`{"id":"chatcmpl-n","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1","choices":[` + choice + `]}`))
	}
	first := []upstreamtest.Frame{
		chunk(`{"index":0,"delta":{"role":"assistant","content":"one"},"finish_reason":null}`),
		chunk(`{"index":0,"delta":{},"finish_reason":"stop"}`),
	}
	const body = `{"model":"gpt-fake-1","stream":true,"n":2,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name       string
		end        upstreamtest.Script
		incomplete bool
	}{
		{"cut before the second choice", upstreamtest.Script{ChatFrames: first, End: upstreamtest.EndCut}, true},
		{"[DONE] after one choice", upstreamtest.Script{ChatFrames: append(append([]upstreamtest.Frame{}, first...), upstreamtest.SSEData([]byte("[DONE]")))}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}})
			h.ups["A"].Enqueue(tc.end)
			_, evs := postWith(t, h, "/v1/chat/completions", body, nil)
			if len(evs) == 0 || !evs[len(evs)-1].Done {
				t.Fatalf("the stream did not end with [DONE]: %d events", len(evs))
			}
			var code string
			for _, ev := range evs {
				if c := gjson.GetBytes(ev.Data, "error.code"); c.Exists() {
					code = c.String()
				}
			}
			if tc.incomplete && code != "stream_incomplete" {
				t.Fatalf("the client got no stream_incomplete error chunk (code %q)", code)
			}
			if !tc.incomplete && code != "" {
				t.Fatalf("the client got an error chunk %q for a stream its upstream ended", code)
			}
			line := grepLines(h.logs.String(), "access: request")
			if tc.incomplete == strings.Contains(line, "reason=done") {
				t.Fatalf("access line %q", line)
			}
		})
	}
}

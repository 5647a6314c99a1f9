package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// An upstream's own terminal event reaches the client (and GET) as a
// complete Response that agrees with what the client was sent (README, the
// terminal-event rule): one that carries only an id and a status is filled
// in, one whose output takes back streamed text gets that text, and a failed
// one says why with a code of the spec's enum.
func TestUpstreamTerminalResponsesReachClientsComplete(t *testing.T) {
	spec := loadSpec(t)
	const full = `"object":"response","created_at":1,"incomplete_details":null,"instructions":null,"model":"gpt-fake-1",` +
		`"tools":[],"parallel_tool_calls":true,"metadata":{},"tool_choice":"auto","temperature":1,"top_p":1`
	for _, tc := range []struct {
		name     string
		before   int // canned frames before the terminal event (5: the first delta "Hello" was sent)
		terminal string
		status   string
		code     string // error.code ("" → no error)
		message  string // the error message's beginning
		text     string // output[0]'s text ("" → no output)
	}{
		{"failed before content, only its error", 2,
			`{"type":"response.failed","response":{"id":"{{id}}","status":"failed","error":{"code":"invalid_prompt","message":"bad prompt"}}}`,
			"failed", "invalid_prompt", "bad prompt", ""},
		{"incomplete before content, only its reason", 2,
			`{"type":"response.incomplete","response":{"id":"{{id}}","status":"incomplete","incomplete_details":{"reason":"content_filter"}}}`,
			"incomplete", "", "", ""},
		{"completed after content, only its status", 5,
			`{"type":"response.completed","response":{"id":"{{id}}","status":"completed"}}`,
			"completed", "", "", "Hello"},
		{"completed after content with an empty output", 5,
			`{"type":"response.completed","response":{"id":"{{id}}","status":"completed","error":null,"output":[],` + full + `}}`,
			"completed", "", "", "Hello"},
		{"failed after content without an error", 5,
			`{"type":"response.failed","response":{"id":"{{id}}","status":"failed","error":null,"output":[],` + full + `}}`,
			"failed", "server_error", "the upstream failed the response without saying why", "Hello"},
		{"failed after content with a code outside the spec", 5,
			`{"type":"response.failed","response":{"id":"{{id}}","status":"failed","error":{"code":"weird_code","message":"odd"},"output":[],` + full + `}}`,
			"failed", "server_error", "weird_code: odd", "Hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			frames := append(upstreamtest.CutAfter(tc.before).Frames, upstreamtest.SSEEvent([]byte(tc.terminal)))
			h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames})
			_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
			last := assertOneTerminal(t, evs)
			if v, c := validateTerminal(t, spec, last.data); len(v)+len(c) > 0 {
				t.Fatalf("the terminal event breaks the spec: %v %v\n%s", v, c, last.data)
			}
			resp := gjson.GetBytes(last.data, "response")
			check := func(what string, r gjson.Result) {
				t.Helper()
				if r.Get("status").Str != tc.status || r.Get("error.code").Str != tc.code ||
					!strings.HasPrefix(r.Get("error.message").Str, tc.message) || r.Get("output.0.content.0.text").Str != tc.text {
					t.Fatalf("%s: want status %s, error %q %q…, text %q: %s", what, tc.status, tc.code, tc.message, tc.text, r.Raw)
				}
			}
			check("the terminal event", resp)
			status, got := h.call(http.MethodGet, "/v1/responses/"+resp.Get("id").Str, "sk-client-secret")
			if status != http.StatusOK {
				t.Fatalf("GET: %d %s", status, got)
			}
			check("GET", gjson.ParseBytes(got))
		})
	}
}

package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// accessFields is one access line's fields by name (the text logger's
// key=value pairs; no value in these tests has a space).
func accessFields(line string) map[string]string {
	_, rest, _ := strings.Cut(line, "access: request: ")
	f := map[string]string{}
	for _, kv := range strings.Fields(rest) {
		k, v, _ := strings.Cut(kv, "=")
		f[k] = strings.Trim(v, `"`)
	}
	return f
}

// accessLinesOf is the access lines of the request with that x-request-id,
// in the order they were written.
func accessLinesOf(h *harness, requestID string) []map[string]string {
	var out []map[string]string
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, "access: request: ") && strings.Contains(line, "request_id="+requestID+" ") {
			out = append(out, accessFields(line))
		}
	}
	return out
}

// waitAccessLinesOf waits until the request with that x-request-id has
// logged n access lines.
func waitAccessLinesOf(t *testing.T, h *harness, requestID string, n int) {
	t.Helper()
	eventually(t, "the request's access lines", func() bool { return len(accessLinesOf(h, requestID)) >= n })
}

// TestBackgroundRunEndIsLogged: a background create is answered queued or
// in progress at once, and its run ends later: its access line for the
// answer has no outcome and no tokens (background=answered), and a second
// line, when the run ends, has the same request, its outcome (a failed
// run's code, the end reason), its duration from the request's start and
// the tokens it was charged (background=ended) — for a run that completed,
// one that failed and one cancelled (README "Access log").
func TestBackgroundRunEndIsLogged(t *testing.T) {
	stall := slowAnswer()
	stall.StopAfterDeltas, stall.End = 2, upstreamtest.EndHang
	for _, tc := range []struct {
		name   string
		script upstreamtest.Script
		cancel bool
		want   map[string]string // the end line's fields
		noCode bool
	}{
		{"completed", upstreamtest.Answer("one two three four", 4), false,
			map[string]string{"reason": "completed", "input_tokens": "8", "output_tokens": "4", "cached_tokens": "0", "reasoning_tokens": "0"}, true},
		{"completed slowly", slowAnswer(), false,
			map[string]string{"reason": "completed", "input_tokens": "8", "output_tokens": "12"}, true},
		{"failed", upstreamtest.Answer("one two three four", 4).FailAfterDeltas(2, "invalid_prompt"), false,
			map[string]string{"code": "invalid_prompt", "reason": "failed", "input_tokens": "8", "output_tokens": "2"}, false},
		{"cancelled", stall, true,
			map[string]string{"reason": "cancelled"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: resumeOpts()})
			h.ups["A"].Enqueue(tc.script)
			resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			id, requestID := gjson.GetBytes(b, "id").Str, resp.Header.Get("X-Request-Id")
			if resp.StatusCode != http.StatusOK || id == "" || requestID == "" {
				t.Fatalf("background create: %d %q %s", resp.StatusCode, requestID, b)
			}
			if tc.cancel {
				h.waitFor("/v1/responses/"+id, func(body []byte) bool { return gjson.GetBytes(body, "output.0.content.0.text").Str != "" })
				if status, body := h.call(http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-client-secret"); status != http.StatusOK {
					t.Fatalf("cancel: %d %s", status, body)
				}
			}
			waitAccessLinesOf(t, h, requestID, 2)
			h.waitFor("/v1/responses/"+id, func(body []byte) bool {
				s := gjson.GetBytes(body, "status").Str
				return s != "queued" && s != "in_progress"
			})
			lines := accessLinesOf(h, requestID)
			if len(lines) != 2 {
				t.Fatalf("%d access lines, want 2: %v", len(lines), lines)
			}
			answer, end := lines[0], lines[1]
			if answer["background"] != "answered" || answer["status"] != "200" || answer["reason"] != "" || answer["code"] != "" || answer["input_tokens"] != "" {
				t.Errorf("the answer's line: %v", answer)
			}
			if end["background"] != "ended" {
				t.Errorf("the end line has background=%q, want ended: %v", end["background"], end)
			}
			for _, k := range []string{"request_id", "method", "endpoint", "surface", "key", "route", "model", "status"} {
				if end[k] != answer[k] {
					t.Errorf("the end line's %s is %q, the answer's %q", k, end[k], answer[k])
				}
			}
			if end["targets"] != "A/gpt-fake-1" {
				t.Errorf("the end line's targets: %q", end["targets"])
			}
			for k, v := range tc.want {
				if end[k] != v {
					t.Errorf("the end line's %s is %q, want %q: %v", k, end[k], v, end)
				}
			}
			if tc.noCode && end["code"] != "" {
				t.Errorf("the end line of a completed run has code %q", end["code"])
			}
			m := h.metrics() // what the run was charged: the end line shows the same
			for _, kind := range []string{"input", "output"} {
				series := fmt.Sprintf(`sluice_usage_tokens_total{key="",kind=%q,model="gpt-fake-1",route="",target="A"} %s`, kind, end[kind+"_tokens"])
				if !strings.Contains(m, series+"\n") {
					t.Errorf("charged other %s tokens than the end line's %q:\n%s", kind, end[kind+"_tokens"], grepLines(m, "sluice_usage_tokens_total"))
				}
			}
			if end["duration"] == "" || end["ttfe"] == "" || (tc.cancel && end["output_tokens"] == "") {
				t.Errorf("the end line lacks its duration, ttfe or tokens: %v", end)
			}
		})
	}
}

// TestStreamedBackgroundLogsOneLine: a streamed background request whose
// client reads it to its end is answered with its whole stream: its one
// access line, written when the run ended, has the run's outcome and
// tokens and says background=ended; no answer line comes before it.
func TestStreamedBackgroundLogsOneLine(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	h.ups["A"].Enqueue(upstreamtest.Answer("one two three four", 4))
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true,"background":true}`)
	if len(evs) == 0 || evs[len(evs)-1].Name != "response.completed" {
		t.Fatalf("%d events", len(evs))
	}
	id := gjson.GetBytes(evs[len(evs)-1].Data, "response.id").Str
	waitAccessLines(t, h, 1)
	h.waitFor("/v1/responses/"+id, func(body []byte) bool { return gjson.GetBytes(body, "status").Str == "completed" }) // its line, a second, would be there by now
	all := grepLines(h.logs.String(), "access: request")
	lines := accessLinesOf(h, accessFields(strings.Split(all, "\n")[0])["request_id"])
	if len(lines) != 1 || lines[0]["method"] != http.MethodPost {
		t.Fatalf("%d access lines of the request, want 1:\n%s", len(lines), all)
	}
	l := lines[0]
	if l["background"] != "ended" || l["reason"] != "completed" || l["output_tokens"] != "4" || l["surface"] != "responses_stream" {
		t.Errorf("the line: %v", l)
	}
}

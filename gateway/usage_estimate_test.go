package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// A Chat client that leaves mid-stream, before the usage chunk, is charged
// an estimate (its body bytes / 4 as input, one output token per delta it
// was sent) in its key's budget, in /admin/usage and in the usage metrics,
// and the estimate is marked in sluice_usage_estimated_requests_total.
// Charged nothing, a client that always leaves before the end would never
// be held by a token limit.
func TestUsageOfAClientThatLeftIsEstimated(t *testing.T) {
	body := `{"model":"gpt-fake-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"` +
		strings.Repeat("tell me more ", 30) + `"}]}`
	inputEstimate := int64(len(body)+3) / 4
	// A budget the estimate fills: the next request is refused only if the
	// request that left was charged.
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: inputEstimate}))
	h.ups["A"].Enqueue(upstreamtest.Answer("one two three four five six", 6).StallAfterDeltas(3))

	req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+teamAKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r := sse.NewReader(resp.Body, 1<<20)
	var text string
	for deltas := 0; deltas < 3; {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("the stream ended after %q: %v", text, err)
		}
		if c := gjson.GetBytes(ev.Data, "choices.0.delta.content").Str; c != "" {
			text += c
			deltas++
		}
	}
	_ = resp.Body.Close() // the client leaves while the upstream is silent
	waitAccessLines(t, h, 1)

	// The three text deltas were sent (the role chunk carries no output).
	const outputEstimate = 3
	rep := waitUsage(t, h, 1)
	if rep.Total.Requests != 1 || rep.Total.InputTokens != inputEstimate || rep.Total.OutputTokens != outputEstimate {
		t.Fatalf("/admin/usage after the client left: %+v, want 1 request, %d in, %d out (estimated)", rep.Total, inputEstimate, outputEstimate)
	}
	m := h.metrics()
	for _, series := range []string{
		`sluice_usage_estimated_requests_total{key="team-a",model="gpt-fake-1",route="",target="A"} 1`,
		fmt.Sprintf(`sluice_usage_tokens_total{key="team-a",kind="input",model="gpt-fake-1",route="",target="A"} %d`, inputEstimate),
		fmt.Sprintf(`sluice_usage_tokens_total{key="team-a",kind="output",model="gpt-fake-1",route="",target="A"} %d`, outputEstimate),
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("want %s in:\n%s", series, grepLines(m, "sluice_usage_"))
		}
	}
	if line := grepLines(h.logs.String(), "access: request"); !strings.Contains(line, fmt.Sprintf("input_tokens=%d", inputEstimate)) {
		t.Errorf("the access line does not show the tokens charged: %s", line)
	}

	// The budget holds what was charged: the key's next request is refused.
	resp2, b := send(t, h, http.MethodPost, "/v1/chat/completions", teamAKey, body)
	if resp2.StatusCode != http.StatusTooManyRequests || gjson.GetBytes(b, "error.code").Str != gateway.CodeInsufficientQuota {
		t.Fatalf("the next request: %d %s, want 429 insufficient_quota (the budget counts the estimate)", resp2.StatusCode, b)
	}
}

// A Responses stream cut after output and not continued (no route) is
// charged the same estimate: its text deltas count as output.
func TestUsageOfACutResponsesStreamIsEstimated(t *testing.T) {
	body := `{"model":"gpt-fake-1","input":"hi","stream":true}`
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	h.ups["A"].Enqueue(upstreamtest.Answer("one two three four", 4).CutAfterDeltas(2))
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "response.failed") {
		t.Fatalf("cut stream: %d %s", resp.StatusCode, b)
	}
	rep := waitUsage(t, h, 1)
	if want := int64(len(body)+3) / 4; rep.Total.Requests != 1 || rep.Total.InputTokens != want || rep.Total.OutputTokens != 2 {
		t.Fatalf("/admin/usage after a cut stream: %+v, want 1 request, %d in, 2 out (estimated)", rep.Total, want)
	}
}

// When the upstream reported usage, that usage is charged, not an
// estimate, also when the stream then breaks: here a Chat upstream
// reporting a running usage on each chunk (as vLLM does with
// continuous_usage_stats) is cut.
func TestUsageReportedBeforeACutIsNotEstimated(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: runningUsageChunks("The quick", " brown"), End: upstreamtest.EndCut})
	status, _ := postWithKey(t, h, `{"model":"gpt-fake-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	rep := waitUsage(t, h, 1)
	if rep.Total.Requests != 1 || rep.Total.InputTokens != 10 || rep.Total.OutputTokens != 2 {
		t.Fatalf("/admin/usage: %+v, want 1 request with the last usage the upstream reported (10 in, 2 out)", rep.Total)
	}
	if m := h.metrics(); strings.Contains(m, "sluice_usage_estimated_requests_total{") {
		t.Fatalf("a request with the upstream's usage was estimated:\n%s", grepLines(m, "sluice_usage_estimated"))
	}
}

// A Chat client that asked include_usage gets one usage chunk, the last,
// also when the attempt it was first streamed from reported a running
// usage on each chunk and was then cut and continued on another target:
// the running counts reach it as null (as OpenAI's other chunks have).
// A client that asked for running usage (continuous_usage_stats) keeps it.
func TestChatRunningUsageOfACutAttemptIsNotShown(t *testing.T) {
	for _, tc := range []struct {
		name      string
		options   string
		wantUsage int
	}{
		{"include_usage", `{"include_usage":true}`, 1},
		{"continuous_usage_stats", `{"include_usage":true,"continuous_usage_stats":true}`, 4}, // three running, one final
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"P": "chat", "B": "chat"}})
			h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: runningUsageChunks("The quick", " brown"), End: upstreamtest.EndCut})
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
			_, evs := postWith(t, h, "/v1/chat/completions",
				`{"model":"m","stream":true,"stream_options":`+tc.options+`,"messages":[{"role":"user","content":"hi"}]}`, nil)
			var text string
			var usages []string
			for _, ev := range evs {
				text += gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
				if u := gjson.GetBytes(ev.Data, "usage"); u.IsObject() {
					usages = append(usages, u.Raw)
				}
			}
			if text != fullAnswer || h.ups["B"].RequestCount() != 1 {
				t.Fatalf("not continued: %q, B asked %d times", text, h.ups["B"].RequestCount())
			}
			if len(usages) != tc.wantUsage {
				t.Fatalf("the client got %d usage objects %v, want %d", len(usages), usages, tc.wantUsage)
			}
			if last := evs[len(evs)-2].Data; len(gjson.GetBytes(last, "choices").Array()) != 0 || !gjson.GetBytes(last, "usage").IsObject() {
				t.Fatalf("the chunk before [DONE] is not the usage chunk: %s", last)
			}
		})
	}
}

// runningUsageChunks is a Chat stream's role chunk and one chunk per
// piece, each with the running usage (10 prompt tokens, one completion
// token per piece so far), and no finish: a stream to cut.
func runningUsageChunks(pieces ...string) []upstreamtest.Frame {
	chunk := func(delta string, completion int) []byte {
		return fmt.Appendf(nil, `{"id":"chatcmpl-run","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1",`+
			`"choices":[{"index":0,"delta":%s,"finish_reason":null}],`+
			`"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}`, delta, completion, 10+completion)
	}
	frames := []upstreamtest.Frame{upstreamtest.SSEData(chunk(`{"role":"assistant","content":""}`, 0))}
	for i, p := range pieces {
		frames = append(frames, upstreamtest.SSEData(chunk(fmt.Sprintf(`{"content":%q}`, p), i+1)))
	}
	return frames
}

// A Chat stream continued on another target is charged, and shows in its
// usage chunk, both attempts' usage summed, also when the first attempt
// reported its usage only as a running count on each chunk before it was
// cut (as vLLM does with continuous_usage_stats).
func TestUsageOfAContinuedChatStreamSumsARunningUsage(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"P": "chat", "B": "chat"},
		opts: gateway.Options{Accounts: gateway.AccountsOptions{Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, Usage: st}}})
	h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: runningUsageChunks("The quick", " brown"), End: upstreamtest.EndCut}) // 10 in, 2 out
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))                                                                   // 8 in, 3 out
	_, evs := postWithKey(t, h, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	var text string
	var shown gjson.Result
	for _, ev := range evs {
		text += gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
		if u := gjson.GetBytes(ev.Data, "usage"); u.IsObject() {
			shown = u
		}
	}
	if text != fullAnswer || h.ups["B"].RequestCount() != 1 {
		t.Fatalf("not continued: %q, B asked %d times", text, h.ups["B"].RequestCount())
	}
	if shown.Get("prompt_tokens").Int() != 18 || shown.Get("completion_tokens").Int() != 5 {
		t.Fatalf("the client's usage chunk says %s, want both attempts summed (18 in, 5 out)", shown.Raw)
	}
	rep := waitUsage(t, h, 1)
	if rep.Total.Requests != 1 || rep.Total.InputTokens != 18 || rep.Total.OutputTokens != 5 {
		t.Fatalf("/admin/usage: %+v, want 1 request, 18 in, 5 out", rep.Total)
	}
}

// TestUsageOfAContinuedStreamSumsARunningUsageForResponsesClients: the same
// continued stream as above, for a Responses client of the Chat upstreams:
// the running usage the cut attempt reported stays in the translation, and
// is summed all the same (README "Keys, limits and usage").
func TestUsageOfAContinuedStreamSumsARunningUsageForResponsesClients(t *testing.T) {
	t.Run("keyless upstreams", func(t *testing.T) { continuedRunningUsageForResponsesClient(t, nil) })
	// Upstreams with an api_key: their events pass the key scrubber, which
	// wraps the translation (chatSourceOf looks through it).
	t.Run("upstreams with an api_key", func(t *testing.T) {
		continuedRunningUsageForResponsesClient(t, map[string]string{"P": "sk-upstream-p-secret", "B": "sk-upstream-b-secret"})
	})
}

func continuedRunningUsageForResponsesClient(t *testing.T, upstreamKeys map[string]string) {
	st := openStore(t, t.TempDir())
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"P": "chat", "B": "chat"}, keys: upstreamKeys,
		opts: gateway.Options{Accounts: gateway.AccountsOptions{Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, Usage: st}}})
	h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: runningUsageChunks("The quick", " brown"), End: upstreamtest.EndCut}) // 10 in, 2 out
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))                                                                   // 8 in, 3 out
	_, evs := postWith(t, h, "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`, map[string]string{"Authorization": "Bearer " + teamAKey})
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	last := evs[len(evs)-1]
	if typ := gjson.GetBytes(last.Data, "type").Str; typ != "response.completed" || h.ups["B"].RequestCount() != 1 {
		t.Fatalf("not continued: %s, B asked %d times", last.Data, h.ups["B"].RequestCount())
	}
	if u := gjson.GetBytes(last.Data, "response.usage"); u.Get("input_tokens").Int() != 18 || u.Get("output_tokens").Int() != 5 {
		t.Fatalf("the completed response's usage is %s, want both attempts summed (18 in, 5 out)", u.Raw)
	}
	rep := waitUsage(t, h, 1)
	if rep.Total.Requests != 1 || rep.Total.InputTokens != 18 || rep.Total.OutputTokens != 5 {
		t.Fatalf("/admin/usage: %+v, want 1 request, 18 in, 5 out", rep.Total)
	}
}

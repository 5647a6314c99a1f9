package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// usageRow is a row of GET /admin/usage with the counts these tests read.
type usageRow struct {
	InputTokens     int64    `json:"input_tokens"`
	OutputTokens    int64    `json:"output_tokens"`
	CachedTokens    int64    `json:"cached_tokens"`
	ReasoningTokens int64    `json:"reasoning_tokens"`
	CostUSD         *float64 `json:"cost_usd"`
}

// teamAUsage is team-a's usage today: its one row and the total cost.
func teamAUsage(t *testing.T, h *harness) (usageRow, *float64) {
	t.Helper()
	var rep struct {
		Data  []usageRow `json:"data"`
		Total struct {
			CostUSD *float64 `json:"cost_usd"`
		} `json:"total"`
	}
	if code := h.getJSON("/admin/usage?key=team-a", &rep); code != 200 {
		t.Fatalf("admin/usage: %d", code)
	}
	if len(rep.Data) != 1 {
		t.Fatalf("admin/usage rows %+v, want one", rep.Data)
	}
	return rep.Data[0], rep.Total.CostUSD
}

// teamAMetric is the value of team-a's series of the metric name (with
// kind, when not ""), and whether /metrics has one.
func teamAMetric(t *testing.T, h *harness, name, kind string) (float64, bool) {
	t.Helper()
	prefix := name + `{key="team-a",`
	if kind != "" {
		prefix += `kind="` + kind + `",`
	}
	for _, line := range strings.Split(h.metrics(), "\n") {
		if strings.HasPrefix(line, prefix) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v, true
		}
	}
	return 0, false
}

// chatStreamWithUsage is a Chat stream of deltas output deltas whose
// usage-only chunk, before [DONE], carries usage as given (raw JSON).
func chatStreamWithUsage(deltas int, usage string) []upstreamtest.Frame {
	chunks := upstreamtest.ChatChunks(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, strings.Repeat("word ", deltas), deltas)
	usageChunk := []byte(`{"id":"` + upstreamtest.PlaceholderID + `","object":"chat.completion.chunk","created":1,"model":"` +
		upstreamtest.PlaceholderModel + `","choices":[],"usage":` + usage + `}`)
	var frames []upstreamtest.Frame
	for _, c := range chunks[:len(chunks)-1] {
		frames = append(frames, upstreamtest.SSEData(c))
	}
	return append(frames, upstreamtest.SSEData(usageChunk), upstreamtest.SSEData([]byte("[DONE]")))
}

// TestUsageDetailsAboveTheirCountsNeverPriceBelowZero: an upstream that
// reports more cached tokens than input tokens (one whose input count
// leaves the cache reads out) or more reasoning tokens than output tokens
// is charged its own input and output counts, the details held within
// them: /admin/usage never shows a negative cost, and its cost and
// cached and reasoning counts are the metrics'.
func TestUsageDetailsAboveTheirCountsNeverPriceBelowZero(t *testing.T) {
	const chatReq = `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`
	const streamReq = `{"model":"gpt-fake-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	const usage = `{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":50},"completion_tokens_details":{"reasoning_tokens":999}}`
	chatJSON := upstreamtest.ChatCompletionJSON(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "hello")
	for _, tt := range []struct {
		name, req string
		script    upstreamtest.Script
	}{
		{"JSON", chatReq, upstreamtest.Script{Body: withUsage(t, chatJSON, usage)}},
		{"stream", streamReq, upstreamtest.Script{ChatFrames: chatStreamWithUsage(3, usage)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := storeHarness(t, gateway.AccountsOptions{Required: true,
				Keys:    []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})},
				Pricing: map[string]gateway.Price{"gpt-fake-1": {Input: 1_000_000, Output: 2, CachedInput: 1}}})
			h.ups["A"].Enqueue(tt.script)
			if resp, b := send(t, h, http.MethodPost, "/v1/chat/completions", teamAKey, tt.req); resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, b)
			}
			waitAccessLines(t, h, 1) // settled

			// All 10 input tokens cached (10 × $1/1M) and 5 output (5 × $2/1M).
			const wantCost = 10*1e-6 + 5*2e-6
			row, total := teamAUsage(t, h)
			if row.InputTokens != 10 || row.OutputTokens != 5 || row.CachedTokens != 10 || row.ReasoningTokens != 5 {
				t.Errorf("usage row %+v, want 10 in (10 cached), 5 out (5 reasoning)", row)
			}
			if row.CostUSD == nil || *row.CostUSD != wantCost || total == nil || *total != wantCost {
				t.Errorf("cost_usd row %v total %v, want %v", row.CostUSD, total, wantCost)
			}
			if c, ok := teamAMetric(t, h, "sluice_usage_cost_usd_total", ""); !ok || c < wantCost*0.999999 || c > wantCost*1.000001 {
				t.Errorf("sluice_usage_cost_usd_total %v (%v), want %v as /admin/usage has it", c, ok, wantCost)
			}
			for kind, want := range map[string]float64{"cached": 10, "reasoning": 5} {
				if n, _ := teamAMetric(t, h, "sluice_usage_tokens_total", kind); n != want {
					t.Errorf("sluice_usage_tokens_total kind %s %v, want %v", kind, n, want)
				}
			}
		})
	}
}

// TestCachedInputPriceZeroIsFree: a cached input price of 0 prices cache
// hits at 0, not at the input price.
func TestCachedInputPriceZeroIsFree(t *testing.T) {
	h, _ := storeHarness(t, gateway.AccountsOptions{Required: true,
		Keys:    []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})},
		Pricing: map[string]gateway.Price{"gpt-fake-1": {Input: 1_000_000, Output: 2, CachedInput: 0}}})
	chatJSON := upstreamtest.ChatCompletionJSON(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "hello")
	h.ups["A"].Enqueue(upstreamtest.Script{Body: withUsage(t, chatJSON,
		`{"prompt_tokens":1000,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":1000}}`)})
	if resp, b := send(t, h, http.MethodPost, "/v1/chat/completions", teamAKey, `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	waitAccessLines(t, h, 1)
	if row, total := teamAUsage(t, h); row.CachedTokens != 1000 || row.CostUSD == nil || *row.CostUSD != 0 || total == nil || *total != 0 {
		t.Fatalf("usage row %+v (cost %v), total cost %v; want 1000 cached tokens costing 0", row, row.CostUSD, total)
	}
}

// TestUsageWithoutItsCountsIsChargedTheEstimate: a usage object that lacks
// the input or the output count ("usage":{}, or only prompt_tokens) is no
// usage: a request that sent output is charged the estimate README "Keys,
// limits and usage" documents, as one whose usage is null is, in its key's
// budget, /admin/usage and the metrics, rather than 0 tokens.
func TestUsageWithoutItsCountsIsChargedTheEstimate(t *testing.T) {
	text := strings.Repeat("generated text ", 20) // 300 bytes: 75 tokens
	chatJSON := upstreamtest.ChatCompletionJSON(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, text)
	responsesJSON := upstreamtest.ResponseJSON(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, text)
	const chatReq = `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`
	const responsesReq = `{"model":"gpt-fake-1","input":"hi"}`
	const asked = `{"model":"gpt-fake-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	const notAsked = `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	const deltas = 50
	for _, tt := range []struct {
		name, path, req string
		script          upstreamtest.Script
		wantOut         int64
	}{
		{"Chat JSON, empty usage", "/v1/chat/completions", chatReq, upstreamtest.Script{Body: withUsage(t, chatJSON, `{}`)}, 75},
		{"Chat JSON, input only", "/v1/chat/completions", chatReq, upstreamtest.Script{Body: withUsage(t, chatJSON, `{"prompt_tokens":3}`)}, 75},
		{"Chat JSON, null output", "/v1/chat/completions", chatReq, upstreamtest.Script{Body: withUsage(t, chatJSON, `{"prompt_tokens":3,"completion_tokens":null}`)}, 75},
		{"Responses JSON, input only", "/v1/responses", responsesReq, upstreamtest.Script{Body: withUsage(t, responsesJSON, `{"input_tokens":3}`)}, 75},
		{"Responses JSON, output only", "/v1/responses", responsesReq, upstreamtest.Script{Body: withUsage(t, responsesJSON, `{"output_tokens":3}`)}, 75},
		{"Chat stream asking usage, empty usage", "/v1/chat/completions", asked, upstreamtest.Script{ChatFrames: chatStreamWithUsage(deltas, `{}`)}, deltas},
		{"Chat stream asking usage, input only", "/v1/chat/completions", asked, upstreamtest.Script{ChatFrames: chatStreamWithUsage(deltas, `{"prompt_tokens":3}`)}, deltas},
		{"Chat stream not asking usage, empty usage", "/v1/chat/completions", notAsked, upstreamtest.Script{ChatFrames: chatStreamWithUsage(deltas, `{}`)}, deltas},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 40}))
			h.ups["A"].Enqueue(tt.script)
			if resp, b := send(t, h, http.MethodPost, tt.path, teamAKey, tt.req); resp.StatusCode != 200 {
				t.Fatalf("first: %d %s", resp.StatusCode, b)
			}
			waitAccessLines(t, h, 1) // settled
			// The estimate's output spent the 40-token budget.
			resp, b := send(t, h, http.MethodPost, tt.path, teamAKey, tt.req)
			limit(t, resp, b, "insufficient_quota")

			wantIn := int64(len(tt.req)+3) / 4
			if row, _ := teamAUsage(t, h); row.InputTokens != wantIn || row.OutputTokens != tt.wantOut {
				t.Errorf("usage row %+v, want the estimate: %d in, %d out", row, wantIn, tt.wantOut)
			}
			if n, ok := teamAMetric(t, h, "sluice_usage_estimated_requests_total", ""); !ok || n != 1 {
				t.Errorf("sluice_usage_estimated_requests_total %v (%v), want 1", n, ok)
			}
		})
	}
}

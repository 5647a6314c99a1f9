package gateway_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// withUsage is a JSON answer with its usage replaced by raw, or removed
// when raw is "".
func withUsage(t *testing.T, body []byte, raw string) []byte {
	t.Helper()
	var err error
	if raw == "" {
		body, err = sjson.DeleteBytes(body, "usage")
	} else {
		body, err = sjson.SetRawBytes(body, "usage", []byte(raw))
	}
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestJSONAnswerWithoutValidUsageIsChargedItsEstimate: a non-streaming
// answer whose upstream usage is missing or not a token count is charged the
// estimate README "Keys, limits and usage" documents (body bytes / 4 as
// input, the answer's output text bytes / 4 as output), in the key's budget,
// /admin/usage and the metrics, rather than nothing.
func TestJSONAnswerWithoutValidUsageIsChargedItsEstimate(t *testing.T) {
	text := strings.Repeat("generated text ", 20) // 300 bytes: about 75 tokens
	responsesJSON := upstreamtest.ResponseJSON(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, text)
	chatJSON := upstreamtest.ChatCompletionJSON(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, text)
	const responsesReq = `{"model":"gpt-fake-1","input":"hi"}`
	const chatReq = `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`
	for _, tt := range []struct {
		name, path, req string
		answer          []byte
	}{
		{"Responses without usage", "/v1/responses", responsesReq, withUsage(t, responsesJSON, "")},
		{"Responses with a negative count", "/v1/responses", responsesReq, withUsage(t, responsesJSON, `{"input_tokens":-5,"output_tokens":6}`)},
		{"Responses with a string count", "/v1/responses", responsesReq, withUsage(t, responsesJSON, `{"input_tokens":"17","output_tokens":6}`)},
		{"Chat without usage", "/v1/chat/completions", chatReq, withUsage(t, chatJSON, "")},
		{"Chat with a fractional count", "/v1/chat/completions", chatReq, withUsage(t, chatJSON, `{"prompt_tokens":1.5,"completion_tokens":6}`)},
		{"Chat with a count over 10^12", "/v1/chat/completions", chatReq, withUsage(t, chatJSON, `{"prompt_tokens":10000000000000,"completion_tokens":6}`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 40}))
			h.ups["A"].Enqueue(upstreamtest.Script{Body: tt.answer})
			if resp, b := send(t, h, http.MethodPost, tt.path, teamAKey, tt.req); resp.StatusCode != 200 {
				t.Fatalf("first: %d %s", resp.StatusCode, b)
			}
			waitAccessLines(t, h, 1) // settled
			// The estimate (about 75 output tokens) spent the 40-token budget.
			resp, b := send(t, h, http.MethodPost, tt.path, teamAKey, tt.req)
			limit(t, resp, b, "insufficient_quota")

			var rep usageReport
			if code := h.getJSON("/admin/usage?key=team-a", &rep); code != 200 {
				t.Fatalf("admin/usage: %d", code)
			}
			wantIn := int64(len(tt.req)+3) / 4
			if rep.Total.Requests != 1 || rep.Total.InputTokens != wantIn || rep.Total.OutputTokens != int64(len(text)+3)/4 {
				t.Fatalf("usage %+v, want 1 request, %d in, %d out", rep.Total, wantIn, (len(text)+3)/4)
			}
			if m := h.metrics(); !strings.Contains(m, `sluice_usage_estimated_requests_total{key="team-a"`) ||
				!strings.Contains(m, `sluice_usage_tokens_total{key="team-a",kind="output"`) {
				t.Fatalf("the estimate is not in /metrics:\n%s", m)
			}
		})
	}
}

// TestJSONAnswerWithoutOutputIsNotEstimated: an answer that generated no
// text is not estimated, as a stream cut before its first delta is not.
func TestJSONAnswerWithoutOutputIsNotEstimated(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	h.ups["A"].Enqueue(upstreamtest.Script{Body: withUsage(t, upstreamtest.ChatCompletionJSON(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, ""), "")})
	if resp, b := send(t, h, http.MethodPost, "/v1/chat/completions", teamAKey, `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	waitAccessLines(t, h, 1) // settled
	var rep usageReport
	if code := h.getJSON("/admin/usage?key=team-a", &rep); code != 200 || rep.Total.Requests != 1 || rep.Total.InputTokens != 0 || rep.Total.OutputTokens != 0 {
		t.Fatalf("admin/usage: %d %+v, want 1 request and no tokens", code, rep.Total)
	}
}

// TestDatedServedModelIsPricedAsItsModel: OpenAI answers a request for
// gpt-5 with "model":"gpt-5-2025-08-07"; the usage row keeps the served name
// and is priced as the model it is a snapshot of, in /admin/usage (after a
// restart too: nothing but the name decides) and in the metrics.
func TestDatedServedModelIsPricedAsItsModel(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	const served = "gpt-fake-1-2025-01-01"
	h.ups["A"].Enqueue(upstreamtest.Script{Body: withUsage(t, upstreamtest.ResponseJSON(upstreamtest.PlaceholderID, served, "hello"),
		`{"input_tokens":17,"output_tokens":6}`)})
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	waitAccessLines(t, h, 1) // settled
	var rep usageReport
	if code := h.getJSON("/admin/usage?key=team-a", &rep); code != 200 || len(rep.Data) != 1 || rep.Data[0].Model != served {
		t.Fatalf("admin/usage: %d %+v, want one row of %s", code, rep.Data, served)
	}
	const want = (17*1.0 + 6*2.0) / 1e6 // gpt-fake-1's price: input 1, output 2
	if rep.Total.CostUSD == nil || *rep.Total.CostUSD != want {
		t.Fatalf("total cost %v, want %v", rep.Total.CostUSD, want)
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_usage_cost_usd_total{key="team-a",model="`+served+`"`) {
		t.Fatalf("no cost in /metrics:\n%s", m)
	}
}

// TestUsageReportShapeIsStable: every row and the total carry cost_usd,
// null when no price applies, and the total is rounded like its rows.
func TestUsageReportShapeIsStable(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	// Two rows priced at gpt-fake-1's price (input 1, output 2): 3e-06 and
	// 5e-06, whose float64 sum is 8.000000000000001e-06.
	for _, a := range []struct {
		served string
		input  int
	}{{"gpt-fake-1-2025-01-01", 1}, {"gpt-fake-1-20250201", 3}} {
		h.ups["A"].Enqueue(upstreamtest.Script{Body: withUsage(t, upstreamtest.ResponseJSON(upstreamtest.PlaceholderID, a.served, "x"),
			`{"input_tokens":`+strconv.Itoa(a.input)+`,"output_tokens":1}`)})
		if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	h.ups["A"].Enqueue(upstreamtest.Script{Body: upstreamtest.ResponseJSON(upstreamtest.PlaceholderID, "unpriced-model", "x")})
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"unpriced-model","input":"hi"}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	waitAccessLines(t, h, 3) // settled

	report := func(query string) (rows []map[string]json.RawMessage, total map[string]json.RawMessage) {
		t.Helper()
		var rep struct {
			Data  []map[string]json.RawMessage `json:"data"`
			Total map[string]json.RawMessage   `json:"total"`
		}
		if code := h.getJSON("/admin/usage"+query, &rep); code != 200 {
			t.Fatalf("admin/usage%s: %d", query, code)
		}
		return rep.Data, rep.Total
	}
	rows, total := report("?key=team-a")
	want := map[string]string{"gpt-fake-1-2025-01-01": "0.000003", "gpt-fake-1-20250201": "0.000005", "unpriced-model": "null"}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for _, r := range rows {
		model := gjson.ParseBytes(r["model"]).Str
		if c, ok := r["cost_usd"]; !ok || string(c) != want[model] {
			t.Fatalf("row %s: cost_usd %s (present: %v), want %s", model, c, ok, want[model])
		}
	}
	if c := string(total["cost_usd"]); c != "0.000008" {
		t.Fatalf("total cost_usd %s, want 0.000008", c)
	}
	// No rows, or none priced: the total still has cost_usd, null.
	if _, total := report("?key=nobody"); string(total["cost_usd"]) != "null" {
		t.Fatalf("empty total: cost_usd %q, want null", total["cost_usd"])
	}
}

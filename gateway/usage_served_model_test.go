package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// TestEstimateOfARoutedAliasIsChargedUnderTheServedModel: a stream served
// through a route target that names its own model, cut after output and not
// continued, is charged its estimate under the model that served it, as a
// completed answer is (README "Keys, limits and usage": an answer is priced
// by the model the upstream answered with), not under the client's alias,
// which the pricing table does not know: /admin/usage has the row with its
// cost, and the metrics the cost series. The served model is the one the
// upstream named in response.created or its first Chat chunk, else the
// target's.
func TestEstimateOfARoutedAliasIsChargedUnderTheServedModel(t *testing.T) {
	const dated = "gpt-fake-1-2025-01-01" // priced as gpt-fake-1 (a snapshot of it)
	cutAfterTwoDeltas := func(model string) upstreamtest.Script {
		// response.created, in_progress, output_item.added,
		// content_part.added, then two text deltas, then the cut.
		frames := upstreamtest.ResponsesStream(upstreamtest.PlaceholderID, model, "one two three four", 4)[:6]
		return upstreamtest.Script{Frames: frames, End: upstreamtest.EndCut}
	}
	const chatBody = `{"model":"slowm","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, path, body string
		script           upstreamtest.Script
		wantModel        string
	}{
		{name: "responses, the upstream names the target's model", path: "/v1/responses",
			body:   `{"model":"slowm","input":"hi","stream":true}`,
			script: upstreamtest.Answer("one two three four", 4).CutAfterDeltas(2), wantModel: "gpt-fake-1"},
		{name: "responses, the upstream names a snapshot", path: "/v1/responses",
			body:   `{"model":"slowm","input":"hi","stream":true}`,
			script: cutAfterTwoDeltas(dated), wantModel: dated},
		{name: "responses, the upstream names no model", path: "/v1/responses",
			body:   `{"model":"slowm","input":"hi","stream":true}`,
			script: cutAfterTwoDeltas(""), wantModel: "gpt-fake-1"},
		{name: "chat, the upstream names the target's model", path: "/v1/chat/completions",
			body:   chatBody,
			script: upstreamtest.Answer("one two three four", 4).CutAfterDeltas(2), wantModel: "gpt-fake-1"},
		{name: "chat, the upstream names a snapshot", path: "/v1/chat/completions",
			body: chatBody,
			// The role chunk, two text deltas, then the cut.
			script:    upstreamtest.Script{ChatFrames: upstreamtest.ChatStream(upstreamtest.PlaceholderID, dated, "one two three four", 4)[:3], End: upstreamtest.EndCut},
			wantModel: dated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			h := newHarness(t, harnessConfig{opts: gateway.Options{
				Routes: []gateway.Route{{Models: []string{"slowm"}, Targets: []gateway.RouteTarget{{Upstream: "A", Model: "gpt-fake-1"}}}},
				Accounts: gateway.AccountsOptions{
					Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, KeyStore: st, Usage: st,
					Pricing: map[string]gateway.Price{"gpt-fake-1": {Input: 1, Output: 2}},
				},
			}})
			h.ups["A"].Enqueue(tc.script)
			resp, b := send(t, h, http.MethodPost, tc.path, teamAKey, tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("cut stream: %d %s", resp.StatusCode, b)
			}
			if got := h.ups["A"].Requests(); len(got) != 1 || !strings.Contains(string(got[0].Body), `"gpt-fake-1"`) {
				t.Fatalf("the upstream was not asked for the target's model: %d requests", len(got))
			}

			rep := waitUsage(t, h, 1)
			// The role chunk counts as a delta on chat (estimateUsage).
			if len(rep.Data) != 1 || rep.Data[0].Model != tc.wantModel || rep.Data[0].Route != "slowm" || rep.Total.OutputTokens < 2 {
				t.Fatalf("/admin/usage: %+v, want one estimated row of model %s on route slowm", rep.Data, tc.wantModel)
			}
			want := (float64(rep.Total.InputTokens)*1 + float64(rep.Total.OutputTokens)*2) / 1e6
			if rep.Total.CostUSD == nil || *rep.Total.CostUSD != want {
				t.Fatalf("/admin/usage cost %v, want %v (priced as gpt-fake-1)", rep.Total.CostUSD, want)
			}
			m := h.metrics()
			for _, series := range []string{
				`sluice_usage_estimated_requests_total{key="team-a",model="` + tc.wantModel + `",route="slowm",target="A"} 1`,
				`sluice_usage_cost_usd_total{key="team-a",model="` + tc.wantModel + `",route="slowm",target="A"} `,
			} {
				if !strings.Contains(m, series) {
					t.Errorf("want %s in:\n%s", series, grepLines(m, "sluice_usage_"))
				}
			}
			if strings.Contains(m, `model="slowm"`) {
				t.Errorf("a usage series is labelled with the client's alias:\n%s", grepLines(m, "sluice_usage_"))
			}
		})
	}
}

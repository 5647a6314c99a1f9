package gateway_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// A Chat upstream's stream cut after content and not continued (no route)
// is charged the last usage the upstream reported before the cut (a running
// usage on every chunk, as vLLM sends with continuous_usage_stats), not an
// estimate, whichever API its client speaks: a Responses client, whose
// events the translation makes of the Chat chunks, is charged as a Chat
// client is, in /admin/usage, the access line and the usage metrics, and
// its response.failed reports that usage.
func TestUsageReportedBeforeACutIsChargedOnEitherSurface(t *testing.T) {
	for _, tc := range []struct{ surface, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"gpt-fake-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
		{"responses", "/v1/responses", `{"model":"gpt-fake-1","stream":true,"input":"hi"}`},
	} {
		t.Run(tc.surface, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}, opts: gateway.Options{Accounts: gateway.AccountsOptions{
				Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, KeyStore: st, Usage: st}}})
			h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: runningUsageChunks("The quick", " brown"), End: upstreamtest.EndCut}) // 10 in, 2 out
			_, evs := postWith(t, h, tc.path, tc.body, map[string]string{"Authorization": "Bearer " + teamAKey})
			if len(evs) == 0 {
				t.Fatal("no events")
			}
			if tc.surface == "responses" {
				last := evs[len(evs)-1].Data
				if typ := gjson.GetBytes(last, "type").Str; typ != "response.failed" {
					t.Fatalf("the cut stream ended with %s", last)
				}
				if u := gjson.GetBytes(last, "response.usage"); u.Get("input_tokens").Int() != 10 || u.Get("output_tokens").Int() != 2 {
					t.Errorf("response.failed reports usage %s, want the upstream's last report (10 in, 2 out)", u.Raw)
				}
			}
			rep := waitUsage(t, h, 1)
			if rep.Total.Requests != 1 || rep.Total.InputTokens != 10 || rep.Total.OutputTokens != 2 {
				t.Fatalf("/admin/usage: %+v, want 1 request with the last usage the upstream reported (10 in, 2 out)", rep.Total)
			}
			waitAccessLines(t, h, 1)
			if line := grepLines(h.logs.String(), "access: request"); !strings.Contains(line, "input_tokens=10") || !strings.Contains(line, "output_tokens=2") {
				t.Errorf("the access line does not show the usage charged (10 in, 2 out): %s", line)
			}
			m := h.metrics()
			if strings.Contains(m, "sluice_usage_estimated_requests_total{") {
				t.Errorf("a request with the upstream's usage was estimated:\n%s", grepLines(m, "sluice_usage_estimated"))
			}
			for kind, n := range map[string]int{"input": 10, "output": 2} {
				series := fmt.Sprintf(`sluice_usage_tokens_total{key="team-a",kind=%q,model="gpt-fake-1",route="",target="A"} %d`, kind, n)
				if !strings.Contains(m, series+"\n") {
					t.Errorf("want %s in:\n%s", series, grepLines(m, "sluice_usage_tokens"))
				}
			}
		})
	}
}

package gateway_test

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
)

// TestUsageCostTooLargeIsNull: a price whose costs overflow a float64 (one
// the config refuses, given through AccountsOptions) makes GET
// /admin/usage answer JSON still: the cost_usd it cannot give is null, in
// the row and the total, and the log says why; never a 200 whose body is
// not JSON.
func TestUsageCostTooLargeIsNull(t *testing.T) {
	h, _ := storeHarness(t, gateway.AccountsOptions{
		Pricing: map[string]gateway.Price{"gpt-fake-1": {Input: math.MaxFloat64, Output: math.MaxFloat64}}})
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", "", simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("request: %d %s", resp.StatusCode, b)
	}
	resp, b := send(t, h, http.MethodGet, "/admin/usage", "", "")
	var rep struct {
		Data []struct {
			Model   string   `json:"model"`
			CostUSD *float64 `json:"cost_usd"`
		} `json:"data"`
		Total map[string]any `json:"total"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("GET /admin/usage: %d %q, want 200 with JSON", resp.StatusCode, b)
	}
	if len(rep.Data) != 1 || rep.Data[0].CostUSD != nil {
		t.Fatalf("rows %s, want one with cost_usd null", b)
	}
	if cost, ok := rep.Total["cost_usd"]; !ok || cost != nil {
		t.Fatalf("total %v, want cost_usd null", rep.Total)
	}
	if !strings.Contains(h.logs.String(), "a usage cost is too large for a JSON number") {
		t.Fatalf("no warning in the log:\n%s", h.logs.String())
	}
}

// TestUsageRangeBound: GET /admin/usage takes at most store.MaxUsageDays
// days from from to to, whichever store keeps the totals: a longer range is
// the client's 400 invalid_date naming from, not a store failure.
func TestUsageRangeBound(t *testing.T) {
	h, _ := keyedHarness(t)
	for _, tt := range []struct {
		from, to string
		status   int
	}{
		{"2016-11-30", "2026-11-28", http.StatusOK},         // 3650 days
		{"2016-11-20", "2026-11-28", http.StatusOK},         // 3660 days
		{"2016-11-19", "2026-11-28", http.StatusBadRequest}, // 3661
		{"1900-01-01", "2026-11-28", http.StatusBadRequest},
	} {
		resp, b := send(t, h, http.MethodGet, "/admin/usage?from="+tt.from+"&to="+tt.to, "", "")
		if resp.StatusCode != tt.status {
			t.Errorf("%s..%s: %d %s, want %d", tt.from, tt.to, resp.StatusCode, b, tt.status)
			continue
		}
		if tt.status == http.StatusBadRequest {
			var e struct {
				Error struct{ Code, Param, Message string }
			}
			if json.Unmarshal(b, &e) != nil || e.Error.Code != "invalid_date" || e.Error.Param != "from" || !strings.Contains(e.Error.Message, "3660 days") {
				t.Errorf("%s..%s: %s, want invalid_date naming from and the bound", tt.from, tt.to, b)
			}
		}
	}
}

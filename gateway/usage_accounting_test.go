package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// A stream that ends without usage before any output (the upstream cut it
// after its lifecycle events, and so did the replay) counts one request in
// GET /admin/usage, with no tokens, as it does in
// sluice_usage_requests_total: the two count the same requests. (One cut
// after output is charged an estimate: usage_estimate_test.go.)
func TestUsageWithoutUsageCountsTheRequestInTheStore(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	h.ups["A"].Enqueue(upstreamtest.CutAfter(2), upstreamtest.CutAfter(2))
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "response.failed") || strings.Contains(string(b), `"usage":{`) {
		t.Fatalf("cut stream: %d %s", resp.StatusCode, b)
	}
	waitAccessLines(t, h, 1)
	var rep usageReport
	if code := h.getJSON("/admin/usage?key=team-a", &rep); code != http.StatusOK {
		t.Fatalf("admin/usage: %d", code)
	}
	if rep.Total.Requests != 1 || rep.Total.InputTokens != 0 || rep.Total.OutputTokens != 0 || len(rep.Data) != 1 || rep.Data[0].Model != "gpt-fake-1" {
		t.Fatalf("/admin/usage after a stream without usage: %+v, want 1 request and no tokens", rep)
	}
	series := `sluice_usage_requests_total{key="team-a",model="gpt-fake-1",route="",target="A"} 1`
	if m := h.metrics(); !strings.Contains(m, series) {
		t.Fatalf("want %s in:\n%s", series, grepLines(m, "sluice_usage_requests_total"))
	}
}

// A model name with control characters (here a NUL, which the usage store
// refuses in a name) is counted under the name without them, in the store
// as in the metrics, and nothing is left failing in the usage batch.
func TestUsageOfAModelWithControlCharactersIsStored(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	// The fake upstream echoes the client's model.
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-x\u0000z\u0007","input":"hi"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	waitAccessLines(t, h, 1)
	var rep usageReport
	if code := h.getJSON("/admin/usage?key=team-a", &rep); code != http.StatusOK {
		t.Fatalf("admin/usage: %d", code)
	}
	if len(rep.Data) != 1 || rep.Data[0].Model != "gpt-xz" || rep.Data[0].Requests != 1 || rep.Data[0].InputTokens == 0 {
		t.Fatalf("/admin/usage: %+v, want one request of model gpt-xz with its tokens", rep.Data)
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_usage_requests_total{key="team-a",model="gpt-xz"`) {
		t.Fatalf("no series of model gpt-xz in:\n%s", grepLines(m, "sluice_usage_requests_total"))
	}
	if logs := h.logs.String(); strings.Contains(logs, "recording usage failed") || strings.Contains(logs, "refused by the store") {
		t.Fatalf("usage write failed:\n%s", grepLines(logs, "usage"))
	}
}

// refusingStore is a usage store that refuses for good (store.ErrInvalid)
// the totals of one model and counts how often it was asked to add them.
type refusingStore struct {
	store.UsageStore
	model string
	asked atomic.Int64
}

func (r *refusingStore) AddUsage(ctx context.Context, u store.UsageRecord) error {
	if u.Model == r.model {
		r.asked.Add(1)
		return fmt.Errorf("store: add usage: %w: refused", store.ErrInvalid)
	}
	return r.UsageStore.AddUsage(ctx, u)
}

// A total the store refuses for good is dropped with one warning naming
// its key and model, not retried at every flush, and the other totals of
// the same flush are stored.
func TestUsageRefusedForGoodIsDroppedOnce(t *testing.T) {
	st := openStore(t, t.TempDir())
	usage := &refusingStore{UsageStore: st, model: "gpt-refused"}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, KeyStore: st, Usage: usage,
		UsageFlushInterval: time.Hour}}}) // only reads flush
	for _, model := range []string{"gpt-refused", "gpt-fake-1"} {
		if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"`+model+`","input":"hi"}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, b)
		}
	}
	waitAccessLines(t, h, 2)
	var rep usageReport
	for range 3 { // each read flushes
		if code := h.getJSON("/admin/usage?key=team-a", &rep); code != http.StatusOK {
			t.Fatalf("admin/usage: %d", code)
		}
	}
	if len(rep.Data) != 1 || rep.Data[0].Model != "gpt-fake-1" || rep.Data[0].Requests != 1 {
		t.Fatalf("/admin/usage: %+v, want gpt-fake-1's request only", rep.Data)
	}
	if n := usage.asked.Load(); n != 1 {
		t.Fatalf("the refused total was offered to the store %d times, want once", n)
	}
	logs := h.logs.String()
	if warns := grepLines(logs, "[WARN]"); strings.Count(warns, "\n")+1 != 1 ||
		!strings.Contains(warns, "refused by the store; dropped: key=team-a model=gpt-refused") {
		t.Fatalf("want one warning naming team-a and gpt-refused:\n%s", warns)
	}
}

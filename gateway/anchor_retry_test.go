package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/store"
)

// anchorOutage is a store whose anchor writes fail while down.
type anchorOutage struct {
	store.Store
	down atomic.Bool
}

func (o *anchorOutage) PutAnchor(ctx context.Context, a store.Anchor) error {
	if o.down.Load() {
		return fmt.Errorf("test outage: %w", store.ErrUnavailable)
	}
	return o.Store.PutAnchor(ctx, a)
}

// TestAnchorsFailedInAnOutageWaitTogether: every response served while the
// store refuses anchors is written once it takes them again, and the outage
// costs the operator one log line per kind with a count, not one per
// response, and a gauge of the anchors waiting (README "Continuity").
func TestAnchorsFailedInAnOutageWaitTogether(t *testing.T) {
	st := &anchorOutage{Store: openStore(t, t.TempDir())}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st}})
	st.down.Store(true)
	const n = 30
	ids := make([]string, 0, n)
	for range n {
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		id := gjson.GetBytes(b, "id").Str
		if resp.StatusCode != http.StatusOK || id == "" {
			t.Fatalf("a response during the outage: %d %s", resp.StatusCode, b)
		}
		ids = append(ids, id)
	}
	logs := h.logs.String()
	for _, line := range []string{"recording anchor failed; retrying in the background", "response served without a durable anchor"} {
		if c := strings.Count(logs, line); c != 1 {
			t.Errorf("%q logged %d times for %d responses, want once with a count:\n%s", line, c, n, grepLines(logs, "anchor"))
		}
	}
	if !strings.Contains(h.metrics(), fmt.Sprintf("continuity_anchors_waiting %d", n)) {
		t.Fatalf("the anchors waiting are not shown:\n%s", grep(h.metrics(), "continuity_anchors"))
	}
	for _, id := range ids {
		if code := h.getJSON("/admin/continuity/"+id, nil); code != http.StatusNotFound {
			t.Fatalf("an anchor written during the outage: %d", code)
		}
	}

	st.down.Store(false)
	eventually(t, "every anchor written once the store is back", func() bool {
		return strings.Contains(h.metrics(), "continuity_anchors_waiting 0")
	})
	for _, id := range ids {
		if code := h.getJSON("/admin/continuity/"+id, nil); code != http.StatusOK {
			t.Fatalf("anchor of %s after the outage: %d", id, code)
		}
	}
}

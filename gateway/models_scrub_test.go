package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestModelsListScrubbedIDsOnce: an upstream that lists a model id holding
// its own API key shows the client the id with the key redacted, and two
// ids that differ only in a redacted key are listed once.
func TestModelsListScrubbedIDsOnce(t *testing.T) {
	const keyA, keyB = "sk-upstream-key-aaaa", "sk-upstream-key-bbbb"
	h := newHarness(t, harnessConfig{
		keys: map[string]string{"A": keyA, "B": keyB},
		upstreams: []upstreamtest.Options{
			{Name: "A", APIKey: keyA, Models: []string{"ft:" + keyA, "m-a"}},
			{Name: "B", APIKey: keyB, Models: []string{"ft:" + keyB, "m-b"}},
		},
	})
	h.pool.ProbeAll(context.Background())
	var list struct {
		Data []struct{ ID, Object, OwnedBy string }
	}
	if code := h.getJSON("/v1/models", &list); code != 200 {
		t.Fatalf("models %d", code)
	}
	var ids []string
	for _, m := range list.Data {
		if strings.Contains(m.ID, keyA) || strings.Contains(m.ID, keyB) {
			t.Fatalf("models list an upstream key: %+v", list.Data)
		}
		ids = append(ids, m.ID)
	}
	if got := strings.Join(ids, ","); got != "ft:[redacted],m-a,m-b" {
		t.Fatalf("models %q, want each shown id once: ft:[redacted],m-a,m-b", got)
	}
}

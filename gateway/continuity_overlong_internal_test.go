package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/store"
)

// TestResolveOverlongIDIsAMiss: an id the store refuses (store.ErrInvalid)
// has no anchor; the lookup is a miss, not a store outage (no fail-closed
// error). The HTTP surface answers such ids with a 400
// before any lookup (resourceID, previous_response_id's check); this holds
// for any other caller.
func TestResolveOverlongIDIsAMiss(t *testing.T) {
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: "http://127.0.0.1:1/v1"}}, upstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Pool: pool, Store: st, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	res := s.cont.resolve(context.Background(), hostabi.SurfaceResponsesJSON, strings.Repeat("a", store.MaxIDLen+1), requestScope{})
	if res.err != nil || res.owner != "" {
		t.Fatalf("resolve: owner %q, err %v", res.owner, res.err)
	}
}

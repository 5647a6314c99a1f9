package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// failingConversations is a conversation store whose reads and deletes
// fail with the error in failure while one is set.
type failingConversations struct {
	*store.PebbleStore
	failure atomic.Pointer[error]
}

func (f *failingConversations) failed() error {
	if e := f.failure.Load(); e != nil {
		return *e
	}
	return nil
}

func (f *failingConversations) History(ctx context.Context, id string, maxItems, maxBytes int) ([]json.RawMessage, error) {
	if err := f.failed(); err != nil {
		return nil, err
	}
	return f.PebbleStore.History(ctx, id, maxItems, maxBytes)
}

func (f *failingConversations) DeleteTurn(ctx context.Context, id string) error {
	if err := f.failed(); err != nil {
		return err
	}
	return f.PebbleStore.DeleteTurn(ctx, id)
}

// failingAnchors is a store whose anchor reads fail with the error in
// failure while one is set.
type failingAnchors struct {
	*store.PebbleStore
	failure atomic.Pointer[error]
}

func (f *failingAnchors) GetAnchor(ctx context.Context, id string) (store.Anchor, error) {
	if e := f.failure.Load(); e != nil {
		return store.Anchor{}, *e
	}
	return f.PebbleStore.GetAnchor(ctx, id)
}

// storeFailures are a store out for the moment (a Redis that is down, a
// full disk) and one closed until the gateway restarts (a damaged file),
// with the answer each gets: README promises Retry-After: 2 and a retry for
// the first; the second says an operator must act, with no Retry-After and
// no "retry" that no wait would honour. Both stay the 503
// upstream_unavailable.
var storeFailures = []struct {
	name           string
	failure        error
	wantRetryAfter string
	wantInMessage  string
}{
	{"out for the moment", fmt.Errorf("test outage: %w", store.ErrUnavailable), "2", "; retry the request"},
	{"closed until restart", fmt.Errorf("test damage: %w: %w", store.ErrUnavailable, store.ErrUnavailableUntilRestart), "",
		"until an operator restores it and restarts the gateway"},
}

// wantStoreFailureAnswer sends method path body and checks the answer is
// the 503 for a store that failed, with the Retry-After retryAfter and a
// message saying each of inMessage.
func wantStoreFailureAnswer(t *testing.T, h *harness, method, path, body, retryAfter string, inMessage ...string) {
	t.Helper()
	req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	msg := gjson.GetBytes(b, "error.message").Str
	says := true
	for _, m := range inMessage {
		says = says && strings.Contains(msg, m)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || gjson.GetBytes(b, "error.code").Str != "upstream_unavailable" ||
		resp.Header.Get("Retry-After") != retryAfter || !says || strings.Contains(msg, "retry") != (retryAfter != "") {
		t.Errorf("%s %s: %d Retry-After %q %s; want 503 upstream_unavailable, Retry-After %q, a message saying %q",
			method, path, resp.StatusCode, resp.Header.Get("Retry-After"), b, retryAfter, inMessage)
	}
}

// TestStoreUnavailableAnswersOfAChatConversation: a follow-up of a
// response a Chat upstream served, and DELETE of it, need the
// conversation the gateway keeps (README "Privacy"); a store that cannot
// read it answers as storeFailures say, and the upstream is not called.
func TestStoreUnavailableAnswersOfAChatConversation(t *testing.T) {
	for _, tc := range storeFailures {
		t.Run(tc.name, func(t *testing.T) {
			convs := &failingConversations{PebbleStore: openStore(t, t.TempDir())}
			h := newHarness(t, harnessConfig{opts: gateway.Options{Store: convs.PebbleStore, Conversations: convs},
				protocol: map[string]string{"C": "chat"}, upstreams: []upstreamtest.Options{{Name: "C"}}})
			id := h.createResponse(`{"model":"gpt-fake-1","input":"one"}`)
			sent := h.ups["C"].RequestCount()
			convs.failure.Store(&tc.failure)

			wantStoreFailureAnswer(t, h, http.MethodPost, "/v1/responses",
				`{"model":"gpt-fake-1","input":"two","previous_response_id":"`+id+`"}`, tc.wantRetryAfter, tc.wantInMessage)
			wantStoreFailureAnswer(t, h, http.MethodDelete, "/v1/responses/"+id, "", tc.wantRetryAfter, tc.wantInMessage)
			if n := h.ups["C"].RequestCount(); n != sent {
				t.Errorf("the upstream was called %d times with the store failed", n-sent)
			}
		})
	}
}

// TestStoreUnavailableAnswersOfAnOwnerLookup: a follow-up and a GET of a
// response whose owner the store cannot read fail closed ("owner lookup
// failed") as storeFailures say.
func TestStoreUnavailableAnswersOfAnOwnerLookup(t *testing.T) {
	for _, tc := range storeFailures {
		t.Run(tc.name, func(t *testing.T) {
			st := &failingAnchors{PebbleStore: openStore(t, t.TempDir())}
			h := continuityHarness(t, st, gateway.Options{})
			st.failure.Store(&tc.failure)
			const id = "resp_not_in_memory"
			wantStoreFailureAnswer(t, h, http.MethodPost, "/v1/responses",
				`{"model":"gpt-fake-1","input":"two","previous_response_id":"`+id+`"}`, tc.wantRetryAfter, "owner lookup failed", tc.wantInMessage)
			wantStoreFailureAnswer(t, h, http.MethodGet, "/v1/responses/"+id+"?stream=true", "", tc.wantRetryAfter, "owner lookup failed", tc.wantInMessage)
			if n := h.ups["A"].RequestCount() + h.ups["B"].RequestCount(); n != 0 {
				t.Errorf("%d upstream calls with the store failed", n)
			}
		})
	}
}

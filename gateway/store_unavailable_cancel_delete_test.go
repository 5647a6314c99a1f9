package gateway_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// unreadableLogs is a stream-log store whose reads of a response's log
// fail with the error in failure while one is set.
type unreadableLogs struct {
	store.StreamLogStore
	failure atomic.Pointer[error]
}

func (u *unreadableLogs) GetStreamLog(ctx context.Context, id string) (store.StreamLog, error) {
	if e := u.failure.Load(); e != nil {
		return store.StreamLog{}, *e
	}
	return u.StreamLogStore.GetStreamLog(ctx, id)
}

// TestStoreUnavailableAnswersOfCancelAndDelete: a cancel or DELETE of a
// response whose durable log the store cannot read may be of one another
// replica runs, or wrote before a restart; the answer is the 503 of a
// store that cannot be read, as storeFailures say, never the 404 a client
// takes as "gone for good".
func TestStoreUnavailableAnswersOfCancelAndDelete(t *testing.T) {
	for _, tc := range storeFailures {
		t.Run(tc.name, func(t *testing.T) {
			logs := &unreadableLogs{StreamLogStore: openStore(t, t.TempDir())}
			opts := resumeOpts()
			opts.Resume.Store = logs
			h := newHarness(t, harnessConfig{opts: opts})
			logs.failure.Store(&tc.failure)
			const id = "resp_kept_in_the_store"
			wantStoreFailureAnswer(t, h, http.MethodPost, "/v1/responses/"+id+"/cancel", "", tc.wantRetryAfter, tc.wantInMessage)
			wantStoreFailureAnswer(t, h, http.MethodDelete, "/v1/responses/"+id, "", tc.wantRetryAfter, tc.wantInMessage)
			if n := h.ups["A"].RequestCount(); n != 0 {
				t.Errorf("%d upstream calls with the store failed", n)
			}
		})
	}
}

// unreadableTurns is a conversation store whose reads of a response's
// conversation items (GetTurn) fail with the error in failure while one
// is set; deleting them works.
type unreadableTurns struct {
	*store.PebbleStore
	failure atomic.Pointer[error]
}

func (u *unreadableTurns) GetTurn(ctx context.Context, id string) (store.Turn, error) {
	if e := u.failure.Load(); e != nil {
		return store.Turn{}, *e
	}
	return u.PebbleStore.GetTurn(ctx, id)
}

// TestStoreUnavailableAnswerOfADeleteOfAChatResponse: DELETE of a
// response a Chat upstream served (which keeps nothing: the gateway's
// conversation items are all there is, README "Privacy") whose items the
// store cannot read is the 503 of a store that cannot be read, not a 404
// saying there is nothing to delete while the items stay.
func TestStoreUnavailableAnswerOfADeleteOfAChatResponse(t *testing.T) {
	for _, tc := range storeFailures {
		t.Run(tc.name, func(t *testing.T) {
			convs := &unreadableTurns{PebbleStore: openStore(t, t.TempDir())}
			// No logs: the response is one whose log is gone (older than
			// streams.resume_window), its conversation items kept.
			h := newHarness(t, harnessConfig{opts: gateway.Options{Store: convs.PebbleStore, Conversations: convs,
				Resume: gateway.ResumeOptions{Window: -1}},
				protocol: map[string]string{"C": "chat"}, upstreams: []upstreamtest.Options{{Name: "C"}}})
			id := h.createResponse(`{"model":"gpt-fake-1","input":"one"}`)
			convs.failure.Store(&tc.failure)
			wantStoreFailureAnswer(t, h, http.MethodDelete, "/v1/responses/"+id, "", tc.wantRetryAfter, tc.wantInMessage)
			if _, err := convs.PebbleStore.GetTurn(context.Background(), id); err != nil {
				t.Errorf("the conversation items after the refused DELETE: %v", err)
			}
		})
	}
}

// unreadableAnchors is a store whose reads of a response's anchor fail
// with the error in failure while one is set.
type unreadableAnchors struct {
	*store.PebbleStore
	failure atomic.Pointer[error]
}

func (u *unreadableAnchors) GetAnchor(ctx context.Context, id string) (store.Anchor, error) {
	if e := u.failure.Load(); e != nil {
		return store.Anchor{}, *e
	}
	return u.PebbleStore.GetAnchor(ctx, id)
}

// TestDeleteWithAnUnreadableAnchorDeletesNothing: a DELETE of a response
// whose anchor (which upstream owns it) the store cannot read is the 503 of
// a store that cannot be read, and deletes nothing: deleting the gateway's
// copy then would answer 200 while the owner upstream's copy stays, with
// nobody told. Once the store reads again, the response is there and the
// DELETE goes through, at the owner too.
func TestDeleteWithAnUnreadableAnchorDeletesNothing(t *testing.T) {
	for _, tc := range storeFailures {
		t.Run(tc.name, func(t *testing.T) {
			st := &unreadableAnchors{PebbleStore: openStore(t, t.TempDir())}
			opts := resumeOpts()
			opts.Store, opts.Resume.Store = st, st
			first := newHarness(t, harnessConfig{opts: opts})
			id := first.createResponse(`{"model":"gpt-fake-1","input":"one"}`)
			// Another gateway on the same store (a restart, another
			// replica): the anchor is read from the store, not memory.
			h := newHarness(t, harnessConfig{opts: opts})
			st.failure.Store(&tc.failure)
			wantStoreFailureAnswer(t, h, http.MethodDelete, "/v1/responses/"+id, "", tc.wantRetryAfter, tc.wantInMessage)
			st.failure.Store(nil)
			if status, body := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret"); status != http.StatusOK {
				t.Fatalf("GET after the refused DELETE: %d %s", status, body)
			}
			if status, body := h.call(http.MethodDelete, "/v1/responses/"+id, "sk-client-secret"); status != http.StatusOK {
				t.Fatalf("DELETE once the store reads again: %d %s", status, body)
			}
			deletes := 0
			for _, r := range h.ups["A"].Requests() {
				if r.Method == http.MethodDelete {
					deletes++
				}
			}
			if deletes != 1 {
				t.Fatalf("the owner got %d DELETEs, want 1", deletes)
			}
		})
	}
}

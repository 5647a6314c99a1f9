package gateway_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// deleteAs sends DELETE /v1/responses/{id} with the client key key.
func deleteAs(t *testing.T, h *harness, key, id string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, h.url+"/v1/responses/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// wantDeleted checks a DELETE answered OpenAI's deletion object.
func wantDeleted(t *testing.T, id string, status int, body []byte) {
	t.Helper()
	if status != http.StatusOK || gjson.GetBytes(body, "id").Str != id || !gjson.GetBytes(body, "deleted").Bool() {
		t.Fatalf("DELETE %s: %d %s", id, status, body)
	}
}

// wantTurnGone checks the store no longer holds the response's items.
func wantTurnGone(t *testing.T, st store.ConversationStore, id string) {
	t.Helper()
	if turn, err := st.GetTurn(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after DELETE the store still holds the turn of %s (%d input items), err %v", id, len(turn.Input), err)
	}
}

// wantPreviousNotFound posts a follow-up of prev and checks it is refused
// with previous_response_not_found without reaching the upstream.
func wantPreviousNotFound(t *testing.T, h *harness, up *upstreamtest.Server, prev string) []byte {
	t.Helper()
	before := up.RequestCount()
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"next","previous_response_id":"`+prev+`"}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || gjson.GetBytes(b, "error.code").Str != "previous_response_not_found" {
		t.Fatalf("follow-up of %s: %d %s, want 400 previous_response_not_found", prev, resp.StatusCode, b)
	}
	if n := up.RequestCount(); n != before {
		t.Fatalf("the refused follow-up reached the upstream (%d requests, was %d): %s", n, before, up.Requests()[n-1].Body)
	}
	return b
}

// TestDeleteForgetsChatConversationItems: DELETE of a response a Chat
// upstream served removes its conversation items from the store (README
// "Privacy"), and a later turn of the same chain is refused with
// previous_response_not_found rather than sending the deleted text
// upstream again; the turns before it are untouched. Chat upstreams keep
// nothing, so none is sent a DELETE.
func TestDeleteForgetsChatConversationItems(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st, Conversations: st},
		protocol: map[string]string{"C": "chat"}, upstreams: []upstreamtest.Options{{Name: "C"}}})
	up := h.ups["C"]
	r1 := h.createResponse(`{"model":"gpt-fake-1","input":"one"}`)
	r2 := h.createResponse(`{"model":"gpt-fake-1","input":"TOPSECRET-4242","previous_response_id":"` + r1 + `"}`)
	r3 := h.createResponse(`{"model":"gpt-fake-1","input":"three","previous_response_id":"` + r2 + `"}`)
	if turn, err := st.GetTurn(context.Background(), r2); err != nil || !strings.Contains(string(turn.Input[0]), "TOPSECRET") {
		t.Fatalf("the turn of %s was not kept: %+v, %v", r2, turn, err)
	}

	status, body := deleteAs(t, h, "sk-client-secret", r2)
	wantDeleted(t, r2, status, body)
	wantTurnGone(t, st, r2)
	sent := up.RequestCount()
	wantPreviousNotFound(t, h, up, r2)
	// r3 exists, but its chain passes through r2: the message says so.
	if b := wantPreviousNotFound(t, h, up, r3); !strings.Contains(gjson.GetBytes(b, "error.message").Str, "'"+r2+"') was deleted or expired") {
		t.Fatalf("follow-up of %s: %s, want a message naming the deleted %s", r3, b, r2)
	}

	// The turn before the deleted one still continues.
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"again","previous_response_id":"`+r1+`"}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("follow-up of %s: %d %s", r1, resp.StatusCode, b)
	}
	for k, r := range up.Requests() {
		if r.Method == http.MethodDelete {
			t.Errorf("the Chat upstream was sent %s %s", r.Method, r.Path)
		}
		if k >= sent && strings.Contains(string(r.Body), "TOPSECRET") {
			t.Errorf("the deleted text reached the upstream after the DELETE: %s", r.Body)
		}
	}
}

// TestDeleteAfterTheLogForgetsChatConversationItems: once the response's
// log is gone (here: logs off), DELETE of a Chat upstream's response still
// removes its kept items for the key that created it; another key gets the
// 404 of an unknown id and removes nothing.
func TestDeleteAfterTheLogForgetsChatConversationItems(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st, Conversations: st, Resume: gateway.ResumeOptions{Window: -1}},
		protocol: map[string]string{"C": "chat"}, upstreams: []upstreamtest.Options{{Name: "C"}}})
	id := h.createResponse(`{"model":"gpt-fake-1","input":"TOPSECRET-4242"}`)

	if status, body := deleteAs(t, h, "sk-another-client", id); status != http.StatusNotFound {
		t.Fatalf("DELETE by another key: %d %s, want 404", status, body)
	}
	if _, err := st.GetTurn(context.Background(), id); err != nil {
		t.Fatalf("another key's DELETE removed the turn: %v", err)
	}

	status, body := deleteAs(t, h, "sk-client-secret", id)
	wantDeleted(t, id, status, body)
	wantTurnGone(t, st, id)
	wantPreviousNotFound(t, h, h.ups["C"], id)
	if status, body := deleteAs(t, h, "sk-client-secret", id); status != http.StatusNotFound {
		t.Fatalf("second DELETE: %d %s, want 404", status, body)
	}
}

// TestDeleteReachesTheResponsesOwner: DELETE of a response the gateway
// answers itself (it holds its log) is also sent to the Responses upstream
// that created it, with that upstream's key, so the provider does not keep
// its copy; with continuity.portable the kept items go as well. The
// owner's key never reaches the client.
func TestDeleteReachesTheResponsesOwner(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st, Conversations: st, Portable: true},
		keys: map[string]string{"A": ownerKey}})
	up := h.ups["A"]
	id := h.createResponse(`{"model":"gpt-fake-1","input":"PORTABLE-SECRET-99"}`)
	if _, err := st.GetTurn(context.Background(), id); err != nil {
		t.Fatalf("the portable turn was not kept: %v", err)
	}

	status, body := deleteAs(t, h, "sk-client-secret", id)
	wantDeleted(t, id, status, body)
	if strings.Contains(string(body), ownerKey) {
		t.Fatalf("the answer carries the upstream's key: %s", body)
	}
	var deletes []upstreamtest.Request
	for _, r := range up.Requests() {
		if r.Method == http.MethodDelete {
			deletes = append(deletes, r)
		}
	}
	if len(deletes) != 1 || deletes[0].Path != "/v1/responses/"+id || deletes[0].Header.Get("Authorization") != "Bearer "+ownerKey {
		t.Fatalf("the owner was sent %d DELETEs: %+v", len(deletes), deletes)
	}
	wantTurnGone(t, st, id)
}

package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// conversationHarness: two Responses upstreams, A holding conversation
// conv_onA and B holding conv_onB, each answering any other conversation
// with OpenAI's 404, so a request sent to the wrong one is visible;
// continuity in st.
func conversationHarness(t *testing.T, st store.Store, opts gateway.Options) *harness {
	t.Helper()
	opts.Store = st
	return newHarness(t, harnessConfig{opts: opts, upstreams: []upstreamtest.Options{
		{Name: "A", Conversations: []string{"conv_onA"}},
		{Name: "B", Conversations: []string{"conv_onB"}},
	}})
}

// sendAs posts body to /v1/responses with key as its bearer credential
// ("" for none) and returns the status and the whole answer (a stream's
// events too).
func sendAs(t *testing.T, h *harness, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// firstServed sends body until an upstream serves it (a conversation
// Sluice has not seen goes where any request goes, and the upstream
// without it answers 404), at most twice with two upstreams taking turns,
// and returns the response id.
func firstServed(t *testing.T, h *harness, key, body string) string {
	t.Helper()
	for range 2 {
		if status, b := sendAs(t, h, key, body); status == http.StatusOK {
			return gjson.Get(b, "id").Str
		}
	}
	t.Fatalf("no upstream served %s", body)
	return ""
}

// TestConversationStaysOnItsUpstreamInAPool: once an upstream served a
// response in a conversation, every later request naming it (as an id or
// as {"id": …}, JSON or stream) goes to that upstream, never to the other
// one the model's pool alternates with, which would answer that the
// conversation does not exist.
func TestConversationStaysOnItsUpstreamInAPool(t *testing.T) {
	h := conversationHarness(t, openStore(t, t.TempDir()), gateway.Options{})
	if id := firstServed(t, h, "", `{"model":"gpt-fake-1","input":"hi","conversation":"conv_onA"}`); owner(id) != "A" {
		t.Fatalf("first response %q, want one of A's", id)
	}
	beforeB := h.ups["B"].RequestCount()
	for i, body := range []string{
		`{"model":"gpt-fake-1","input":"hi","conversation":"conv_onA"}`,
		`{"model":"gpt-fake-1","input":"hi","conversation":{"id":"conv_onA"}}`,
		`{"model":"gpt-fake-1","input":"hi","conversation":"conv_onA","stream":true}`,
		`{"model":"gpt-fake-1","input":"hi","conversation":{"id":"conv_onA"},"stream":true}`,
		`{"model":"gpt-fake-1","input":"hi","conversation":"conv_onA"}`,
		`{"model":"gpt-fake-1","input":"hi","conversation":"conv_onA","stream":true}`,
	} {
		status, b := sendAs(t, h, "", body)
		if status != http.StatusOK || strings.Contains(b, "not found") || !strings.Contains(b, "resp_A_") {
			t.Fatalf("request %d (%s): %d %s, want A's answer", i, body, status, b)
		}
	}
	if n := h.ups["B"].RequestCount() - beforeB; n != 0 {
		t.Fatalf("B, which does not hold the conversation, got %d requests", n)
	}
}

// TestConversationOwnerFailingIsNotFailedOver: on an ordered route whose
// first target holds the conversation, that target failing is what the
// client hears (the 503 of a pinned request's owner), not the next
// target's 404 "Conversation … not found", which the next target is never
// sent.
func TestConversationOwnerFailingIsNotFailedOver(t *testing.T) {
	h := conversationHarness(t, openStore(t, t.TempDir()), gateway.Options{Routes: routeAB()})
	if status, b := sendAs(t, h, "", `{"model":"m","input":"hi","conversation":"conv_onA"}`); status != http.StatusOK {
		t.Fatalf("first request: %d %s", status, b)
	}
	beforeB := h.ups["B"].RequestCount()
	for _, stream := range []string{"false", "true"} {
		for range 5 {
			h.ups["A"].Enqueue(upstreamtest.Status5xx(http.StatusInternalServerError))
		}
		status, b := sendAs(t, h, "", `{"model":"m","input":"hi","stream":`+stream+`,"conversation":"conv_onA"}`)
		if strings.Contains(b, "not found") || !strings.Contains(b, "upstream_unavailable") || !strings.Contains(b, "owns conversation") {
			t.Fatalf("stream=%s: %d %s, want the owner's failure as upstream_unavailable", stream, status, b)
		}
		if stream == "false" && status != http.StatusServiceUnavailable {
			t.Fatalf("JSON: %d %s, want 503", status, b)
		}
	}
	if n := h.ups["B"].RequestCount() - beforeB; n != 0 {
		t.Fatalf("B, which does not hold the conversation, got %d requests", n)
	}
}

// TestKeysCannotUseAnotherKeysConversation: with Sluice keys, a
// conversation Sluice saw served for one key is, to every other key, a
// conversation that does not exist (OpenAI's 404, param conversation), and
// no upstream is called (SECURITY.md); the key that uses it keeps using it.
func TestKeysCannotUseAnotherKeysConversation(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := conversationHarness(t, st, gateway.Options{Routes: routeAB(), Accounts: gateway.AccountsOptions{Required: true,
		Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{}), keyRec("team-b", teamBKey, nil, store.KeyLimits{})}}})
	if status, b := sendAs(t, h, teamAKey, `{"model":"m","input":"secret of A","conversation":"conv_onA"}`); status != http.StatusOK {
		t.Fatalf("team-a: %d %s", status, b)
	}
	status, own := sendAs(t, h, teamBKey, `{"model":"m","input":"mine"}`)
	if status != http.StatusOK {
		t.Fatalf("team-b's own response: %d %s", status, own)
	}
	before := h.ups["A"].RequestCount() + h.ups["B"].RequestCount()
	for _, body := range []string{
		`{"model":"m","input":"what did they say?","conversation":"conv_onA"}`,
		`{"model":"m","input":"what did they say?","conversation":{"id":"conv_onA"},"stream":true}`,
		// With a previous response of its own, which pins the request: the
		// conversation is still another key's.
		`{"model":"m","input":"what did they say?","conversation":"conv_onA","previous_response_id":"` + gjson.Get(own, "id").Str + `"}`,
	} {
		status, b := sendAs(t, h, teamBKey, body)
		if status != http.StatusNotFound || gjson.Get(b, "error.param").Str != "conversation" ||
			gjson.Get(b, "error.message").Str != "Conversation with id 'conv_onA' not found." ||
			gjson.Get(b, "error.type").Str != "invalid_request_error" || gjson.Get(b, "error.code").Type != gjson.Null {
			t.Fatalf("team-b %s: %d %s, want OpenAI's 404 for an unknown conversation", body, status, b)
		}
	}
	if n := h.ups["A"].RequestCount() + h.ups["B"].RequestCount() - before; n != 0 {
		t.Fatalf("team-b's requests reached the upstreams %d times", n)
	}
	if status, b := sendAs(t, h, teamAKey, `{"model":"m","input":"more","conversation":"conv_onA"}`); status != http.StatusOK {
		t.Fatalf("team-a again: %d %s", status, b)
	}
}

// TestConversationPinSurvivesRestart: the conversation's owner is durable
// (Pebble): a gateway started over the same store, its memory empty, sends
// the conversation to its owner only.
func TestConversationPinSurvivesRestart(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := conversationHarness(t, st, gateway.Options{})
	if id := firstServed(t, h, "", `{"model":"gpt-fake-1","input":"hi","conversation":"conv_onB"}`); owner(id) != "B" {
		t.Fatalf("first response %q, want one of B's", id)
	}
	h2 := newHarness(t, harnessConfig{opts: gateway.Options{Store: st}, servers: h.ups})
	beforeA := h.ups["A"].RequestCount()
	for i := range 4 {
		status, b := sendAs(t, h2, "", `{"model":"gpt-fake-1","input":"hi","conversation":"conv_onB"}`)
		if status != http.StatusOK || owner(gjson.Get(b, "id").Str) != "B" {
			t.Fatalf("request %d after the restart: %d %s, want B's answer", i, status, b)
		}
	}
	if n := h.ups["A"].RequestCount() - beforeA; n != 0 {
		t.Fatalf("A, which does not hold the conversation, got %d requests", n)
	}
}

package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// removedOwnerRestart makes a response on a gateway over st with the
// upstreams A and B, then starts another gateway over the same store whose
// config has only an upstream the response's owner is not (a restart with
// the owner removed from the config). It returns that gateway, the
// response id and the name of its owner.
func removedOwnerRestart(t *testing.T, opts gateway.Options) (*harness, string, string) {
	t.Helper()
	h := newHarness(t, harnessConfig{opts: opts, upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	_, id := h.turn("", nil)
	own := owner(id)
	if own == "" {
		t.Fatalf("response id %q", id)
	}
	kept := upstreamtest.NewServer(upstreamtest.Options{Name: "Bnew"})
	t.Cleanup(kept.Close)
	return newHarness(t, harnessConfig{opts: opts, servers: map[string]*upstreamtest.Server{"Bnew": kept}}), id, own
}

// TestResourceCallsOfARemovedOwner: once the upstream that owns a response
// is no longer configured, GET, a resume and DELETE of a response whose log
// the gateway does not keep give the reason a follow-up on it gets (502
// upstream_unavailable, the owner is no longer configured), not the 404 of
// an id the gateway does not know. The DELETE still forgets the gateway's
// anchor and logs that the owner's copy could not be deleted.
func TestResourceCallsOfARemovedOwner(t *testing.T) {
	st := openStore(t, t.TempDir())
	h, id, own := removedOwnerRestart(t, gateway.Options{Store: st})
	reason := `upstream "` + own + `" that owns `
	checkRemoved := func(what string, status int, body []byte) {
		t.Helper()
		msg := gjson.GetBytes(body, "error.message").Str
		if status != http.StatusBadGateway || gjson.GetBytes(body, "error.code").Str != "upstream_unavailable" ||
			!strings.HasPrefix(msg, reason) || !strings.Contains(msg, " is no longer configured") {
			t.Fatalf("%s: %d %s", what, status, body)
		}
	}

	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"again","previous_response_id":"`+id+`"}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	checkRemoved("a follow-up", resp.StatusCode, b)

	status, b := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret")
	checkRemoved("GET", status, b)
	if msg := gjson.GetBytes(b, "error.message").Str; msg != reason+"the response is no longer configured" {
		t.Fatalf("GET says %q", msg)
	}
	status, _, body := h.resume("sk-client-secret", id, -1)
	checkRemoved("a resume", status, []byte(body))

	status, b = h.call(http.MethodDelete, "/v1/responses/"+id, "sk-client-secret")
	checkRemoved("DELETE", status, b)
	if !strings.Contains(gjson.GetBytes(b, "error.message").Str, "forgot the response") {
		t.Fatalf("DELETE does not say what it did: %s", b)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "deleting a response at its owner failed") ||
		!strings.Contains(logs, "upstream="+own) || !strings.Contains(logs, "no longer configured") {
		t.Fatalf("the copy left at the owner is not logged:\n%s", logs)
	}
	if code := h.getJSON("/admin/continuity/"+id, nil); code != http.StatusNotFound {
		t.Fatalf("the anchor after DELETE: admin answers %d", code)
	}
}

// TestDeleteDurableOfARemovedOwnerLogsTheOwnersCopy: with durable logs, a
// DELETE of a response whose owner is no longer configured deletes what the
// gateway keeps (200 deleted) and logs that the owner's copy could not be
// deleted, as README "The resource API" says of a failure there.
func TestDeleteDurableOfARemovedOwnerLogsTheOwnersCopy(t *testing.T) {
	st := openStore(t, t.TempDir())
	opts := resumeOpts()
	opts.Store, opts.Resume.Store = st, st
	h, id, own := removedOwnerRestart(t, opts)
	if status, b := h.call(http.MethodDelete, "/v1/responses/"+id, "sk-client-secret"); status != http.StatusOK ||
		gjson.GetBytes(b, "deleted").Type != gjson.True {
		t.Fatalf("DELETE: %d %s", status, b)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "deleting a response at its owner failed") ||
		!strings.Contains(logs, "upstream="+own) || !strings.Contains(logs, "no longer configured") {
		t.Fatalf("the copy left at the owner is not logged:\n%s", logs)
	}
}

// TestDeleteOfARemovedChatOwnerLogsNoOwnersCopy: a Chat upstream keeps
// nothing of the responses the gateway served through it (README
// "Privacy"), so DELETE of one whose owner is no longer configured deletes
// what the gateway keeps (200 deleted) and logs no copy left at the owner,
// with the response's log in the store or without one.
func TestDeleteOfARemovedChatOwnerLogsNoOwnersCopy(t *testing.T) {
	for _, durable := range []bool{false, true} {
		name := "without logs"
		if durable {
			name = "with durable logs"
		}
		t.Run(name, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			opts := gateway.Options{}
			if durable {
				opts = resumeOpts()
				opts.Resume.Store = st
			}
			opts.Store, opts.Conversations = st, st
			first := newHarness(t, harnessConfig{opts: opts, protocol: map[string]string{"C": "chat"}, upstreams: []upstreamtest.Options{{Name: "C"}}})
			id := first.createResponse(`{"model":"gpt-fake-1","input":"one"}`)
			kept := upstreamtest.NewServer(upstreamtest.Options{Name: "Bnew"})
			t.Cleanup(kept.Close)
			h := newHarness(t, harnessConfig{opts: opts, servers: map[string]*upstreamtest.Server{"Bnew": kept}})

			if status, b := h.call(http.MethodDelete, "/v1/responses/"+id, "sk-client-secret"); status != http.StatusOK ||
				gjson.GetBytes(b, "deleted").Type != gjson.True {
				t.Fatalf("DELETE: %d %s", status, b)
			}
			if logs := h.logs.String(); strings.Contains(logs, "deleting a response at its owner failed") {
				t.Fatalf("a copy at the Chat owner is logged:\n%s", logs)
			}
			wantTurnGone(t, st, id)
		})
	}
}

package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

func openStore(t testing.TB, dir string) *store.PebbleStore {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// continuityHarness: two upstreams that reject previous_response_ids they
// did not create, so a misrouted follow-up is visible.
func continuityHarness(t *testing.T, st store.Store, opts gateway.Options) *harness {
	opts.Store = st
	return newHarness(t, harnessConfig{opts: opts, upstreams: []upstreamtest.Options{
		{Name: "A", StrictPrevious: true, PreviousShape: upstreamtest.ShapeErrorEvent},
		{Name: "B", StrictPrevious: true, PreviousShape: upstreamtest.ShapeErrorEvent},
	}})
}

// turn sends one streaming Responses turn with the given headers and
// returns the events and the completed response id.
func (h *harness) turn(prev string, headers map[string]string) ([]eventLike, string) {
	h.t.Helper()
	body := `{"model":"gpt-fake-1","input":"hi","stream":true`
	if prev != "" {
		body += `,"previous_response_id":"` + prev + `"`
	}
	body += "}"
	req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var evs []eventLike
	var id string
	for _, block := range strings.Split(string(raw), "\n\n") {
		for _, line := range strings.Split(block, "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				ev := eventLike{data: []byte(data)}
				var v struct {
					Type     string
					Response struct {
						ID    string
						Error struct{ Code, Message string }
					}
				}
				_ = json.Unmarshal([]byte(data), &v)
				ev.typ, ev.code = v.Type, gatewayCode(v.Response.Error.Code, v.Response.Error.Message)
				if v.Type == "response.completed" {
					id = v.Response.ID
				}
				evs = append(evs, ev)
			}
		}
	}
	return evs, id
}

func owner(id string) string { // resp_A_3 → A
	parts := strings.Split(id, "_")
	if len(parts) < 3 {
		return ""
	}
	return parts[1]
}

func other(name string) string {
	if name == "A" {
		return "B"
	}
	return "A"
}

func TestFollowUpsGoToTheirOwner(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{})
	_, id := h.turn("", nil)
	own := owner(id)
	if own == "" {
		t.Fatalf("turn 1 id %q", id)
	}
	h.ups[own].ClearRequests()
	h.ups[other(own)].ClearRequests()
	// Selection alternates between idle upstreams; every follow-up still
	// goes to the owner (a misroute would fail: the other upstream is strict).
	prev := id
	for i := 0; i < 4; i++ {
		evs, next := h.turn(prev, nil)
		if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
			t.Fatalf("turn %d: %s %s", i+2, last.typ, last.code)
		}
		if owner(next) != own {
			t.Fatalf("turn %d served by %s, want owner %s", i+2, owner(next), own)
		}
		prev = next
	}
	if n := h.ups[other(own)].RequestCount(); n != 0 {
		t.Fatalf("the other upstream received %d follow-ups", n)
	}
	if !strings.Contains(h.metrics(), `continuity_owner_resolution_total{outcome="hit",source="memory",surface="responses_stream"} 4`) {
		t.Fatalf("resolutions not counted:\n%s", grep(h.metrics(), "continuity_owner"))
	}
	// The admin endpoint shows the anchor.
	var a struct {
		Owner     string `json:"owner"`
		ScopeKind string `json:"scope_kind"`
	}
	if code := h.getJSON("/admin/continuity/"+prev, &a); code != 200 || a.Owner != own || a.ScopeKind != "client_key" {
		t.Fatalf("admin: %d %+v", code, a)
	}
	if code := h.getJSON("/admin/continuity/resp_nope", nil); code != 404 {
		t.Fatalf("admin unknown id: %d", code)
	}
}

func TestFollowUpResolvesFromStoreAfterRestart(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{})
	_, id := h.turn("", nil)
	own := owner(id)
	// A second gateway over the same store and the same upstreams: its
	// memory cache is empty, so the owner comes from Pebble.
	h2 := newHarness(t, harnessConfig{opts: gateway.Options{Store: st}, servers: h.ups})
	for i := 0; i < 3; i++ {
		evs, next := h2.turn(id, nil)
		if owner(next) != own || assertOneTerminal(t, evs).typ != "response.completed" {
			t.Fatalf("follow-up %d served by %q, want %s", i, next, own)
		}
	}
	if !strings.Contains(h2.metrics(), `continuity_owner_resolution_total{outcome="hit",source="store",surface="responses_stream"} 1`) {
		t.Fatalf("want one store hit then memory hits:\n%s", grep(h2.metrics(), "owner_resolution"))
	}
}

// TestOwnerCoolingDownFailsClosed: a follow-up whose owner cools down,
// whether the whole upstream (a failed connection) or its target (after
// the owner's 429), fails closed without calling any upstream, with the
// 503 upstream_unavailable that carries the owner's remaining cooldown
// (Retry-After, and in the message) as README "Failover and replay" says:
// a stream too, since nothing was sent (README "Continuity").
func TestOwnerCoolingDownFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name string
		cool func(h *harness, own, id string)
	}{
		{"upstream cooling down", func(h *harness, own, _ string) {
			h.pool.Cooldown(h.pool.Get(own), time.Minute, "connect failure")
		}},
		{"target cooling down after its 429", func(h *harness, own, id string) {
			h.ups[own].Enqueue(upstreamtest.Status429(time.Minute))
			resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"x","previous_response_id":"`+id+`"}`)
			_ = resp.Body.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			h := continuityHarness(t, st, gateway.Options{})
			_, id := h.turn("", nil)
			own := owner(id)
			tc.cool(h, own, id)
			before := h.ups["A"].RequestCount() + h.ups["B"].RequestCount()

			a := postForRetry(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"x","stream":true,"previous_response_id":"`+id+`"}`)
			if a.status != http.StatusServiceUnavailable || a.code != "upstream_unavailable" || !strings.Contains(a.body, "please try again in") {
				t.Fatalf("stream: %d %s, want the 503 with the wait", a.status, a.body)
			}
			checkRetryAfter(t, "stream", a, 1, 60)
			resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"x","previous_response_id":"`+id+`"}`)
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("JSON status %d, want 503", resp.StatusCode)
			}
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
				t.Fatalf("Retry-After %q, want the owner's remaining cooldown (1..60 s)", resp.Header.Get("Retry-After"))
			}
			e := readError(t, resp)
			if deref(e.Error.Code) != "upstream_unavailable" || e.Error.Type != "server_error" || !strings.Contains(e.Error.Message, "please try again in") {
				t.Fatalf("JSON error %+v", e)
			}
			if after := h.ups["A"].RequestCount() + h.ups["B"].RequestCount(); after != before {
				t.Fatalf("%d upstream calls while failing closed", after-before)
			}
			if !strings.Contains(h.metrics(), `continuity_fail_closed_total{reason="owner_unavailable",surface="responses_stream"} 1`) {
				t.Fatalf("fail-closed not counted:\n%s", grep(h.metrics(), "fail_closed"))
			}
		})
	}
}

func TestStoreLookupFailureFailsClosed(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{})
	_ = st.Close()
	// Nothing was sent yet: a stream too gets the status and JSON error
	// (README "Scale-out with Redis").
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true,"previous_response_id":"resp_not_in_memory"}`)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", resp.StatusCode)
	}
	if e := readError(t, resp); deref(e.Error.Code) != "upstream_unavailable" || !strings.Contains(e.Error.Message, "owner lookup failed") {
		t.Fatalf("JSON error %+v", e)
	}
	if n := h.ups["A"].RequestCount() + h.ups["B"].RequestCount(); n != 0 {
		t.Fatalf("%d upstream calls", n)
	}
	if !strings.Contains(h.metrics(), `continuity_fail_closed_total{reason="owner_lookup_failed"`) {
		t.Fatal("owner_lookup_failed not counted")
	}
	// A request without previous_response_id does not need the store.
	if evs, _ := h.turn("", nil); assertOneTerminal(t, evs).typ != "response.completed" {
		t.Fatal("plain request failed with the store down")
	}
}

func TestPreviousResponseNotFoundIsRecovered(t *testing.T) {
	// In-stream shapes arrive before response.created: the default replay
	// policy retries once on the owner, so the owner fails twice here.
	tests := []struct {
		name     string
		script   upstreamtest.Script
		stream   bool
		attempts int
	}{
		{"stream error event", upstreamtest.PreviousNotFound(upstreamtest.ShapeErrorEvent), true, 2},
		{"stream response.failed", upstreamtest.PreviousNotFound(upstreamtest.ShapeFailed), true, 2},
		{"stream 400 status", upstreamtest.PreviousNotFound(upstreamtest.ShapeStatus), true, 1},
		{"json 400", upstreamtest.PreviousNotFound(upstreamtest.ShapeStatus), false, 1},
		{"invalid_request_error wording", upstreamtest.Failure(upstreamtest.ShapeStatus, 400,
			upstreamtest.ErrorBody("Previous  response with id 'resp_x' NOT FOUND.", "invalid_request_error", "invalid_request_error", "previous_response_id")), false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			h := continuityHarness(t, st, gateway.Options{})
			_, id := h.turn("", nil)
			own := owner(id)
			for i := 0; i < tt.attempts; i++ {
				h.ups[own].Enqueue(tt.script)
			}
			before := h.ups[own].RequestCount()
			if tt.stream {
				evs, _ := h.turn(id, nil)
				if last := assertOneTerminal(t, evs); last.typ != "response.failed" || last.code != "stream_incomplete" {
					t.Fatalf("%s %s", last.typ, last.code)
				}
			} else {
				resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"x","previous_response_id":"`+id+`"}`)
				if e := readError(t, resp); resp.StatusCode != 502 || deref(e.Error.Code) != "stream_incomplete" {
					t.Fatalf("%d %+v", resp.StatusCode, e)
				}
			}
			if got := h.ups[own].RequestCount() - before; got != tt.attempts {
				t.Fatalf("owner saw %d attempts, want %d", got, tt.attempts)
			}
			if h.ups[other(own)].RequestCount() != 0 {
				t.Fatal("a pinned request went to another upstream")
			}
			// The stale anchor is gone: the next turn is not pinned.
			if code := h.getJSON("/admin/continuity/"+id, nil); code != 404 {
				t.Fatalf("stale anchor still there (%d)", code)
			}
			if !strings.Contains(h.metrics(), `continuity_fail_closed_total{reason="previous_response_not_found"`) {
				t.Fatal("recovery not counted")
			}
		})
	}
}

func TestLostPreviousResponseReplaysOnceOnTheOwner(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{})
	_, id := h.turn("", nil)
	own := owner(id)
	h.ups[own].Enqueue(upstreamtest.PreviousNotFound(upstreamtest.ShapeErrorEvent))
	evs, next := h.turn(id, nil)
	if assertOneTerminal(t, evs).typ != "response.completed" || owner(next) != own {
		t.Fatalf("replay on the owner did not serve the turn: %q", next)
	}
	for _, ev := range evs {
		if ev.typ == "error" || ev.code != "" {
			t.Fatalf("the suppressed failure reached the client: %s", ev.data)
		}
	}
}

func TestNearMissErrorsPassThroughUnchanged(t *testing.T) {
	bodies := map[string][]byte{
		"other param":   upstreamtest.ErrorBody("Previous response with id 'resp_x' not found.", "invalid_request_error", "invalid_request_error", "input"),
		"other message": upstreamtest.ErrorBody("previous_response_id must start with resp_", "invalid_request_error", "invalid_request_error", "previous_response_id"),
		"other code":    upstreamtest.ErrorBody("Invalid value for tools.", "invalid_request_error", "invalid_value", "tools"),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			h := continuityHarness(t, st, gateway.Options{})
			_, id := h.turn("", nil)
			h.ups[owner(id)].Enqueue(upstreamtest.Failure(upstreamtest.ShapeStatus, 400, body))
			resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"x","previous_response_id":"`+id+`"}`)
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || string(got) != string(body) {
				t.Fatalf("%d %s\nwant 400 %s", resp.StatusCode, got, body)
			}
			if code := h.getJSON("/admin/continuity/"+id, nil); code != 200 {
				t.Fatalf("anchor dropped on a near miss (%d)", code)
			}
		})
	}
}

func TestTurnStatesIsolateAnchorsWithinASession(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{})
	c1 := map[string]string{"session_id": "shared-session", "x-codex-turn-state": "turn-one"}
	c2 := map[string]string{"session_id": "shared-session", "x-codex-turn-state": "turn-two"}
	_, id := h.turn("", c1)
	var a struct {
		ScopeKind string `json:"scope_kind"`
	}
	h.getJSON("/admin/continuity/"+id, &a)
	if a.ScopeKind != "turn_state" {
		t.Fatalf("recorded under %q, want the turn state", a.ScopeKind)
	}
	// Client 2 does not see client 1's anchor: a miss, normal selection.
	h.turn(id, c2)
	if !strings.Contains(h.metrics(), `continuity_owner_resolution_total{outcome="miss",source="memory",surface="responses_stream"} 1`) {
		t.Fatalf("want a miss for the other turn state:\n%s", grep(h.metrics(), "owner_resolution"))
	}
	// Client 1 does.
	evs, next := h.turn(id, c1)
	if owner(next) != owner(id) || assertOneTerminal(t, evs).typ != "response.completed" {
		t.Fatalf("client 1 follow-up went to %q", next)
	}
}

func TestExpiredAnchorIsAMiss(t *testing.T) {
	st := openStore(t, t.TempDir())
	// The anchor must still be fresh when it is first read: a TTL with room
	// for a turn and a read on a loaded machine, then a wait past it.
	const ttl = time.Second
	h := continuityHarness(t, st, gateway.Options{AnchorTTL: ttl})
	_, id := h.turn("", nil)
	turned := time.Now()
	if code := h.getJSON("/admin/continuity/"+id, nil); code != 200 {
		t.Fatalf("fresh anchor: %d", code)
	}
	time.Sleep(ttl + 50*time.Millisecond - time.Since(turned))
	// The store indexes expiries by the minute: sweep as of a time past that.
	if n, err := st.Sweep(context.Background(), time.Now().Add(2*time.Minute)); err != nil || n == 0 {
		t.Fatalf("sweep removed %d: %v", n, err)
	}
	if code := h.getJSON("/admin/continuity/"+id, nil); code != 404 {
		t.Fatalf("swept anchor: %d", code)
	}
	// Not an error: normal selection (and the strict owner still knows it, or
	// the other answers previous_response_not_found, which is recovered).
	evs, _ := h.turn(id, nil)
	last := assertOneTerminal(t, evs)
	if last.code == "upstream_unavailable" {
		t.Fatalf("expired anchor failed closed: %s", last.data)
	}
}

func TestLogsNeverCarryRawIDsOrKeys(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{})
	headers := map[string]string{"session_id": "sess-raw-value", "x-codex-turn-state": "turn-raw-value"}
	_, id := h.turn("", headers)
	h.pool.Cooldown(h.pool.Get(owner(id)), time.Minute, "test")
	h.turn(id, headers) // fail closed: logged
	_ = st.Close()
	h.turn("resp_unknown_raw", headers) // lookup failed: logged
	logs := h.logs.String()
	if !strings.Contains(logs, "sha256:") {
		t.Fatalf("no hashed ids in logs:\n%s", logs)
	}
	for _, raw := range []string{id, "resp_unknown_raw", "sess-raw-value", "turn-raw-value", "sk-client-secret"} {
		if strings.Contains(logs, raw) {
			t.Fatalf("raw %q in logs:\n%s", raw, logs)
		}
	}
}

func TestStoreFalseOverHTTPWritesNoAnchor(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{})
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","store":false}`)
	var r struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if r.ID == "" {
		t.Fatal("no response id")
	}
	if code := h.getJSON("/admin/continuity/"+r.ID, nil); code != 404 {
		t.Fatalf("store:false over HTTP recorded an anchor (%d)", code)
	}
	// On a WebSocket, store:false responses chain from the socket's state:
	// they are anchored.
	c := h.dialWS(nil)
	evs := c.turn(`{"type":"response.create","model":"gpt-fake-1","input":"hi","store":false}`)
	if code := h.getJSON("/admin/continuity/"+completedIDOf(evs), nil); code != 200 {
		t.Fatalf("store:false over WebSocket not anchored (%d)", code)
	}
}

// TestUnpinnedFollowUpNeverClearsAnotherScopesAnchor: a follow-up from a
// scope that does not see the anchor goes out unpinned (no Sluice keys);
// when the upstream it lands on never had the response, its
// previous_response_not_found is recovered for that client, but the anchor
// is the other scope's and is kept: the creating scope's next follow-up
// still reaches the owner.
func TestUnpinnedFollowUpNeverClearsAnotherScopesAnchor(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{})
	c1 := map[string]string{"x-codex-turn-state": "turn-one"}
	c2 := map[string]string{"x-codex-turn-state": "turn-two"}
	_, id := h.turn("", c1)
	recovered := false
	for i := 0; i < 40 && !recovered; i++ { // selection is random: until one lands on the non-owner
		evs, _ := h.turn(id, c2)
		recovered = assertOneTerminal(t, evs).code == "stream_incomplete"
	}
	if !recovered {
		t.Fatal("no follow-up of the other turn state reached the non-owner")
	}
	if code := h.getJSON("/admin/continuity/"+id, nil); code != 200 {
		t.Fatalf("the other scope's miss cleared the anchor (%d)", code)
	}
	evs, next := h.turn(id, c1)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" || owner(next) != owner(id) {
		t.Fatalf("the creating scope's follow-up after the other's miss: %s, went to %q", last.data, next)
	}
}

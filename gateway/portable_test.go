package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
	"github.com/sluice-gw/sluice/store"
)

// Portable conversations (README "Continuity"): with continuity.portable the
// gateway keeps every response's items, and a follow-up whose owner is gone
// is rehydrated on another upstream: the kept history plus its own input,
// without previous_response_id.

// portableUpstreams are two strict fakes: a previous_response_id they did
// not create is previous_response_not_found, so a follow-up that reached the
// wrong upstream with its id would show.
func portableUpstreams(t *testing.T) map[string]*upstreamtest.Server {
	t.Helper()
	ups := map[string]*upstreamtest.Server{}
	for _, name := range []string{"A", "B"} {
		up := upstreamtest.NewServer(upstreamtest.Options{Name: name, StrictPrevious: true, PreviousShape: upstreamtest.ShapeErrorEvent})
		t.Cleanup(up.Close)
		ups[name] = up
	}
	return ups
}

// portableGateway is a gateway in front of the named fakes only, keeping
// anchors and conversations in st.
func portableGateway(t *testing.T, st interface {
	store.Store
	store.ConversationStore
}, ups map[string]*upstreamtest.Server, opts gateway.Options, names ...string) *harness {
	t.Helper()
	servers := map[string]*upstreamtest.Server{}
	for _, n := range names {
		servers[n] = ups[n]
	}
	opts.Store, opts.Conversations = st, st
	return newHarness(t, harnessConfig{servers: servers, opts: opts})
}

// sse posts a streaming Responses body and returns the terminal event's
// type, the response id (or the gateway's error code) and its raw data.
func (h *harness) sseTurn(body string) (typ, idOrCode string, data []byte) {
	h.t.Helper()
	_, evs := h.streamEvents("/v1/responses", body)
	for _, ev := range evs {
		if t := eventType(ev); isTerminal(t) {
			var v struct{ Response struct{ ID string } }
			_ = json.Unmarshal(ev.Data, &v)
			if t == "response.completed" {
				return t, v.Response.ID, ev.Data
			}
			return t, errorCode(ev), ev.Data
		}
	}
	h.t.Fatalf("no terminal event in %d events", len(evs))
	return "", "", nil
}

const firstTurn = `{"model":"gpt-fake-1","input":"first question","stream":true}`

func followUp(prev string) string {
	return `{"model":"gpt-fake-1","input":[{"role":"user","content":"second question"}],"previous_response_id":"` + prev + `","stream":true}`
}

// lastBody is the last request body an upstream received.
func lastBody(t *testing.T, up *upstreamtest.Server) map[string]json.RawMessage {
	t.Helper()
	reqs := up.Requests()
	if len(reqs) == 0 {
		t.Fatal("the upstream received nothing")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(reqs[len(reqs)-1].Body, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// assertRehydrated checks what the upstream that took over received: the
// whole history (the first input, the old owner's output, the new input)
// and no previous_response_id.
func assertRehydrated(t *testing.T, up *upstreamtest.Server, oldOwner string) {
	t.Helper()
	body := lastBody(t, up)
	if _, ok := body["previous_response_id"]; ok {
		t.Fatalf("previous_response_id reached the new upstream: %s", body["previous_response_id"])
	}
	var input []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(body["input"], &input); err != nil || len(input) != 3 {
		t.Fatalf("input %s (%v), want 3 items", body["input"], err)
	}
	if input[0].Role != "user" || !strings.Contains(string(input[0].Content), "first question") ||
		input[1].Role != "assistant" || !strings.Contains(string(input[1].Content), "Hello from "+oldOwner) ||
		input[2].Role != "user" || !strings.Contains(string(input[2].Content), "second question") {
		t.Fatalf("input %s", body["input"])
	}
}

// TestPortableRehydratesWhenOwnerRemoved: the owner of previous_response_id
// is gone from the config; the follow-up is rehydrated on the other
// upstream, which becomes the owner of the new response, and the chain
// goes on from there.
func TestPortableRehydratesWhenOwnerRemoved(t *testing.T) {
	st := openStore(t, t.TempDir())
	ups := portableUpstreams(t)
	h1 := portableGateway(t, st, ups, gateway.Options{Portable: true}, "A", "B")
	typ, id, _ := h1.sseTurn(firstTurn)
	own := owner(id)
	if typ != "response.completed" || own == "" {
		t.Fatalf("first turn: %s %s", typ, id)
	}
	if _, err := st.GetTurn(context.Background(), id); err != nil {
		t.Fatalf("the turn of a Responses upstream was not kept: %v", err)
	}
	next := other(own)

	h2 := portableGateway(t, st, ups, gateway.Options{Portable: true}, next) // the owner is removed
	typ, id2, _ := h2.sseTurn(followUp(id))
	if typ != "response.completed" || owner(id2) != next {
		t.Fatalf("follow-up: %s %s, want completed by %s", typ, id2, next)
	}
	assertRehydrated(t, ups[next], own)
	var a struct{ Owner string }
	if h2.getJSON("/admin/continuity/"+id2, &a) != http.StatusOK || a.Owner != next {
		t.Fatalf("anchor of the rehydrated response: %+v", a)
	}
	// The chain continues: the kept history of the new response is all four
	// items, and the next follow-up is pinned to the new owner as usual.
	h, err := st.History(context.Background(), id2, 0, 0)
	if err != nil || len(h) != 4 {
		t.Fatalf("history %d items, %v", len(h), err)
	}
	typ, id3, _ := h2.sseTurn(followUp(id2))
	if typ != "response.completed" || owner(id3) != next {
		t.Fatalf("third turn: %s %s", typ, id3)
	}
	if body := lastBody(t, ups[next]); string(body["previous_response_id"]) != `"`+id2+`"` {
		t.Fatalf("third turn not pinned: %s", body["previous_response_id"])
	}
	m := h2.metrics()
	if !strings.Contains(m, `sluice_continuity_rehydrations_total{reason="owner_removed",surface="responses_stream"} 1`) {
		t.Fatalf("rehydration not counted:\n%s", grep(m, "rehydrations"))
	}
	if strings.Contains(m, `continuity_fail_closed_total`) && strings.Contains(grep(m, "fail_closed"), "} 1") {
		t.Fatalf("counted as fail closed:\n%s", grep(m, "fail_closed"))
	}
	if logs := h2.logs.String(); !strings.Contains(logs, "continuity=rehydrated") {
		t.Fatalf("access log without continuity=rehydrated:\n%s", grep(logs, "access"))
	}
}

// TestPortableOffFailsClosed: without portable the same follow-up fails
// closed as it always did, and nothing is called.
func TestPortableOffFailsClosed(t *testing.T) {
	st := openStore(t, t.TempDir())
	ups := portableUpstreams(t)
	h1 := portableGateway(t, st, ups, gateway.Options{}, "A", "B")
	_, id, _ := h1.sseTurn(firstTurn)
	own := owner(id)
	if _, err := st.GetTurn(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("portable off kept the turn: %v", err)
	}
	h2 := portableGateway(t, st, ups, gateway.Options{}, other(own))
	before := ups[other(own)].RequestCount()
	resp := h2.post("/v1/responses", `{"model":"gpt-fake-1","input":"x","previous_response_id":"`+id+`"}`)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if e := readError(t, resp); deref(e.Error.Code) != "upstream_unavailable" {
		t.Fatalf("error %+v", e)
	}
	if n := ups[other(own)].RequestCount() - before; n != 0 {
		t.Fatalf("%d upstream calls", n)
	}
	if !strings.Contains(h2.metrics(), `continuity_fail_closed_total{reason="owner_unavailable",surface="responses_json"} 1`) {
		t.Fatalf("fail closed not counted:\n%s", grep(h2.metrics(), "fail_closed"))
	}
}

// TestPortableRehydratesAfterOwnerDown: an owner that is down (its probes
// fail) is waited for until it has been down for rehydrate_after; then its
// conversations are rehydrated elsewhere.
func TestPortableRehydratesAfterOwnerDown(t *testing.T) {
	st := openStore(t, t.TempDir())
	ups := portableUpstreams(t)
	const after = 400 * time.Millisecond
	h := portableGateway(t, st, ups, gateway.Options{Portable: true, RehydrateAfter: after}, "A", "B")
	_, id, _ := h.sseTurn(firstTurn)
	own := owner(id)
	ups[own].SetModelsStatus(http.StatusInternalServerError)
	// The owner is down from the probe that fails, some time inside
	// ProbeAll: probing is no later than that, downAt no sooner. A loaded
	// machine can spend long in ProbeAll, so the brief check is timed from
	// the first and the wait past rehydrate_after from the second.
	probing := time.Now()
	h.pool.ProbeAll(context.Background())
	downAt := time.Now()

	// Nothing was sent: a stream too gets the status (README "Continuity").
	a := postForRetry(t, h, "/v1/responses", followUp(id))
	if time.Since(probing) >= after {
		t.Skip("the machine is too slow for this timing")
	}
	if a.status != http.StatusServiceUnavailable || a.code != "upstream_unavailable" {
		t.Fatalf("owner down briefly: %d %s, want fail closed", a.status, a.body)
	}
	time.Sleep(after + 100*time.Millisecond - time.Since(downAt))
	typ, id2, _ := h.sseTurn(followUp(id))
	if typ != "response.completed" || owner(id2) != other(own) {
		t.Fatalf("owner down longer than rehydrate_after: %s %s", typ, id2)
	}
	assertRehydrated(t, ups[other(own)], own)
	m := h.metrics()
	if !strings.Contains(m, `sluice_continuity_rehydrations_total{reason="owner_down",surface="responses_stream"} 1`) ||
		!strings.Contains(m, `continuity_fail_closed_total{reason="owner_unavailable",surface="responses_stream"} 1`) {
		t.Fatalf("metrics:\n%s%s", grep(m, "rehydrations"), grep(m, "fail_closed"))
	}
}

// recoverModule hand-assembles a recover policy (hostabi/ABI.md §2) that
// declares ABI version abi and answers every recover call with the bare
// verdict.
func recoverModule(abi int32, verdict int64) []byte {
	i32, i64 := byte(0x7f), byte(0x7e)
	var m []byte
	m = append(m, 0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00)
	m = wSection(m, 1, wVec(wFunctype(nil, []byte{i32}), wFunctype([]byte{i32}, []byte{i32}), wFunctype([]byte{i32, i32}, []byte{i64})))
	m = wSection(m, 3, wVec([]byte{0x00}, []byte{0x01}, []byte{0x02}))
	m = wSection(m, 5, wVec([]byte{0x00, 0x02}))
	m = wSection(m, 7, wVec(
		wCat(wName("memory"), []byte{0x02, 0x00}),
		wCat(wName("sluice_abi_version"), []byte{0x00, 0x00}),
		wCat(wName("sluice_alloc"), []byte{0x00, 0x01}),
		wCat(wName("sluice_recover"), []byte{0x00, 0x02}),
	))
	abiFn := wCat([]byte{0x00}, wI32(abi), []byte{0x0b})
	alloc := wCat([]byte{0x00}, wI32(65536), []byte{0x0b})
	recoverFn := wCat([]byte{0x00}, []byte{0x42}, wSleb(verdict), []byte{0x0b})
	return wSection(m, 10, wVec(wSized(abiFn), wSized(alloc), wSized(recoverFn)))
}

func recoverRuntime(t *testing.T, mod []byte) *plugins.Runtime {
	t.Helper()
	return moduleRuntime(t, "10-recover.wasm", mod)
}

// TestPortablePolicyDecides: a version-3 recover policy answering
// fail_closed overrides the default rehydration; a version-1 policy (which
// answers "recover" to everything) is never asked the owner question, so
// the default rehydrates.
func TestPortablePolicyDecides(t *testing.T) {
	for _, c := range []struct {
		name       string
		mod        []byte
		rehydrated bool
	}{
		{"v3 fail_closed", recoverModule(3, 2), false},
		{"v1 not asked", recoverModule(1, 1), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			ups := portableUpstreams(t)
			h1 := portableGateway(t, st, ups, gateway.Options{Portable: true}, "A", "B")
			_, id, _ := h1.sseTurn(firstTurn)
			own := owner(id)
			h2 := portableGateway(t, st, ups, gateway.Options{Portable: true, Policy: recoverRuntime(t, c.mod)}, other(own))
			typ, got, _ := h2.sseTurn(followUp(id))
			switch {
			case c.rehydrated && (typ != "response.completed" || owner(got) != other(own)):
				t.Fatalf("%s %s, want rehydrated", typ, got)
			case !c.rehydrated && (typ != "response.failed" || got != "upstream_unavailable"):
				t.Fatalf("%s %s, want fail closed", typ, got)
			case !c.rehydrated && ups[other(own)].RequestCount() != 0:
				t.Fatal("the policy said fail_closed and an upstream was called")
			}
		})
	}
}

// TestPortableStoreFalseNotKept: a store:false turn is not kept (nor
// anchored over HTTP), so there is nothing to rehydrate: the follow-up goes
// out unpinned with its id, as before, and the upstream's
// previous_response_not_found reaches the client recovered.
func TestPortableStoreFalseNotKept(t *testing.T) {
	st := openStore(t, t.TempDir())
	ups := portableUpstreams(t)
	h1 := portableGateway(t, st, ups, gateway.Options{Portable: true}, "A", "B")
	_, id, _ := h1.sseTurn(`{"model":"gpt-fake-1","input":"secret","stream":true,"store":false}`)
	own := owner(id)
	if _, err := st.GetTurn(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a store:false turn was kept: %v", err)
	}
	h2 := portableGateway(t, st, ups, gateway.Options{Portable: true}, other(own))
	typ, code, _ := h2.sseTurn(followUp(id))
	if typ != "response.failed" || code != "stream_incomplete" {
		t.Fatalf("%s %s", typ, code)
	}
	if body := lastBody(t, ups[other(own)]); string(body["previous_response_id"]) != `"`+id+`"` {
		t.Fatalf("the follow-up was rewritten: %s", body["input"])
	}
	if strings.Contains(h2.metrics(), "sluice_continuity_rehydrations_total{") {
		t.Fatal("a store:false conversation was rehydrated")
	}
}

// TestPortableDropsEncryptedReasoning: a JSON answer's reasoning items lose
// their encrypted_content when kept (dropped when nothing else is left);
// the rehydrated request carries the rest.
func TestPortableDropsEncryptedReasoning(t *testing.T) {
	st := openStore(t, t.TempDir())
	ups := portableUpstreams(t)
	h1 := portableGateway(t, st, ups, gateway.Options{Portable: true}, "A")
	ups["A"].Enqueue(upstreamtest.Script{Body: []byte(`{"id":"{{id}}","object":"response","status":"completed","model":"{{model}}","output":[` +
		`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAA-only"},` +
		`{"type":"reasoning","id":"rs_2","summary":[{"type":"summary_text","text":"thought"}],"encrypted_content":"gAAAA-with-summary"},` +
		`{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"answer","annotations":[]}]}]}`)})
	resp := h1.post("/v1/responses", `{"model":"gpt-fake-1","input":[{"type":"reasoning","id":"rs_0","summary":[],"encrypted_content":"client-sent"},{"role":"user","content":"q"}]}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var r struct{ ID string }
	if err := json.Unmarshal(raw, &r); err != nil || owner(r.ID) != "A" {
		t.Fatalf("%d %s", resp.StatusCode, raw)
	}
	if !strings.Contains(string(raw), "gAAAA-only") {
		t.Fatal("the client's answer lost its encrypted reasoning")
	}
	items, err := st.History(context.Background(), r.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	joined := string(jsonArray(items))
	if strings.Contains(joined, "encrypted_content") || len(items) != 3 || !strings.Contains(joined, `"thought"`) || !strings.Contains(joined, `"answer"`) {
		t.Fatalf("kept items: %s", joined)
	}

	h2 := portableGateway(t, st, ups, gateway.Options{Portable: true}, "B")
	typ, id2, _ := h2.sseTurn(followUp(r.ID))
	if typ != "response.completed" || owner(id2) != "B" {
		t.Fatalf("%s %s", typ, id2)
	}
	if in := string(lastBody(t, ups["B"])["input"]); strings.Contains(in, "encrypted_content") || !strings.Contains(in, "thought") {
		t.Fatalf("B got %s", in)
	}
}

func jsonArray(items []json.RawMessage) []byte {
	b, _ := json.Marshal(items)
	return b
}

// TestPortableAcrossRestart: the kept conversation survives a restart on
// Pebble (the store directory reopened by a new gateway without the owner).
func TestPortableAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	ups := portableUpstreams(t)
	st1, err := store.Open(context.Background(), store.Options{Dir: dir, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h1 := portableGateway(t, st1, ups, gateway.Options{Portable: true}, "A", "B")
	_, id, _ := h1.sseTurn(firstTurn)
	own := owner(id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = h1.gw.Shutdown(ctx)
	if err := st1.Close(); err != nil {
		t.Fatal(err)
	}
	st2 := openStore(t, dir)
	h2 := portableGateway(t, st2, ups, gateway.Options{Portable: true}, other(own))
	typ, id2, _ := h2.sseTurn(followUp(id))
	if typ != "response.completed" || owner(id2) != other(own) {
		t.Fatalf("after the restart: %s %s", typ, id2)
	}
	assertRehydrated(t, ups[other(own)], own)
}

// TestPortableScaleOut: two replicas share Redis; a conversation replica 1
// served through A is rehydrated by replica 2, whose config has no A.
func TestPortableScaleOut(t *testing.T) {
	srv := redistest.Start(t)
	ups := portableUpstreams(t)
	replica := func(names ...string) *harness {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		return portableGateway(t, rs, ups, gateway.Options{Portable: true}, names...)
	}
	r1 := replica("A", "B")
	_, id, _ := r1.sseTurn(firstTurn)
	own := owner(id)
	r2 := replica(other(own))
	typ, id2, _ := r2.sseTurn(followUp(id))
	if typ != "response.completed" || owner(id2) != other(own) {
		t.Fatalf("replica 2: %s %s", typ, id2)
	}
	assertRehydrated(t, ups[other(own)], own)
	// Replica 1 (which still has both) sends the next turn to the new owner.
	typ, id3, _ := r1.sseTurn(followUp(id2))
	if typ != "response.completed" || owner(id3) != other(own) {
		t.Fatalf("replica 1 after the rehydration: %s %s", typ, id3)
	}
}

// TestPortableKeepsWebSocketUpstreamTurns: a response served over an
// upstream WebSocket is kept like an SSE one, and rehydrated the same way.
func TestPortableKeepsWebSocketUpstreamTurns(t *testing.T) {
	st := openStore(t, t.TempDir())
	ups := portableUpstreams(t)
	h1 := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": ups["A"]}, transport: map[string]string{"A": "websocket"},
		opts: gateway.Options{Portable: true, Store: st, Conversations: st}})
	typ, id, _ := h1.sseTurn(firstTurn)
	if typ != "response.completed" || owner(id) != "A" || ups["A"].WebSocketConnects() == 0 {
		t.Fatalf("first turn: %s %s (%d sockets)", typ, id, ups["A"].WebSocketConnects())
	}
	turn, err := st.GetTurn(context.Background(), id)
	if err != nil || len(turn.Input) != 1 || len(turn.Output) != 1 {
		t.Fatalf("kept turn %+v, %v", turn, err)
	}
	h2 := portableGateway(t, st, ups, gateway.Options{Portable: true}, "B")
	if typ, id2, _ := h2.sseTurn(followUp(id)); typ != "response.completed" || owner(id2) != "B" {
		t.Fatalf("follow-up: %s %s", typ, id2)
	}
	assertRehydrated(t, ups["B"], "A")
}

package gateway_test

// Behaviour that mutation testing showed no other test pinned down (README,
// "Mutation testing"): each test names the user-visible rule it holds.

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// TestContinuousUsageChunksKeepTheirContent: a Chat upstream that reports
// usage in every chunk (vLLM's continuous usage stats) still streams its
// content to a Chat client that did not ask for usage; only a chunk with
// usage and no choice is held back.
func TestContinuousUsageChunksKeepTheirContent(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	usage := `"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}`
	chunk := func(choices string) upstreamtest.Frame {
		return upstreamtest.SSEData([]byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-fake-1","choices":` + choices + `,` + usage + `}`))
	}
	h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		chunk(`[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]`),
		chunk(`[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]`),
		chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`),
		chunk(`[]`),
		upstreamtest.SSEData([]byte("[DONE]")),
	}})
	_, evs := postWith(t, h, "/v1/chat/completions", `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
	var text strings.Builder
	chunks := 0
	for _, ev := range evs {
		if ev.Done {
			continue
		}
		chunks++
		text.WriteString(gjson.GetBytes(ev.Data, "choices.0.delta.content").Str)
	}
	if text.String() != "Hello" || chunks != 3 {
		t.Fatalf("the client got %d chunks with text %q, want the 3 with choices and %q", chunks, text.String(), "Hello")
	}
}

// TestChatTargetGetsTheRouteModel: a route target's model is what a
// Chat-protocol upstream is asked for, not the client's alias.
func TestChatTargetGetsTheRouteModel(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		protocol:  map[string]string{"A": "chat", "B": "chat"},
		opts: gateway.Options{Routes: []gateway.Route{{Models: []string{"alias"}, Targets: []gateway.RouteTarget{
			{Upstream: "A", Model: "first-model"}, {Upstream: "B", Model: "second-model"}}}}},
	})
	h.ups["A"].Enqueue(upstreamtest.Status5xx(http.StatusServiceUnavailable))
	resp := h.post("/v1/responses", `{"model":"alias","input":"hi"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for name, want := range map[string]string{"A": "first-model", "B": "second-model"} {
		reqs := h.ups[name].Requests()
		if len(reqs) != 1 || reqs[0].Path != "/v1/chat/completions" {
			t.Fatalf("%s's requests: %+v", name, reqs)
		}
		if m := gjson.GetBytes(reqs[0].Body, "model").Str; m != want {
			t.Fatalf("the Chat upstream %s was asked for model %q, want its target's %q", name, m, want)
		}
	}
}

// TestUnknownKeyReloadsAtOnce: a key created in the store after the gateway
// loaded its keys (by another replica, or `sluice keys add`) works on its
// first request, long before the periodic refresh.
func TestUnknownKeyReloadsAtOnce(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Required: true, KeyStore: st, KeyRefresh: time.Hour,
	}}})
	const secret = "sk-created-later"
	if resp, _ := send(t, h, http.MethodPost, "/v1/responses", secret, simple); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an unknown key got %d", resp.StatusCode)
	}
	time.Sleep(1100 * time.Millisecond) // an unknown key reloads at most once a second
	if err := st.CreateKey(context.Background(), keyRec("later", secret, nil, store.KeyLimits{})); err != nil {
		t.Fatal(err)
	}
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("a key created after start: %d %s", resp.StatusCode, b)
	}
}

// TestAccessLogCanBeTurnedOff: with DisableAccessLog no request writes an
// access line; by default each one does.
func TestAccessLogCanBeTurnedOff(t *testing.T) {
	for _, disable := range []bool{false, true} {
		h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{DisableAccessLog: disable}}})
		resp := h.post("/v1/responses", simple)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		want := 1
		if disable {
			want = 0
		}
		if !disable { // the line is written as the request ends: wait for it
			for deadline := time.Now().Add(2 * time.Second); !strings.Contains(h.logs.String(), "access: request") && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
		} else {
			time.Sleep(300 * time.Millisecond)
		}
		n := strings.Count(h.logs.String(), "access: request")
		if n != want {
			t.Fatalf("DisableAccessLog %v: %d access lines, want %d", disable, n, want)
		}
	}
}

// TestPinnedRateLimitWithoutCodeNamesIt: an owner that answers a follow-up
// with a 429 error event carrying no code fails closed, and the client's
// message names it a rate limit.
func TestPinnedRateLimitWithoutCodeNamesIt(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{})
	_, id := h.turn("", nil)
	own := owner(id)
	if own == "" {
		t.Fatalf("first turn gave id %q", id)
	}
	for range 4 { // every replay the policy allows sees the same answer
		h.ups[own].Enqueue(upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusTooManyRequests,
			[]byte(`{"error":{"message":"slow down","type":"requests"}}`)))
	}
	evs, _ := h.turn(id, nil)
	last := assertOneTerminal(t, evs)
	if last.typ != "response.failed" || !strings.Contains(string(last.data), "out of capacity (rate_limit_exceeded)") {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}
}

// TestSharedBudgetIsKeptInRedis: the first request of a day against a
// token budget seeds the shared counter and is admitted by it, not by the
// per-replica fallback.
func TestSharedBudgetIsKeptInRedis(t *testing.T) {
	srv := redistest.Start(t)
	r1, _, _, lims := sharedLimitReplicasOn(t, srv, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 1000}))
	if resp, b := send(t, r1, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if n := lims[0].Fallbacks(); n != 0 {
		t.Fatalf("%d admissions fell back to the per-replica limiter with Redis up", n)
	}
}

// ownerGatedStore holds the anchor writes for one upstream until the test
// releases them; every write is reported when it starts.
type ownerGatedStore struct {
	store.Store
	owner   string
	entered chan store.Anchor
	release chan struct{}
}

func (g *ownerGatedStore) PutAnchor(ctx context.Context, a store.Anchor) error {
	g.entered <- a
	if a.Upstream == g.owner {
		select {
		case <-g.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.Store.PutAnchor(ctx, a)
}

// TestRescueAnchorLandsAfterTheFirstOwners: a stream continued on B after
// P broke is anchored to B only once P's anchor write (started at P's
// response.created) has finished, so P's late write cannot take the
// response back and send a follow-up to P.
func TestRescueAnchorLandsAfterTheFirstOwners(t *testing.T) {
	st := openStore(t, t.TempDir())
	g := &ownerGatedStore{Store: st, owner: "P", entered: make(chan store.Anchor, 16), release: make(chan struct{})}
	var once sync.Once
	open := func() { once.Do(func() { close(g.release) }) }
	t.Cleanup(open)
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{Store: g}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 9))
	resp := h.post("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
	defer resp.Body.Close()
	frames := readFrames(resp.Body)
	var first store.Anchor
	select {
	case first = <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no anchor write")
	}
	if first.Upstream != "P" {
		t.Fatalf("first anchor write for %q, want P", first.Upstream)
	}
	// B's own response id may be anchored as B answers; the client's id
	// must wait for P's write.
	for wait := time.After(blockedFor); ; {
		var a store.Anchor
		select {
		case a = <-g.entered:
		case <-wait:
		}
		if a.ResponseID == "" {
			break
		}
		if a.ResponseID == first.ResponseID {
			t.Fatalf("anchor write for %s/%s started while P's was still in flight", a.ResponseID, a.Upstream)
		}
	}
	open()
	done := until(t, frames, "response.completed", 5*time.Second)
	if id := gjson.GetBytes(done.data, "response.id").Str; id != first.ResponseID {
		t.Fatalf("completed %q, P's anchor was for %q", id, first.ResponseID)
	}
	checkDurable(t, st, first.ResponseID, "B")
}

// TestContinuationNewItemGetsTheClientsIndex: a target that continues a
// broken message by first reasoning (an item the client never sees), then
// finishing the message, then calling a tool, has its tool call numbered
// after the client's message, where the client's stream is, not where the
// target's own output put it.
func TestContinuationNewItemGetsTheClientsIndex(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	resp := `{"id":"{{id}}","object":"response","created_at":1767225600,"status":"in_progress","model":"{{model}}","output":[]}`
	call := `{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"lookup","arguments":"{}"}`
	var frames []upstreamtest.Frame
	for _, ev := range []string{
		`{"type":"response.created","sequence_number":0,"response":` + resp + `}`,
		`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`,
		`{"type":"response.output_item.done","sequence_number":2,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`,
		`{"type":"response.output_item.added","sequence_number":3,"output_index":1,"item":{"id":"msg_b","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
		`{"type":"response.content_part.added","sequence_number":4,"item_id":"msg_b","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"text":""}}`,
		`{"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_b","output_index":1,"content_index":0,"delta":" and more"}`,
		`{"type":"response.output_text.done","sequence_number":6,"item_id":"msg_b","output_index":1,"content_index":0,"text":" and more"}`,
		`{"type":"response.content_part.done","sequence_number":7,"item_id":"msg_b","output_index":1,"content_index":0,"part":{"type":"output_text","annotations":[],"text":" and more"}}`,
		`{"type":"response.output_item.done","sequence_number":8,"output_index":1,"item":{"id":"msg_b","type":"message","status":"completed","content":[{"type":"output_text","annotations":[],"text":" and more"}],"role":"assistant"}}`,
		`{"type":"response.output_item.added","sequence_number":9,"output_index":2,"item":{"id":"fc_1","type":"function_call","status":"in_progress","call_id":"call_1","name":"lookup","arguments":""}}`,
		`{"type":"response.function_call_arguments.delta","sequence_number":10,"item_id":"fc_1","output_index":2,"delta":"{}"}`,
		`{"type":"response.function_call_arguments.done","sequence_number":11,"item_id":"fc_1","output_index":2,"arguments":"{}"}`,
		`{"type":"response.output_item.done","sequence_number":12,"output_index":2,"item":` + call + `}`,
		`{"type":"response.completed","sequence_number":13,"response":{"id":"{{id}}","object":"response","created_at":1767225600,"status":"completed","model":"{{model}}","output":[` + call + `]}}`,
	} {
		frames = append(frames, upstreamtest.SSEEvent([]byte(ev)))
	}
	h.ups["B"].Enqueue(upstreamtest.Script{Frames: frames})
	_, evs := h.streamEvents("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
	var callIndex []int64
	terminal := ""
	for _, ev := range evs {
		typ := gjson.GetBytes(ev.Data, "type").Str
		if strings.HasPrefix(typ, "response.function_call_arguments.") || gjson.GetBytes(ev.Data, "item.type").Str == "function_call" {
			callIndex = append(callIndex, gjson.GetBytes(ev.Data, "output_index").Int())
		}
		if typ == "response.completed" || typ == "response.failed" {
			terminal = typ
		}
	}
	if terminal != "response.completed" || len(callIndex) != 4 {
		t.Fatalf("terminal %q, %d tool call events", terminal, len(callIndex))
	}
	for i, idx := range callIndex {
		if idx != 1 {
			t.Fatalf("tool call event %d at output_index %d, want 1 (after the client's message at 0)", i, idx)
		}
	}
}

package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// Tests that pin behaviour a second sampled mutation run found unchecked.

// TestGaps2ResumeWebSocketWithoutStartingAfter: a response.resume frame
// without starting_after replays the response's events from the first.
func TestGaps2ResumeWebSocketWithoutStartingAfter(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	h.ups["A"].Enqueue(slowAnswer())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func() *websocket.Conn { return h.dialWS(nil).conn }
	c := dial()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create","model":"gpt-fake-1","input":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	_, first, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.CloseNow()
	id := gjson.GetBytes(first, "response.id").Str

	c2 := dial()
	defer c2.CloseNow()
	if err := c2.Write(ctx, websocket.MessageText, []byte(`{"type":"response.resume","response_id":"`+id+`"}`)); err != nil {
		t.Fatal(err)
	}
	for want := int64(0); want < 3; want++ {
		_, data, err := c2.Read(ctx)
		if err != nil {
			t.Fatalf("resumed frame %d: %v", want, err)
		}
		if got := gjson.GetBytes(data, "sequence_number"); got.Type != gjson.Number || got.Int() != want {
			t.Fatalf("resumed frame %d: %s", want, data)
		}
	}
}

// TestGaps2ChatRoleOnlyIsNoItem: a Chat client that saw only the role chunk
// before its first target fell silent has no output item: the replay policy
// is asked with ItemsSent 0.
func TestGaps2ChatRoleOnlyIsNoItem(t *testing.T) {
	pol := &contPolicy{}
	route := gateway.Route{Models: []string{"gpt-5*"}, FirstToken: 300 * time.Millisecond,
		Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B", Model: "gpt-4.1"}}}
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		opts:      gateway.Options{Routes: []gateway.Route{route}, Policy: pol, IdleTimeout: 20 * time.Second},
	})
	silent := upstreamtest.HangAfter(2)
	silent.ChatFrames = upstreamtest.HangAfter(1).ChatFrames // the role-only chunk
	h.ups["A"].Enqueue(silent)
	_, _ = h.streamEvents("/v1/chat/completions", `{"model":"gpt-5-mini","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	ins := pol.asked()
	if len(ins) != 1 {
		t.Fatalf("the replay policy was asked %d times after content, want 1", len(ins))
	}
	if in := ins[0]; in.Phase != hostabi.PhaseAfterContent || in.ItemsSent != 0 || in.BytesSent != 0 {
		t.Fatalf("replay input %+v, want no item and no bytes sent", in)
	}
}

// TestGaps2KeyRefreshHonoured: a configured KeyRefresh is the reload
// period: a key deleted from the store (by another replica) stops working
// within a few periods, not after the 5 s default.
func TestGaps2KeyRefreshHonoured(t *testing.T) {
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	const secret = "sk-refresh-me"
	if err := st.CreateKey(context.Background(), keyRec("stored", secret, nil, store.KeyLimits{})); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Required: true, KeyStore: st, KeyRefresh: 100 * time.Millisecond,
	}}})
	const body = `{"model":"gpt-fake-1","input":"hi"}`
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, body); resp.StatusCode != http.StatusOK {
		t.Fatalf("the stored key: %d %s", resp.StatusCode, b)
	}
	if err := st.DeleteKey(context.Background(), "stored"); err != nil {
		t.Fatal(err)
	}
	// The bound only ends a broken run: the refresh is 100ms, but a loaded
	// machine can take far longer to reach the next one.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, _ := send(t, h, http.MethodPost, "/v1/responses", secret, body)
		if resp.StatusCode == http.StatusUnauthorized {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted key still gets %d after 15s with a 100ms refresh", resp.StatusCode)
		}
	}
}

// TestGaps2InputMessageItemsHaveStatus: an input item typed "message"
// without a status is listed by input_items with status completed, like an
// easy input message.
func TestGaps2InputMessageItemsHaveStatus(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	id := h.createResponse(`{"model":"gpt-fake-1","input":[{"role":"user","content":"hi"},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"in Paris"}]}]}`)
	status, body := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items?order=asc", "sk-client-secret")
	if status != http.StatusOK || gjson.GetBytes(body, "data.#").Int() != 2 {
		t.Fatalf("input_items: %d %s", status, body)
	}
	for i, st := range gjson.GetBytes(body, "data.#.status").Array() {
		if st.Str != "completed" {
			t.Fatalf("input item %d has status %q: %s", i, st.Str, body)
		}
	}
	if n := len(gjson.GetBytes(body, "data.#.status").Array()); n != 2 {
		t.Fatalf("%d of 2 input items have a status: %s", n, body)
	}
}

// TestGaps2StreamErrorEventRetryHint: a rate-limit error event that opens
// a stream tells the replay policy the wait its message asks for.
func TestGaps2StreamErrorEventRetryHint(t *testing.T) {
	p := &overridePolicy{override: func(hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) { return 0, false }}
	h := policyRouteHarness(t, p)
	h.ups["P"].Enqueue(upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusTooManyRequests,
		[]byte(`{"error":{"message":"Rate limit reached. Please try again in 1.5s.","type":"requests","code":"rate_limit_exceeded"}}`)))
	_ = routeSurfaces[0].do(t, h, "fast")
	ins := p.asked()
	if len(ins) == 0 || ins[0].Phase != hostabi.PhaseBeforeContent || ins[0].Code != "rate_limit_exceeded" || ins[0].RetryAfterMillis != 1500 {
		t.Fatalf("asked %+v, want a before-content rate limit with RetryAfterMillis 1500", ins)
	}
}

// errorAfterDeltas is an answer stopped after two text deltas, then ended
// by the upstream with the given error: a Responses error event (data) or a
// Chat error chunk (chat) and [DONE].
func errorAfterDeltas(data, chat string) upstreamtest.Script {
	s := upstreamtest.Answer("one two three four", 4)
	s.StopAfterDeltas, s.End = 2, upstreamtest.EndNormal
	s.Tail = []upstreamtest.Frame{upstreamtest.SSEEvent([]byte(data))}
	s.ChatTail = []upstreamtest.Frame{upstreamtest.SSEData([]byte(chat)), upstreamtest.SSEData([]byte("[DONE]"))}
	return s
}

// TestGaps2UpstreamErrorEventFields: a Responses error event after content
// ends the client's stream with response.failed carrying the event's code
// and message: at its top level (as the spec has them), also when a nested
// error object carries only a type.
func TestGaps2UpstreamErrorEventFields(t *testing.T) {
	for _, ev := range []string{
		`{"type":"error","sequence_number":6,"code":"server_error","message":"boom","param":null}`,
		`{"type":"error","sequence_number":6,"code":"server_error","message":"boom","error":{"type":"server_error"}}`,
	} {
		h := newHarness(t, harnessConfig{})
		h.ups["A"].Enqueue(errorAfterDeltas(ev, `{}`))
		_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
		last := assertOneTerminal(t, evs)
		if e := gjson.GetBytes(last.data, "response.error"); last.typ != "response.failed" || e.Get("code").Str != "server_error" || e.Get("message").Str != "boom" {
			t.Fatalf("upstream event %s: terminal %s", ev, last.data)
		}
	}
}

// TestGaps2ChatErrorChunkKeepsItsMessage: a Chat error chunk after content
// with a message and no code reaches the client with its message; one with
// neither becomes upstream_error carrying the payload.
func TestGaps2ChatErrorChunkKeepsItsMessage(t *testing.T) {
	for _, c := range []struct{ chunk, code, message string }{
		{`{"error":{"message":"boom","type":"server_error"}}`, "", "boom"},
		{`{"error":{"type":"server_error"}}`, "upstream_error", `{"error":{"type":"server_error"}}`},
	} {
		h := newHarness(t, harnessConfig{})
		h.ups["A"].Enqueue(errorAfterDeltas(`{}`, c.chunk))
		_, evs := h.streamEvents("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`)
		var e gjson.Result
		for _, ev := range evs {
			if x := gjson.GetBytes(ev.Data, "error"); x.Exists() {
				e = x
			}
		}
		if e.Get("code").Str != c.code || e.Get("message").Str != c.message {
			t.Fatalf("upstream chunk %s: the client's error is %s, want code %q message %q", c.chunk, e.Raw, c.code, c.message)
		}
	}
}

// TestGaps2FirstTokenMessageNamesTheBound: a stream ended by the route's
// first_token (continuation off) says which bound it hit.
func TestGaps2FirstTokenMessageNamesTheBound(t *testing.T) {
	// The client must have seen the lifecycle events (held 50ms) before the
	// bound fires; a second leaves room for a loaded machine's late timers.
	route := gateway.Route{Models: []string{"gpt-5*"}, FirstToken: time.Second, Continuation: gateway.ContinuationOff,
		Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B", Model: "gpt-4.1"}}}
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		opts:      gateway.Options{Routes: []gateway.Route{route}, LifecycleHold: 50 * time.Millisecond, IdleTimeout: 20 * time.Second},
	})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(2)) // response.created, response.in_progress
	_, evs := h.responsesStream(`{"model":"gpt-5-mini","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	if msg := gjson.GetBytes(last.data, "response.error.message").Str; last.typ != "response.failed" || !strings.Contains(msg, "within 1s") {
		t.Fatalf("terminal %s", last.data)
	}
}

package gateway_test

// Behaviour that mutation testing showed no other test pinned down (README,
// "Mutation testing"): each test names the user-visible rule it holds.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
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
			for deadline := time.Now().Add(15 * time.Second); !strings.Contains(h.logs.String(), "access: request") && time.Now().Before(deadline); {
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

// TestAccessLogCodeOnlyWhenThereIsOne: a refused request's access line
// names its error code; a served one has no code field.
func TestAccessLogCodeOnlyWhenThereIsOne(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	if resp, _ := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("served: %d", resp.StatusCode)
	}
	if resp, _ := send(t, h, http.MethodPost, "/v1/responses", "sk-nobody", simple); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("refused: %d", resp.StatusCode)
	}
	var lines []string
	for deadline := time.Now().Add(15 * time.Second); len(lines) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		lines = strings.Split(grepLines(h.logs.String(), "access: request"), "\n")
		if lines[0] == "" {
			lines = nil
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d access lines: %q", len(lines), lines)
	}
	for _, l := range lines {
		served := strings.Contains(l, "status=200")
		if hasCode := strings.Contains(l, "code="); hasCode == served {
			t.Fatalf("access line (served %v) with code field %v: %s", served, hasCode, l)
		}
		if !served && !strings.Contains(l, "code=invalid_api_key") {
			t.Fatalf("refused request's access line: %s", l)
		}
	}
}

// TestRateLimitHeadersOnlyForSetLimits: a key limited in requests per
// minute only gets the x-ratelimit-*-requests headers, none for tokens, and
// a key limited in tokens per minute only the *-tokens ones.
func TestRateLimitHeadersOnlyForSetLimits(t *testing.T) {
	for _, c := range []struct {
		limits      store.KeyLimits
		set, absent string
		limit       string
	}{
		{store.KeyLimits{RPM: 5}, "Requests", "Tokens", "5"},
		{store.KeyLimits{TPM: 100000}, "Tokens", "Requests", "100000"},
	} {
		h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, c.limits))
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Ratelimit-Limit-"+c.set) != c.limit {
			t.Fatalf("%+v: %d %v %s", c.limits, resp.StatusCode, resp.Header, b)
		}
		for _, name := range []string{"X-Ratelimit-Limit-", "X-Ratelimit-Remaining-", "X-Ratelimit-Reset-"} {
			if v := resp.Header.Get(name + c.absent); v != "" {
				t.Fatalf("%s%s: %q for a key without that limit (%+v)", name, c.absent, v, c.limits)
			}
		}
	}
}

// TestDayBudgetRetryAfterIsNextUTCMidnight: a key out of its daily budget
// is told to retry at the next UTC midnight.
func TestDayBudgetRetryAfterIsNextUTCMidnight(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 5}))
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("first: %d %s", resp.StatusCode, b)
	}
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "insufficient_quota")
	now := time.Now().UTC()
	want := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC).Sub(now).Seconds()
	got, err := strconv.ParseFloat(resp.Header.Get("Retry-After"), 64)
	if err != nil || got < want-5 || got > want+5 {
		t.Fatalf("Retry-After %q, want about %.0f s (the next UTC midnight)", resp.Header.Get("Retry-After"), want)
	}
}

// TestJSONAnchorWrittenWithoutComplaint: a JSON response whose anchor was
// stored logs no "served without a durable anchor" error.
func TestJSONAnchorWrittenWithoutComplaint(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st}})
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if strings.Contains(h.logs.String(), "without a durable anchor") {
		t.Fatalf("a stored anchor was reported lost:\n%s", h.logs.String())
	}
}

// TestResetResumableStreamIsAbandonedAfterGrace: a resumable stream whose
// client resets its connection while the upstream is silent, and that
// nobody resumes, is given up after the detach grace (its log ended
// failed), not left until a keep-alive write finds the client gone.
func TestResetResumableStreamIsAbandonedAfterGrace(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Resume: gateway.ResumeOptions{DetachGrace: 200 * time.Millisecond},
		LifecycleHold: -1, IdleTimeout: time.Minute, KeepAlive: time.Minute}})
	h.ups["A"].Enqueue(upstreamtest.Answer(fullAnswer, 9).StallAfterDeltas(3))
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"gpt-fake-1","input":"hi","stream":true}`
	fmt.Fprintf(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-client-secret\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := sse.NewReader(resp.Body, 1<<20)
	var id string
	for i := 0; i < 4; i++ { // created, the item, its part, a delta
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if i == 0 {
			id = gjson.GetBytes(ev.Data, "response.id").Str
		}
	}
	_ = conn.(*net.TCPConn).SetLinger(0) // close with a reset, not a clean EOF
	_ = conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, body := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret")
		if st := gjson.GetBytes(body, "status").Str; status == http.StatusOK && st == "failed" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reset stream is %d %s after 5 s with a 200 ms grace", status, gjson.GetBytes(body, "status").Str)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAccessLogKeepsTheStatusTheClientGot: a stream that fails after its
// 200 was sent is logged with status 200 (what the client got) and the
// failure as its reason, not the failure's own HTTP status.
func TestAccessLogKeepsTheStatusTheClientGot(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	h.ups["A"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	resp, _ := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var line string
	for deadline := time.Now().Add(15 * time.Second); line == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		line = grepLines(h.logs.String(), "access: request")
	}
	if !strings.Contains(line, "status=200") || strings.Contains(line, "reason=completed") {
		t.Fatalf("access line of a stream cut after its 200: %s", line)
	}
}

// TestWebSocketResumeUnknownNamesTheWindow: resuming an unknown response
// over a WebSocket is refused with the configured resume window in the
// message, as over SSE.
func TestWebSocketResumeUnknownNamesTheWindow(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Resume: gateway.ResumeOptions{Window: 7 * time.Minute}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := h.dialWS(nil).conn
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.resume","response_id":"resp_unknown"}`)); err != nil {
		t.Fatal(err)
	}
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if msg := gjson.GetBytes(data, "error.message").Str; !strings.Contains(msg, "resume_window is 7m0s") {
		t.Fatalf("resume of an unknown id: %s", data)
	}
}

// TestUpstreamSocketCapEvictsAnIdleOne: at the cap of upstream WebSockets,
// a request from a new session closes an idle socket and is served; it is
// not refused because a finished request still counts as waiting.
func TestUpstreamSocketCapEvictsAnIdleOne(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{UpstreamSockets: 1}, transport: map[string]string{"A": "websocket"}})
	for i, session := range []string{"s1", "s2", "s1"} {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(`{"model":"gpt-fake-1","input":"hi","stream":true}`))
		req.Header.Set("Authorization", "Bearer sk-client-secret")
		req.Header.Set("Session_id", session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "response.completed") {
			t.Fatalf("request %d (session %s): %d %s", i, session, resp.StatusCode, b)
		}
	}
	if n := h.ups["A"].WebSocketConnects(); n != 3 {
		t.Fatalf("%d upstream WebSockets opened, want 3 (one per session change at a cap of 1)", n)
	}
}

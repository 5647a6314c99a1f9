package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
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

// Tests that pin behaviour the third sampled mutation run (README, "Mutation
// testing") found unchecked.

// TestPortableChainOnChatUpstream: with portable on, the turns of a
// Chat-only upstream chain on their previous_response_id, so the kept
// history of the second turn is both turns' items, and a follow-up
// rehydrated onto a Chat-only upstream keeps each item once.
func TestPortableChainOnChatUpstream(t *testing.T) {
	st := openStore(t, t.TempDir())
	ups := portableUpstreams(t)
	chatOnly := func(name string) *harness {
		return newHarness(t, harnessConfig{
			servers:  map[string]*upstreamtest.Server{name: ups[name]},
			protocol: map[string]string{name: "chat"},
			opts:     gateway.Options{Portable: true, Store: st, Conversations: st},
		})
	}
	checkHistory := func(id string, want ...string) {
		t.Helper()
		hist, err := st.History(context.Background(), id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(hist) != len(want) {
			t.Fatalf("history of %s has %d items, want %d: %s", id, len(hist), len(want), hist)
		}
		for i, w := range want {
			if !strings.Contains(string(hist[i]), w) {
				t.Fatalf("history item %d = %s, want it to hold %q", i, hist[i], w)
			}
		}
	}

	hb := chatOnly("B")
	typ, id, data := hb.sseTurn(firstTurn)
	if typ != "response.completed" {
		t.Fatalf("first turn: %s %s\n%s", typ, id, data)
	}
	typ, id2, data := hb.sseTurn(followUp(id))
	if typ != "response.completed" {
		t.Fatalf("follow-up: %s %s\n%s", typ, id2, data)
	}
	checkHistory(id2, "first question", "Hello from B", "second question", "Hello from B")

	// The same conversation rehydrated onto another Chat-only upstream.
	ha := portableGateway(t, st, ups, gateway.Options{Portable: true}, "A")
	typ, idA, _ := ha.sseTurn(firstTurn)
	if typ != "response.completed" {
		t.Fatalf("first turn on A: %s %s", typ, idA)
	}
	typ, idC, data := chatOnly("B").sseTurn(followUp(idA))
	if typ != "response.completed" {
		t.Fatalf("rehydrated follow-up: %s %s\n%s", typ, idC, data)
	}
	checkHistory(idC, "first question", "Hello from A", "second question", "Hello from B")
}

// TestSharedBudgetSeededFromUsage: a Redis limiter whose day and month
// counters do not exist yet seeds each from the usage totals, asking for the
// right period, so tokens spent before (or on another deployment of the
// counters) count against the budget.
func TestSharedBudgetSeededFromUsage(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	var asked []string
	var mu sync.Mutex
	lim := &gateway.RedisLimiter{Store: rs, Now: func() time.Time { return now },
		Seed: func(_ context.Context, key, from, to string) (int64, error) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, key+" "+from+".."+to)
			return 100, nil
		}}
	for _, tt := range []struct {
		key       string
		limits    store.KeyLimits
		wantAsked string
	}{
		{"day", store.KeyLimits{TokensPerDay: 100}, "day 2026-03-14..2026-03-14"},
		{"month", store.KeyLimits{TokensPerMonth: 100}, "month 2026-03-01..2026-03-14"},
	} {
		asked = nil
		adm, lerr := lim.Admit(context.Background(), tt.key, tt.limits, 1)
		if lerr == nil {
			adm.Done(0)
			t.Fatalf("%s: admitted with the budget already spent (seeded with 100 of 100)", tt.key)
		}
		if lerr.Code != gateway.CodeInsufficientQuota {
			t.Fatalf("%s: %+v, want %s", tt.key, lerr, gateway.CodeInsufficientQuota)
		}
		if len(asked) != 1 || asked[0] != tt.wantAsked {
			t.Fatalf("%s: seeds asked %q, want [%q]", tt.key, asked, tt.wantAsked)
		}
	}
}

// TestAttemptsStopAtMaxAttempts: without routes, with more upstreams than
// max_attempts, a request whose every attempt fails before content makes
// max_attempts attempts and no more (only a continuation may take one
// beyond the bound).
func TestAttemptsStopAtMaxAttempts(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}, {Name: "C"}},
		opts:      gateway.Options{MaxAttempts: 2},
	})
	for _, n := range []string{"A", "B", "C"} {
		h.ups[n].SetDefault(upstreamtest.Status5xx(500))
	}
	resp := h.post("/v1/responses", `{"model":"m","input":"hi"}`)
	e := readError(t, resp)
	if resp.StatusCode != http.StatusBadGateway || deref(e.Error.Code) != "upstream_unavailable" {
		t.Fatalf("%d %+v", resp.StatusCode, e.Error)
	}
	a, b, c := h.ups["A"].RequestCount(), h.ups["B"].RequestCount(), h.ups["C"].RequestCount()
	if a+b+c != 2 {
		t.Fatalf("attempts A=%d B=%d C=%d; want 2 in all", a, b, c)
	}
}

// TestFirstTokenStoppedByChatContent: on a Chat stream, the first chunk
// with content stops the route's first_token timer, so a slow but
// answering upstream keeps its stream past first_token and no other target
// is called.
func TestFirstTokenStoppedByChatContent(t *testing.T) {
	route := gateway.Route{Models: []string{"gpt-5*"}, FirstToken: time.Second,
		Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B", Model: "gpt-4.1"}}}
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		opts:      gateway.Options{Routes: []gateway.Route{route}},
	})
	// The role chunk at once, then a content chunk every 250ms: content
	// comes well before first_token and the stream runs past it.
	slow := upstreamtest.Slow(250 * time.Millisecond)
	slow.ChatFrames = upstreamtest.ChatStream("chatcmpl-a", "gpt-5-mini", "one two three four five six", 6)
	h.ups["A"].Enqueue(slow)
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"gpt-5-mini","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	var text strings.Builder
	for _, ev := range evs {
		var v struct {
			Error   json.RawMessage
			Choices []struct{ Delta struct{ Content string } }
		}
		if ev.Done {
			continue
		}
		if err := json.Unmarshal(ev.Data, &v); err != nil || v.Error != nil {
			t.Fatalf("chunk %s (%v)", ev.Data, err)
		}
		for _, ch := range v.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
	if a, b := h.ups["A"].RequestCount(), h.ups["B"].RequestCount(); a != 1 || b != 0 {
		t.Fatalf("A called %d times, B %d; want A alone", a, b)
	}
	if text.String() != "one two three four five six" {
		t.Fatalf("text %q, want A's whole answer", text.String())
	}
}

// TestUnrescuedErrorEventKeepsItsMessage: an error event after content
// whose error has a message but no code, which no target can continue,
// ends the client's stream with that message, not the raw event.
func TestUnrescuedErrorEventKeepsItsMessage(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	a := upstreamtest.Answer(fullAnswer, 9)
	a.StopAfterDeltas, a.End = 3, upstreamtest.EndNormal
	a.Tail = []upstreamtest.Frame{upstreamtest.SSEEvent([]byte(`{"type":"error","sequence_number":7,"error":{"type":"server_error","message":"the model crashed"}}`))}
	h.ups["P"].Enqueue(a)
	h.ups["B"].SetDefault(upstreamtest.Status5xx(400))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := gjson.ParseBytes(evs[len(evs)-1].data)
	msg := last.Get("response.error.message").Str
	if last.Get("type").Str != "response.failed" || !strings.HasSuffix(msg, ": the model crashed") || strings.Contains(msg, "{") {
		t.Fatalf("terminal event %s; want response.failed with the upstream's message", last.Raw)
	}
}

// TestContinuedTwice: a continuation target that adds content and then
// fails is itself continued, as the stream's failure (after_content, rescue
// outcome continued), not as a target that failed before adding anything;
// the third target gets everything the client has as its prefill.
func TestContinuedTwice(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}, {Name: "C"}},
		opts: gateway.Options{Routes: []gateway.Route{{Models: []string{"m"}, Stall: 300 * time.Millisecond,
			Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}, {Upstream: "C"}}}}},
	})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3)) // "The quick brown"
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 6).CutAfterDeltas(2)) // " fox" " jumps"
	h.ups["C"].Enqueue(upstreamtest.Answer(fullAnswer, 2))
	o := rescueSurfaces[0].do(t, h)
	if o.text != fullAnswer || o.terminal != "response.completed" {
		t.Fatalf("client got %q ending %s %s", o.text, o.terminal, o.code)
	}
	if role, text := lastMessage(h.ups["C"].Requests()[0]); role != "assistant" || text != "The quick brown fox jumps" {
		t.Fatalf("C's prefill: %s %q", role, text)
	}
	m := h.metrics()
	for _, want := range []string{
		`sluice_upstream_attempts_total{outcome="after_content_cut",upstream="B"} 1`,
		`sluice_rescues_total{kind="prefill",outcome="continued",surface="responses_stream"} 1`,
		`sluice_rescues_total{kind="prefill",outcome="completed",surface="responses_stream"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %s:\n%s", want, grep(m, "sluice_"))
		}
	}
}

// TestDurableLogRecordsStatus: a durable stream log's record carries the
// response's status: in_progress while it runs, then its terminal status.
func TestDurableLogRecordsStatus(t *testing.T) {
	st := openStore(t, t.TempDir())
	opts := resumeOpts()
	opts.Resume.Store = st
	h := newHarness(t, harnessConfig{opts: opts})
	h.ups["A"].Enqueue(slowAnswer())
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"bg","background":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := gjson.GetBytes(b, "id").Str
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sawRunning := false
	for {
		rec, err := st.GetStreamLog(ctx, id)
		if err == nil && !rec.Ended {
			if rec.Status != "in_progress" && rec.Status != "queued" {
				t.Fatalf("a running log's record has status %q", rec.Status)
			}
			sawRunning = true
		}
		if err == nil && rec.Ended {
			if rec.Status != "completed" || gjson.GetBytes(rec.Response, "status").Str != "completed" {
				t.Fatalf("the ended log's record has status %q (response %s)", rec.Status, rec.Response)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the log of %s never ended: %v", id, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if !sawRunning {
		t.Log("the response ended before its running record was read")
	}
}

// TestInputItemsAfterCursor: input_items?after=ID lists the items after
// that one, in the order asked, and limit=1 (the smallest) lists one.
func TestInputItemsAfterCursor(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	id := h.createResponse(`{"model":"gpt-fake-1","input":[` +
		`{"id":"msg_1","type":"message","role":"user","content":"one"},` +
		`{"id":"msg_2","type":"message","role":"user","content":"two"},` +
		`{"id":"msg_3","type":"message","role":"user","content":"three"}]}`)
	for _, tt := range []struct{ query, want string }{
		{"order=asc&after=msg_1", `["msg_2","msg_3"]`},
		{"order=asc&after=msg_2", `["msg_3"]`},
		{"order=desc&after=msg_3", `["msg_2","msg_1"]`},
		{"order=asc&limit=1", `["msg_1"]`},
		{"order=asc&after=msg_1&limit=1", `["msg_2"]`},
	} {
		status, body := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items?"+tt.query, "sk-client-secret")
		if got := gjson.GetBytes(body, "data.#.id").Raw; status != http.StatusOK || got != tt.want {
			t.Fatalf("input_items?%s: %d, ids %s, want %s\n%s", tt.query, status, got, tt.want, body)
		}
	}
	// A cursor that names no item of the list is refused, not read as the
	// start of the list (a paging client would get its items twice).
	for _, after := range []string{"msg_bogus", "msg_", "resp_x"} {
		status, body := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items?after="+after, "sk-client-secret")
		if status != http.StatusBadRequest || gjson.GetBytes(body, "error.param").Str != "after" || gjson.GetBytes(body, "error.code").Str != "invalid_value" {
			t.Fatalf("input_items?after=%s: %d %s, want 400 invalid_value naming after", after, status, body)
		}
	}
}

// TestSharedBudgetCountsEarlierUsage: a Redis limiter configured without a
// Seed gets the gateway's, so tokens a key already used today (in the
// usage store) count against its day budget.
func TestSharedBudgetCountsEarlierUsage(t *testing.T) {
	srv := redistest.Start(t)
	rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	today := time.Now().UTC().Format(time.DateOnly)
	if err := rs.AddUsage(context.Background(), store.UsageRecord{Day: today, Key: "team-a", Model: "gpt-fake-1", Requests: 1, InputTokens: 10}); err != nil {
		t.Fatal(err)
	}
	r1, _, _, _ := sharedLimitReplicasOn(t, srv, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 5}))
	resp, b := send(t, r1, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "insufficient_quota")
}

// failingUsage is a usage store whose writes fail.
type failingUsage struct{ store.UsageStore }

func (failingUsage) AddUsage(context.Context, store.UsageRecord) error {
	return errors.New("disk full")
}

// TestUsageWriteFailureIsLogged: a usage record the store refuses is
// logged as a warning, and a stored one is not.
func TestUsageWriteFailureIsLogged(t *testing.T) {
	for _, failing := range []bool{false, true} {
		st := openStore(t, t.TempDir())
		var usage store.UsageStore = st
		if failing {
			usage = failingUsage{st}
		}
		h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
			Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, KeyStore: st, Usage: usage}}})
		if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != http.StatusOK {
			t.Fatalf("failing %v: %d %s", failing, resp.StatusCode, b)
		}
		deadline := time.Now().Add(5 * time.Second)
		for failing && !strings.Contains(h.logs.String(), "recording usage failed") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if !failing {
			// The record is written after the answer; wait until it is.
			today := time.Now().UTC().Format(time.DateOnly)
			for time.Now().Before(deadline) {
				if recs, _ := st.Usage(context.Background(), "team-a", today, today); len(recs) > 0 {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if logged := strings.Contains(h.logs.String(), "recording usage failed"); logged != failing {
			t.Fatalf("store failing %v: warning logged %v\n%s", failing, logged, grep(h.logs.String(), "usage"))
		}
	}
}

// TestWebSocketFrameOfExactlyTheLimit: a response.create frame of exactly
// max_ws_frame_bytes is served; one byte more is a 413.
func TestWebSocketFrameOfExactlyTheLimit(t *testing.T) {
	const limit = 4096
	h := newHarness(t, harnessConfig{opts: gateway.Options{MaxWSFrameBytes: limit}})
	c := h.dialWS(nil)
	frame := func(n int) string {
		head, tail := `{"type":"response.create","model":"gpt-fake-1","input":"`, `"}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	if evs := c.turn(frame(limit)); evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("a frame of exactly the limit: %s", evs[len(evs)-1].data)
	}
	if evs := c.turn(frame(limit + 1)); len(evs) != 1 || errorStatus(evs[0]) != http.StatusRequestEntityTooLarge {
		t.Fatalf("a frame one byte over the limit: %s", evs[0].data)
	}
}

package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// wsClient is a raw Responses WebSocket client.
type wsClient struct {
	t      testing.TB
	conn   *websocket.Conn
	header http.Header // the upgrade response's headers
}

func (h *harness) dialWS(headers map[string]string) *wsClient {
	h.t.Helper()
	hdr := http.Header{"Authorization": {"Bearer sk-client-secret"}, "OpenAI-Beta": {"responses_websockets=2026-02-06"}}
	for k, v := range headers {
		hdr.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(h.url, "http")+"/v1/responses", &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		h.t.Fatalf("dial: %v", err)
	}
	conn.SetReadLimit(64 << 20)
	h.t.Cleanup(func() { conn.CloseNow() })
	return &wsClient{t: h.t, conn: conn, header: resp.Header}
}

func (c *wsClient) send(frame string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.conn.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// turn sends one response.create and reads frames until a terminal event
// or an error frame.
func (c *wsClient) turn(frame string) []eventLike {
	c.t.Helper()
	c.send(frame)
	return c.readUntilEnd()
}

func (c *wsClient) readUntilEnd() []eventLike {
	c.t.Helper()
	var evs []eventLike
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, data, err := c.conn.Read(ctx)
		cancel()
		if err != nil {
			c.t.Fatalf("read after %d frames: %v", len(evs), err)
		}
		var v struct {
			Type     string
			Status   int
			Error    struct{ Code string }
			Response struct {
				ID    string
				Error struct{ Code, Message string }
			}
		}
		if err := json.Unmarshal(data, &v); err != nil {
			c.t.Fatalf("frame is not JSON: %s", data)
		}
		ev := eventLike{typ: v.Type, data: data, code: gatewayCode(v.Response.Error.Code, v.Response.Error.Message)}
		if v.Type == "error" {
			ev.code = v.Error.Code
		}
		evs = append(evs, ev)
		if isTerminal(v.Type) || v.Type == "error" {
			return evs
		}
	}
}

func createFrame(prev string) string {
	f := `{"type":"response.create","model":"gpt-fake-1","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]`
	if prev != "" {
		f += `,"previous_response_id":"` + prev + `"`
	}
	return f + "}"
}

func completedIDOf(evs []eventLike) string {
	last := evs[len(evs)-1]
	var v struct{ Response struct{ ID string } }
	_ = json.Unmarshal(last.data, &v)
	return v.Response.ID
}

func errorStatus(ev eventLike) int {
	var v struct{ Status int }
	_ = json.Unmarshal(ev.data, &v)
	return v.Status
}

func TestOpenAIWebSocketTwoTurnsChained(t *testing.T) {
	for _, transport := range []string{"http", "websocket"} {
		t.Run("upstream over "+transport, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st}, transport: map[string]string{"A": transport},
				upstreams: []upstreamtest.Options{{Name: "A", StrictPrevious: true}}})
			client := openai.NewClient(option.WithBaseURL(h.url+"/v1/"), option.WithAPIKey("sk-client-secret"), option.WithMaxRetries(0))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			conn, err := client.Responses.Connect(ctx, responses.ResponseConnectionOptions{})
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer conn.Close()
			prev := ""
			for turn := 1; turn <= 2; turn++ {
				params := responses.ResponsesClientEventResponseCreateParam{
					Model: "gpt-fake-1",
					Input: responses.ResponsesClientEventResponseCreateInputUnionParam{OfString: openai.String("hi")},
				}
				if prev != "" {
					params.PreviousResponseID = openai.String(prev)
				}
				if err := conn.Create(ctx, params); err != nil {
					t.Fatalf("turn %d create: %v", turn, err)
				}
				var text string
				for {
					ev, err := conn.Recv(ctx)
					if err != nil {
						t.Fatalf("turn %d recv: %v", turn, err)
					}
					if ev.Type == "response.output_text.delta" {
						text += gjson.Get(ev.RawJSON(), "delta").String()
					}
					if ev.Type == "response.completed" {
						prev = gjson.Get(ev.RawJSON(), "response.id").String()
						break
					}
					if ev.Type == "response.failed" || ev.Type == "error" {
						t.Fatalf("turn %d: %s", turn, ev.RawJSON())
					}
				}
				if text != "Hello from A" {
					t.Fatalf("turn %d text %q", turn, text)
				}
			}
			reqs := h.ups["A"].Requests()
			if len(reqs) != 2 || reqs[1].PreviousResponseID == "" || reqs[1].PreviousResponseID != reqs[0].ResponseID {
				t.Fatalf("upstream did not see the chain: %+v", reqs)
			}
			if transport == "websocket" {
				if n := h.ups["A"].WebSocketConnects(); n != 1 {
					t.Fatalf("%d upstream sockets for one session, want 1 (reused)", n)
				}
				if !reqs[0].WebSocket {
					t.Fatal("upstream was not reached over WebSocket")
				}
			}
		})
	}
}

func TestWebSocketTurnStateHeader(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.dialWS(nil)
	minted := c.header.Get("X-Codex-Turn-State")
	if !strings.HasPrefix(minted, "turn_") {
		t.Fatalf("minted turn state %q", minted)
	}
	c2 := h.dialWS(map[string]string{"x-codex-turn-state": "turn_mine"})
	if got := c2.header.Get("X-Codex-Turn-State"); got != "turn_mine" {
		t.Fatalf("echoed %q", got)
	}
	// A plain GET is told to upgrade (clients fall back to HTTP on 426).
	resp, err := http.Get(h.url + "/v1/responses")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("plain GET → %d", resp.StatusCode)
	}
}

func TestWebSocketReplayBeforeCreated(t *testing.T) {
	for _, shape := range []struct {
		name  string
		shape upstreamtest.Shape
	}{{"response.failed", upstreamtest.ShapeFailed}, {"error status 429", upstreamtest.ShapeErrorEvent}} {
		t.Run(shape.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket", "B": "websocket"},
				upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
			h.ups["A"].Enqueue(upstreamtest.QuotaEvent(shape.shape))
			want := upstreamtest.ResponsesEvents("resp_fixed_B", "gpt-fake-1", "Hello from B", 3)
			h.ups["B"].Enqueue(upstreamtest.Script{Frames: upstreamtest.ResponsesStream("resp_fixed_B", "gpt-fake-1", "Hello from B", 3)})
			c := h.dialWS(nil)
			// B looks busy, so selection tries idle A first; the replay then
			// has only B left.
			release := h.pool.Get("B").Acquire()
			defer release()
			evs := c.turn(createFrame(""))
			if len(evs) != len(want) {
				t.Fatalf("client got %d frames, want exactly B's %d", len(evs), len(want))
			}
			for i := range want {
				if string(evs[i].data) != string(want[i]) {
					t.Fatalf("frame %d:\n got %s\nwant %s", i, evs[i].data, want[i])
				}
			}
		})
	}
}

func TestWebSocketReplayGoesToTheOtherUpstream(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket", "B": "websocket"},
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	for _, name := range []string{"A", "B"} {
		h.ups[name].Enqueue(upstreamtest.QuotaEvent(upstreamtest.ShapeFailed))
	}
	// Whichever is first fails with usage_limit_reached; the replay goes to
	// the other, which also fails: one replay only, so the client, who saw
	// nothing of either, gets that quota's 429 error frame, as with no
	// upstream left (README "Failover and replay"); the first was suppressed.
	c := h.dialWS(nil)
	evs := c.turn(createFrame(""))
	if len(evs) != 1 || evs[0].typ != "error" || errorStatus(evs[0]) != 429 || evs[0].code != "usage_limit_reached" {
		t.Fatalf("frames %v", evs)
	}
	if h.ups["A"].RequestCount() != 1 || h.ups["B"].RequestCount() != 1 {
		t.Fatalf("attempts A=%d B=%d", h.ups["A"].RequestCount(), h.ups["B"].RequestCount())
	}
	// Both cool down for their quota now: the next request has no upstream
	// left → 429 frame with the quota code.
	evs = c.turn(createFrame(""))
	if last := evs[len(evs)-1]; last.typ != "error" || errorStatus(last) != 429 || last.code != "usage_limit_reached" {
		t.Fatalf("no upstream left: %s", last.data)
	}
}

func TestWebSocketNoUpstreamLeftAfterQuota(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket"}})
	h.ups["A"].Enqueue(upstreamtest.QuotaEvent(upstreamtest.ShapeErrorEvent))
	c := h.dialWS(nil)
	evs := c.turn(createFrame(""))
	last := evs[len(evs)-1]
	if len(evs) != 1 || last.typ != "error" || errorStatus(last) != 429 || last.code != "usage_limit_reached" {
		t.Fatalf("want one 429 usage_limit_reached error frame (the quota, no upstream left to replay on), got %s", last.data)
	}
}

func TestWebSocketNoReplayAfterContent(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket", "B": "websocket"},
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	for _, name := range []string{"A", "B"} {
		h.ups[name].Enqueue(afterContent(upstreamtest.QuotaEvent(upstreamtest.ShapeFailed)))
	}
	c := h.dialWS(nil)
	evs := c.turn(createFrame(""))
	if evs[0].typ != "response.created" || evs[len(evs)-1].typ != "response.failed" {
		t.Fatalf("frames %v", evs)
	}
	if total := h.ups["A"].RequestCount() + h.ups["B"].RequestCount(); total != 1 {
		t.Fatalf("replayed after the client saw content: %d attempts", total)
	}
}

func TestWebSocketPinnedFollowUpOnQuotaFailsClosed(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st}, transport: map[string]string{"A": "websocket", "B": "websocket"},
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	c := h.dialWS(nil)
	evs := c.turn(createFrame(""))
	id := completedIDOf(evs)
	own := owner(id)
	h.ups[own].Enqueue(upstreamtest.QuotaEvent(upstreamtest.ShapeErrorEvent))
	connects := h.ups["A"].WebSocketConnects() + h.ups["B"].WebSocketConnects()
	evs = c.turn(createFrame(id))
	last := evs[len(evs)-1]
	if len(evs) != 1 || last.typ != "error" || last.code != "upstream_unavailable" {
		t.Fatalf("pinned follow-up: %v", evs)
	}
	if h.ups[other(own)].RequestCount() != 0 {
		t.Fatal("a pinned follow-up was replayed elsewhere")
	}
	if n := h.ups["A"].WebSocketConnects() + h.ups["B"].WebSocketConnects(); n != connects {
		t.Fatalf("%d new upstream connects, want 0 (the session's socket is reused)", n-connects)
	}
}

func TestWebSocketOversizeFrameThenNextRequestWorks(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{MaxWSFrameBytes: 4096}, transport: map[string]string{"A": "websocket"}})
	c := h.dialWS(nil)
	big := `{"type":"response.create","model":"gpt-fake-1","input":"` + strings.Repeat("x", 8000) + `"}`
	evs := c.turn(big)
	var v struct {
		Status int
		Error  struct{ Code, Param string }
	}
	_ = json.Unmarshal(evs[0].data, &v)
	if len(evs) != 1 || v.Status != 413 || v.Error.Code != "payload_too_large" || v.Error.Param != "input" {
		t.Fatalf("oversize: %s", evs[0].data)
	}
	if h.ups["A"].WebSocketConnects() != 0 || h.ups["A"].RequestCount() != 0 {
		t.Fatal("the oversize frame reached the upstream")
	}
	evs = c.turn(createFrame(""))
	if evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("next request: %v", evs)
	}
	// Garbage and unknown frame types get error frames; the socket lives on.
	for _, bad := range []string{`not json`, `{"type":"session.update"}`, `{"type":"response.create","input":"x"}`} {
		evs = c.turn(bad)
		if evs[0].typ != "error" || errorStatus(evs[0]) != 400 {
			t.Fatalf("%s → %s", bad, evs[0].data)
		}
	}
	if evs := c.turn(createFrame("")); evs[len(evs)-1].typ != "response.completed" {
		t.Fatal("socket unusable after bad frames")
	}
}

func TestWebSocketMultiplexedFollowUpsOneAnchorLost(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st}, transport: map[string]string{"A": "websocket"},
		upstreams: []upstreamtest.Options{{Name: "A", StrictPrevious: true, PreviousShape: upstreamtest.ShapeErrorEvent}}})
	scope := map[string]string{"x-codex-turn-state": "turn_shared"}
	c1 := h.dialWS(scope)
	id1 := completedIDOf(c1.turn(createFrame("")))
	id2 := completedIDOf(c1.turn(createFrame("")))
	h.ups["A"].ForgetResponses(id1) // the upstream lost one anchor

	// Two clients of the same scope send follow-ups at once: they share one
	// upstream socket, one after the other.
	c2 := h.dialWS(scope)
	var wg sync.WaitGroup
	var lost, kept []eventLike
	wg.Add(2)
	go func() { defer wg.Done(); lost = c1.turn(createFrame(id1)) }()
	go func() { defer wg.Done(); kept = c2.turn(createFrame(id2)) }()
	wg.Wait()
	if last := lost[len(lost)-1]; last.typ != "response.failed" || last.code != "stream_incomplete" {
		t.Fatalf("lost anchor: %s", last.data)
	}
	if last := kept[len(kept)-1]; last.typ != "response.completed" {
		t.Fatalf("other request failed too: %s", last.data)
	}
	if n := h.ups["A"].WebSocketConnects(); n != 1 {
		t.Fatalf("%d upstream sockets, want the scope's one", n)
	}
	// Both sockets go on working.
	if evs := c1.turn(createFrame("")); evs[len(evs)-1].typ != "response.completed" {
		t.Fatal("c1 stuck")
	}
}

func TestHTTPClientThroughWebSocketUpstreamAndAutoFallback(t *testing.T) {
	h := newHarness(t, harnessConfig{transport: map[string]string{"A": "websocket", "B": "auto"},
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B", DisableWebSocket: true}}})
	for i := 0; i < 4; i++ {
		_, evs := h.responsesStream(respBody)
		if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
			t.Fatalf("request %d: %s", i, last.data)
		}
	}
	reqsA := h.ups["A"].Requests()
	if len(reqsA) == 0 || !reqsA[0].WebSocket {
		t.Fatalf("A was not reached over WebSocket: %+v", reqsA)
	}
	reqsB := h.ups["B"].Requests()
	if len(reqsB) == 0 || reqsB[0].WebSocket || h.ups["B"].WebSocketRefused() != 1 {
		t.Fatalf("B (auto, no WebSocket) should fall back to HTTP once: refused=%d reqs=%d", h.ups["B"].WebSocketRefused(), len(reqsB))
	}
}

func TestWebSocketDrain(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{DrainGrace: 300 * time.Millisecond}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(3))
	busy := h.dialWS(nil)
	idle := h.dialWS(nil)
	busy.send(createFrame(""))
	if err := h.ups["A"].WaitRequests(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.gw.Shutdown(context.Background()) }()
	evs := busy.readUntilEnd()
	if last := evs[len(evs)-1]; last.typ != "response.failed" || last.code != "stream_incomplete" {
		t.Fatalf("in-flight request on drain: %s", last.data)
	}
	for _, c := range []*wsClient{busy, idle} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := c.conn.Read(ctx)
		cancel()
		if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
			t.Fatalf("socket closed with %v, want a normal close", err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

func TestWebSocketPingsAnsweredDuringARequest(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.Slow(100 * time.Millisecond))
	c := h.dialWS(nil)
	ping := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := c.conn.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
	}
	c.send(createFrame(""))
	// The client must keep reading for its pong to be processed, as any
	// WebSocket client does; read the request's frames meanwhile.
	result := make(chan []eventLike, 1)
	go func() { result <- c.readUntilEnd() }()
	ping()
	if evs := <-result; evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("request during pings: %v", evs)
	}
}

func TestWebSocketInputChunksMergeIntoTheNextCreate(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.dialWS(nil)
	c.send(`{"type":"input_chunk","sequence_id":1,"payload":" world"}`)
	c.send(`{"type":"input_chunk","sequence_id":0,"payload":"hello"}`)
	evs := c.turn(`{"type":"response.create","model":"gpt-fake-1","input":[{"role":"user","content":[{"type":"input_text","text":"Say: "}]}]}`)
	if evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("%v", evs)
	}
	if body := string(h.ups["A"].Requests()[0].Body); !strings.Contains(body, "Say: hello world") {
		t.Fatalf("upstream body lacks the merged chunks: %s", body)
	}
	// A conflicting chunk is answered with an error frame; the socket lives on.
	c.send(`{"type":"input_chunk","sequence_id":0,"payload":"a"}`)
	evs = c.turn(`{"type":"input_chunk","sequence_id":0,"payload":"b"}`)
	if evs[0].typ != "error" || errorStatus(evs[0]) != 409 {
		t.Fatalf("conflict: %s", evs[0].data)
	}
}

// TestWebSocketRateLimitFrameCarriesTheWait: a 429 on a client WebSocket
// is an error frame whose headers hold the wait, as OpenAI's frames do and
// as Retry-After and retry-after-ms would over HTTP: Codex reads it there
// and waits instead of retrying at once. Both the upstream's 429 relayed
// and the gateway's own 429 while every target cools down carry it.
func TestWebSocketRateLimitFrameCarriesTheWait(t *testing.T) {
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}}})
	h.ups["A"].SetDefault(upstreamtest.Status429(2 * time.Second))
	c := h.dialWS(nil)
	for i, want := range []string{"upstream's", "gateway's"} {
		evs := c.turn(createFrame(""))
		last := evs[len(evs)-1]
		if last.typ != "error" || gjson.GetBytes(last.data, "status").Int() != http.StatusTooManyRequests {
			t.Fatalf("turn %d: %s", i, last.data)
		}
		hdr := gjson.GetBytes(last.data, "headers")
		if s := hdr.Get("retry-after").Str; s == "" || s == "0" || hdr.Get("retry-after-ms").Str == "" {
			t.Fatalf("the %s 429 frame does not say how long to wait: %s", want, last.data)
		}
	}
}

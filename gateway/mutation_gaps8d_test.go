package gateway_test

// Behaviour a client or an operator can see that no other test pinned:
// anchor-write failures in the log, the bound on a complete upstream
// answer, an empty input_items page, DELETE of a response only the store
// holds, the WebSocket inbound read limit, what a request's usage costs the
// key's day budget, and the span of a stream that ends failed.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// g8dFailingAnchors is a store whose anchor writes all fail.
type g8dFailingAnchors struct{ store.Store }

func (g8dFailingAnchors) PutAnchor(context.Context, store.Anchor) error {
	return errors.New("disk full")
}

// TestGaps8dAnchorWriteFailureIsLoggedOnlyWhenItFails: the operator's log
// says "recording anchor failed" when an anchor could not be made durable,
// and never for a write that succeeded. A JSON answer is relayed only after
// its anchor write has finished, so the log is complete when the client has
// its answer.
func TestGaps8dAnchorWriteFailureIsLoggedOnlyWhenItFails(t *testing.T) {
	for _, failing := range []bool{false, true} {
		var st store.Store = openStore(t, t.TempDir())
		if failing {
			st = g8dFailingAnchors{st}
		}
		h := newHarness(t, harnessConfig{opts: gateway.Options{Store: st}})
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || gjson.GetBytes(b, "id").Str == "" {
			t.Fatalf("store failing %v: %d %s", failing, resp.StatusCode, b)
		}
		if logged := strings.Contains(h.logs.String(), "recording anchor failed"); logged != failing {
			t.Fatalf("store failing %v: \"recording anchor failed\" logged %v\n%s", failing, logged, grepLines(h.logs.String(), "anchor"))
		}
	}
}

// TestGaps8dOversizedJSONAnswerIsRefused: a complete (non-stream) upstream
// answer larger than four times max_event_bytes is not relayed cut short
// as if it were whole: the client gets the gateway's stream_incomplete
// error naming the bound.
func TestGaps8dOversizedJSONAnswerIsRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{MaxEventBytes: 1024}})
	h.ups["A"].Enqueue(upstreamtest.Script{Body: upstreamtest.ResponseJSON("resp_big", "gpt-fake-1", strings.Repeat("x", 8000))})
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("an answer over the bound was relayed: %d bytes", len(b))
	}
	e := readError(t, resp)
	if !strings.Contains(e.Error.Message, "exceeds 4096 bytes") {
		t.Fatalf("status %d, error %+v; want the bound of 4096 bytes named", resp.StatusCode, e)
	}
}

// TestGaps8dInputItemsPageAfterTheLastItemIsEmpty: input_items after the
// last item is an empty page with null first_id and last_id, not an error.
func TestGaps8dInputItemsPageAfterTheLastItemIsEmpty(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	id := h.createResponse(`{"model":"gpt-fake-1","input":[` +
		`{"id":"msg_1","type":"message","role":"user","content":"one"},` +
		`{"id":"msg_2","type":"message","role":"user","content":"two"}]}`)
	status, body := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items?order=asc&after=msg_2", "sk-client-secret")
	if status != http.StatusOK {
		t.Fatalf("input_items after the last item: %d %s", status, body)
	}
	for _, f := range []string{"data.#", "has_more", "first_id", "last_id"} {
		want := map[string]string{"data.#": "0", "has_more": "false", "first_id": "null", "last_id": "null"}[f]
		if got := gjson.GetBytes(body, f).Raw; got != want {
			t.Fatalf("%s = %s, want %s\n%s", f, got, want, body)
		}
	}
}

// TestGaps8dDeleteAResponseOnlyTheStoreHolds: with durable streams, a
// replica that never served a response deletes it from the shared store:
// it answers deleted, and the response is gone for every replica.
func TestGaps8dDeleteAResponseOnlyTheStoreHolds(t *testing.T) {
	st := openStore(t, t.TempDir())
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	opts := resumeOpts()
	opts.Resume.Store = st
	r1 := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up}, opts: opts})
	r2 := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up}, opts: opts})
	resp := r1.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := gjson.GetBytes(b, "id").Str
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	r2.waitFor("/v1/responses/"+id, func(body []byte) bool { return gjson.GetBytes(body, "status").Str == "completed" })
	status, body := r2.call(http.MethodDelete, "/v1/responses/"+id, "sk-client-secret")
	if status != http.StatusOK || gjson.GetBytes(body, "id").Str != id || gjson.GetBytes(body, "deleted").Type != gjson.True {
		t.Fatalf("DELETE on the replica that did not serve it: %d %s", status, body)
	}
	if status, body := r2.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret"); status != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d %s", status, body)
	}
	if _, err := st.GetStreamLog(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the stored log after DELETE: %v", err)
	}
}

// TestGaps8dWebSocketFrameOverTheInboundLimitClosesTheSocket: a frame over
// max_ws_frame_bytes but within max_ws_inbound_bytes is refused with a 413
// on an open socket; a frame over max_ws_inbound_bytes closes the socket
// with 1009 (message too big) without being read.
func TestGaps8dWebSocketFrameOverTheInboundLimitClosesTheSocket(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{MaxWSFrameBytes: 4096, MaxWSInboundBytes: 64 << 10}})
	c := h.dialWS(nil)
	frame := func(n int) string {
		head, tail := `{"type":"response.create","model":"gpt-fake-1","input":"`, `"}`
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	if evs := c.turn(frame(32 << 10)); len(evs) != 1 || errorStatus(evs[0]) != http.StatusRequestEntityTooLarge {
		t.Fatalf("a frame over max_ws_frame_bytes: %s", evs[len(evs)-1].data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = c.conn.Write(ctx, websocket.MessageText, []byte(frame(128<<10)))
	_, data, err := c.conn.Read(ctx)
	if err == nil {
		t.Fatalf("a frame over max_ws_inbound_bytes was answered: %.200s", data)
	}
	if got := websocket.CloseStatus(err); got != websocket.StatusMessageTooBig {
		t.Fatalf("the socket ended with %v (%v), want 1009", got, err)
	}
}

// TestGaps8dUsageChargesInputPlusOutputToTheDayBudget: a key's day budget
// is charged the request's input and output tokens together: one answer of
// 8 input and 3 output tokens spends a budget of 10, though neither count
// alone would.
func TestGaps8dUsageChargesInputPlusOutputToTheDayBudget(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: 10}))
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
	in, out := gjson.GetBytes(b, "usage.input_tokens").Int(), gjson.GetBytes(b, "usage.output_tokens").Int()
	if resp.StatusCode != http.StatusOK || in <= 0 || out <= 0 || in >= 10 || out >= 10 || in+out < 10 {
		t.Fatalf("first: %d %s (the test needs input and output each under 10, together at least 10)", resp.StatusCode, b)
	}
	g7bAccessLine(t, h) // written after the request settled its usage with the limiter
	resp, b = send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple)
	limit(t, resp, b, "insufficient_quota")
}

// TestGaps8dStreamEndingFailedMarksTheRequestSpanAnError: a stream whose
// terminal is response.failed (here the gateway's own, after the upstream
// broke off mid-answer, which carries no usage) is an error in the
// request's trace even though its HTTP status was 200.
func TestGaps8dStreamEndingFailedMarksTheRequestSpanAnError(t *testing.T) {
	recv := newOTLPReceiver(t)
	tp, err := gateway.NewOTLPTracerProvider(context.Background(), recv.URL+"/v1/traces", 1, "test")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	h.ups["A"].SetDefault(upstreamtest.Answer("Hello there, friend", 3).CutAfterDeltas(1))
	resp, evs := postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, nil)
	if resp.StatusCode != http.StatusOK || len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.failed" {
		t.Fatalf("client got %d, %d events, last %v", resp.StatusCode, len(evs), evs)
	}
	if strings.Contains(string(evs[len(evs)-1].Data), `"usage"`) {
		t.Fatalf("the terminal carries usage; this test needs one without: %s", evs[len(evs)-1].Data)
	}
	rs := onlyRequestSpan(t, tp, recv)
	if v := spanAttr(rs, "http.response.status_code"); v.GetIntValue() != 200 {
		t.Fatalf("request span status %v", v)
	}
	if rs.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Fatalf("the request span of a failed stream has status %v, want an error", rs.Status)
	}
}

// TestRequestSpanStatusIsWhatTheClientGot: a stream that fails before its
// first event (every upstream answered 429) has, in its request span, the
// HTTP status its client got: 200 for a Responses stream, which opens and
// ends with response.failed (and is an error in the trace), the 429 itself
// for a Chat stream, which gets the status and JSON error.
func TestRequestSpanStatusIsWhatTheClientGot(t *testing.T) {
	for _, c := range []struct {
		path, body string
		status     int
	}{
		{"/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, http.StatusOK},
		{"/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`, http.StatusTooManyRequests},
	} {
		t.Run(c.path, func(t *testing.T) {
			recv := newOTLPReceiver(t)
			tp, err := gateway.NewOTLPTracerProvider(context.Background(), recv.URL+"/v1/traces", 1, "test")
			if err != nil {
				t.Fatal(err)
			}
			h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
			for _, up := range h.ups {
				up.SetDefault(upstreamtest.Status429(time.Second))
			}
			resp, _ := postWith(t, h, c.path, c.body, nil)
			if resp.StatusCode != c.status {
				t.Fatalf("client got %d, want %d", resp.StatusCode, c.status)
			}
			rs := onlyRequestSpan(t, tp, recv)
			if v := spanAttr(rs, "http.response.status_code"); v.GetIntValue() != int64(c.status) {
				t.Fatalf("request span status %v, the client got %d", v, c.status)
			}
			if v := spanAttr(rs, "error.type").GetStringValue(); v != "rate_limit_exceeded" {
				t.Errorf("request span error.type %q", v)
			}
			if c.status == http.StatusOK && rs.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("the request span of a failed stream has status %v, want an error", rs.Status)
			}
		})
	}
}

// onlyRequestSpan flushes tp and returns the one request (server) span recv
// got.
func onlyRequestSpan(t *testing.T, tp *sdktrace.TracerProvider, recv *otlpReceiver) *tracepb.Span {
	t.Helper()
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var servers []*tracepb.Span
	for deadline := time.Now().Add(10 * time.Second); len(servers) == 0; time.Sleep(20 * time.Millisecond) {
		servers = spanByKind(t, recv.waitSpans(t, 1), tracepb.Span_SPAN_KIND_SERVER)
		if len(servers) == 0 && time.Now().After(deadline) {
			t.Fatal("no request span arrived")
		}
	}
	if len(servers) != 1 {
		t.Fatalf("%d request spans", len(servers))
	}
	return servers[0]
}

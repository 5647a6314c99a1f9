package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.uber.org/goleak"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// assertOneTerminal checks the terminal-event rule on a Responses stream:
// the last event is terminal, and it is the only terminal event.
func assertOneTerminal(t testing.TB, evs []eventLike) eventLike {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	terminals := 0
	for _, ev := range evs {
		if isTerminal(ev.typ) {
			terminals++
		}
	}
	last := evs[len(evs)-1]
	if terminals != 1 || !isTerminal(last.typ) {
		var types []string
		for _, ev := range evs {
			types = append(types, ev.typ)
		}
		t.Fatalf("want exactly one terminal event, last; got %v", types)
	}
	return last
}

// assertOpensItsFailure checks a stream whose answer is a failure before
// any content: OpenAI's streams start with response.created, whose Response
// is the failed one's, in progress (the SDKs' stream helpers refuse a
// stream that starts with its terminal event).
func assertOpensItsFailure(t testing.TB, evs []eventLike) {
	t.Helper()
	first, last := evs[0], evs[len(evs)-1]
	created, failed := gjson.GetBytes(first.data, "response"), gjson.GetBytes(last.data, "response")
	if first.typ != "response.created" || created.Get("status").Str != "in_progress" || created.Get("error").Type != gjson.Null ||
		created.Get("id").Str == "" || created.Get("id").Str != failed.Get("id").Str ||
		gjson.GetBytes(first.data, "sequence_number").Int() != 0 || gjson.GetBytes(last.data, "sequence_number").Int() != int64(len(evs)-1) {
		t.Fatalf("the failure is not opened by its response.created:\n%s\n%s", first.data, last.data)
	}
}

type eventLike struct {
	typ, code string
	data      []byte
	empty     bool
}

func (h *harness) responsesStream(body string) (*http.Response, []eventLike) {
	resp, evs := h.streamEvents("/v1/responses", body)
	out := make([]eventLike, 0, len(evs))
	for _, ev := range evs {
		out = append(out, eventLike{typ: eventType(ev), code: errorCode(ev), data: ev.Data, empty: strings.TrimSpace(string(ev.Data)) == ""})
	}
	return resp, out
}

func TestResponsesStreamFaults(t *testing.T) {
	tests := []struct {
		name     string
		script   upstreamtest.Script
		terminal string // response.completed / response.failed
		code     string // error code of response.failed
		reason   string // sluice_stream_terminal_total reason
	}{
		{"cut mid-stream", upstreamtest.CutAfter(3), "response.failed", "stream_incomplete", "upstream_cut"},
		{"hang", upstreamtest.HangAfter(3), "response.failed", "stream_incomplete", "idle_timeout"},
		{"error field", upstreamtest.ErrorField([]byte(`{"code":"server_error","message":"boom","type":"server_error"}`), 3), "response.failed", "server_error", "upstream_error"},
		{"empty data lines", upstreamtest.WithEmptyData(), "response.completed", "", "completed"},
		{"garbage frame (skipped)", upstreamtest.Garbage(), "response.completed", "", "completed"},
		{"three garbage frames", garbageRun(3), "response.failed", "stream_incomplete", "unparseable_event"},
		{"oversize event", upstreamtest.Oversize(8192), "response.failed", "stream_incomplete", "oversize_event"},
		{"slow but alive", upstreamtest.Slow(30 * time.Millisecond), "response.completed", "", "completed"},
		{"error event after content", afterContent(upstreamtest.QuotaEvent(upstreamtest.ShapeErrorEvent)), "response.failed", "usage_limit_reached", "upstream_error"},
		{"response.failed after content", afterContent(upstreamtest.QuotaEvent(upstreamtest.ShapeFailed)), "response.failed", "usage_limit_reached", "failed"},
		// Before content, response.created is held back: the failure is
		// invisible and replayed, and with no other upstream the client
		// gets that quota's 429, with its code
		// (TestQuotaAfterCreatedIsReplayedInvisibly).
		{"error event after created", upstreamtest.QuotaEvent(upstreamtest.ShapeErrorEvent).AfterCreated(), "response.failed", "usage_limit_reached", "gateway_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: gateway.Options{IdleTimeout: 300 * time.Millisecond, MaxEventBytes: 4096}})
			h.ups["A"].Enqueue(tt.script)
			resp, evs := h.responsesStream(respBody)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			last := assertOneTerminal(t, evs)
			if last.typ != tt.terminal || last.code != tt.code {
				t.Fatalf("terminal %s code %q, want %s %q", last.typ, last.code, tt.terminal, tt.code)
			}
			for _, ev := range evs {
				if ev.empty {
					t.Fatal("an empty data event reached the client")
				}
				if ev.typ == "error" {
					t.Fatal("a bare error event reached the client")
				}
			}
			if tt.code == "stream_incomplete" {
				var v struct {
					SequenceNumber int64 `json:"sequence_number"`
					Response       struct{ ID, Status string }
				}
				_ = json.Unmarshal(last.data, &v)
				if v.Response.Status != "failed" || v.SequenceNumber != int64(len(evs)-1) {
					t.Fatalf("synthesized terminal %s", last.data)
				}
				if len(evs) > 1 && v.Response.ID == "" {
					t.Fatalf("synthesized terminal lost the response id: %s", last.data)
				}
			}
			if m := h.metrics(); !strings.Contains(m, `sluice_stream_terminal_total{reason="`+tt.reason+`",surface="responses_stream"} 1`) {
				t.Fatalf("terminal reason %q not counted:\n%s", tt.reason, grep(m, "stream_terminal"))
			}
		})
	}
}

// afterContent is sc's frames after the canned stream's first three events
// (response.created, response.in_progress, output_item.added): a failure
// once the client has seen content.
func afterContent(sc upstreamtest.Script) upstreamtest.Script {
	sc.Frames = append(upstreamtest.CutAfter(3).Frames, sc.Frames...)
	return sc
}

// garbageRun is the canned stream with n unparseable frames in a row after
// its first text delta (n in a row in chat too).
func garbageRun(n int) upstreamtest.Script {
	sc := upstreamtest.Garbage()
	g := upstreamtest.Frame{Raw: []byte("data: not json{{\n\n"), WS: []byte("not json{{")}
	for _, fs := range []*[]upstreamtest.Frame{&sc.Frames, &sc.ChatFrames} {
		for i, f := range *fs {
			if string(f.Raw) == string(g.Raw) {
				run := append([]upstreamtest.Frame{}, (*fs)[:i]...)
				for k := 0; k < n; k++ {
					run = append(run, g)
				}
				*fs = append(run, (*fs)[i+1:]...)
				break
			}
		}
	}
	return sc
}

func grep(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSlowStreamOutlivesTheIdleTimeout: the idle timeout bounds the silence
// between upstream events, not the stream: each gap here is a fifth of it,
// the whole stream twice as long, and every event restarts the count.
func TestSlowStreamOutlivesTheIdleTimeout(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{IdleTimeout: time.Second}})
	h.ups["A"].Enqueue(upstreamtest.Slow(200 * time.Millisecond))
	start := time.Now()
	_, evs := h.responsesStream(respBody)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s %q after %v, want response.completed", last.typ, last.code, time.Since(start))
	}
	if took := time.Since(start); took <= time.Second {
		t.Fatalf("the stream took %v, no longer than the idle timeout: it shows nothing", took)
	}
}

func TestFailuresBeforeAnyEvent(t *testing.T) {
	// One upstream: nothing to fail over to. JSON clients get an HTTP error;
	// stream clients get one response.failed (the terminal-event rule), except
	// for an upstream 4xx, which passes through as it is. Each script is
	// queued twice: a 500 or a failed connection is retried once on the same
	// upstream (a 429 beyond retry.max_wait is not).
	tests := []struct {
		name       string
		script     upstreamtest.Script
		jsonStatus int    // 0: not applicable to non-stream requests
		jsonCode   string //
		streamCode string // code of response.failed; "" → the 4xx passes through
	}{
		{"429", upstreamtest.Status429(30 * time.Second), 429, "rate_limit_exceeded", "rate_limit_exceeded"},
		{"quota error event", upstreamtest.QuotaEvent(upstreamtest.ShapeErrorEvent), 0, "", "usage_limit_reached"},
		{"quota response.failed", upstreamtest.QuotaEvent(upstreamtest.ShapeFailed), 0, "", "usage_limit_reached"},
		{"5xx", upstreamtest.Status5xx(500), 502, "upstream_unavailable", "upstream_unavailable"},
		{"cut before any byte", upstreamtest.CutAfter(0), 502, "upstream_unavailable", "upstream_unavailable"},
		{"400 passes through", upstreamtest.Failure(upstreamtest.ShapeStatus, 400, upstreamtest.ErrorBody("bad tool", "invalid_request_error", "invalid_value", "tools")), 400, "invalid_value", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			if tt.jsonStatus != 0 {
				h.ups["A"].Enqueue(tt.script, tt.script)
				resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
				if resp.StatusCode != tt.jsonStatus {
					t.Fatalf("JSON status %d, want %d", resp.StatusCode, tt.jsonStatus)
				}
				if e := readError(t, resp); deref(e.Error.Code) != tt.jsonCode {
					t.Fatalf("JSON code %q, want %q (%s)", deref(e.Error.Code), tt.jsonCode, e.Error.Message)
				}
			}
			h2 := newHarness(t, harnessConfig{})
			h2.ups["A"].Enqueue(tt.script, tt.script)
			if tt.streamCode == "" {
				resp := h2.post("/v1/responses", respBody)
				if e := readError(t, resp); resp.StatusCode != tt.jsonStatus || deref(e.Error.Code) != tt.jsonCode {
					t.Fatalf("stream request: %d %+v", resp.StatusCode, e)
				}
				return
			}
			resp, evs := h2.responsesStream(respBody)
			if resp.StatusCode != 200 {
				t.Fatalf("stream status %d", resp.StatusCode)
			}
			if last := assertOneTerminal(t, evs); last.typ != "response.failed" || last.code != tt.streamCode {
				t.Fatalf("stream terminal %s %q, want response.failed %q", last.typ, last.code, tt.streamCode)
			}
			if len(evs) != 2 {
				t.Fatalf("%d events, want response.created and response.failed", len(evs))
			}
			assertOpensItsFailure(t, evs)
		})
	}
}

func TestChatStreamFaults(t *testing.T) {
	tests := []struct {
		name   string
		script upstreamtest.Script
		code   string // "" → a normal finish
	}{
		{"cut", upstreamtest.CutAfter(2), "stream_incomplete"},
		{"hang", upstreamtest.HangAfter(2), "stream_incomplete"},
		{"error field", upstreamtest.ErrorField([]byte(`{"code":"server_error","message":"boom","type":"server_error"}`), 2), "server_error"},
		{"empty data", upstreamtest.WithEmptyData(), ""},
		{"garbage (skipped)", upstreamtest.Garbage(), ""},
		{"three garbage chunks", garbageRun(3), "stream_incomplete"},
		{"finish then cut without [DONE]", upstreamtest.CutAfter(5), ""},
		{"cut before the finish chunk", upstreamtest.CutAfter(4), "stream_incomplete"},
		{"finish then hang without [DONE]", upstreamtest.HangAfter(5), ""},
		{"error chunk after start", upstreamtest.QuotaEvent(upstreamtest.ShapeErrorEvent).AfterCreated(), "usage_limit_reached"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: gateway.Options{IdleTimeout: 300 * time.Millisecond}})
			h.ups["A"].Enqueue(tt.script)
			_, evs := h.streamEvents("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`)
			if len(evs) < 2 || !evs[len(evs)-1].Done {
				t.Fatalf("stream does not end with [DONE] (%d events)", len(evs))
			}
			dones := 0
			for _, ev := range evs {
				if ev.Done {
					dones++
				}
			}
			if dones != 1 {
				t.Fatalf("%d [DONE] sentinels", dones)
			}
			before := evs[len(evs)-2]
			var v struct {
				Error *struct {
					Code string `json:"code"`
				} `json:"error"`
				Choices []struct {
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(before.Data, &v); err != nil {
				t.Fatalf("chunk before [DONE] is not JSON: %s", before.Data)
			}
			if tt.code == "" {
				finished := false
				for _, ev := range evs[:len(evs)-1] {
					var c struct {
						Choices []struct {
							FinishReason *string `json:"finish_reason"`
						} `json:"choices"`
					}
					_ = json.Unmarshal(ev.Data, &c)
					if len(c.Choices) > 0 && c.Choices[0].FinishReason != nil {
						finished = true
					}
				}
				if !finished || v.Error != nil {
					t.Fatalf("normal stream lost its finish chunk or gained an error: %s", before.Data)
				}
				return
			}
			if v.Error == nil || v.Error.Code != tt.code {
				t.Fatalf("chunk before [DONE] = %s, want error %q", before.Data, tt.code)
			}
		})
	}
}

func TestFailoverBeforeFirstByte(t *testing.T) {
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	h.ups["A"].Enqueue(upstreamtest.Status429(30 * time.Second))
	// Selection rotates between idle upstreams: within two requests, one
	// tries A first and must end up with B's stream only.
	var evs []eventLike
	for i := 0; i < 2 && h.ups["A"].Pending() == 1; i++ {
		_, evs = h.responsesStream(respBody)
		if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
			t.Fatalf("terminal %s", last.typ)
		}
	}
	if h.ups["A"].Pending() != 0 {
		t.Fatal("A was never tried")
	}
	var text string
	for _, ev := range evs {
		var v struct{ Type, Delta string }
		_ = json.Unmarshal(ev.data, &v)
		text += v.Delta
	}
	if text != "Hello from B" {
		t.Fatalf("client saw %q, want only B's stream", text)
	}
	// A's target (A, gpt-fake-1) cools down: the next requests avoid it.
	var st struct {
		Upstreams []struct {
			Name    string
			Targets []struct {
				Model      string
				CoolingFor string `json:"cooling_for"`
			}
		}
	}
	h.getJSON("/admin/upstreams", &st)
	cooling := map[string]bool{}
	for _, u := range st.Upstreams {
		for _, tg := range u.Targets {
			cooling[u.Name] = cooling[u.Name] || (tg.Model == "gpt-fake-1" && tg.CoolingFor != "")
		}
	}
	if !cooling["A"] || cooling["B"] {
		t.Fatalf("cooling %v, want only A", cooling)
	}
	before := h.ups["A"].RequestCount()
	for i := 0; i < 3; i++ {
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"x"}`)
		resp.Body.Close()
	}
	if h.ups["A"].RequestCount() != before {
		t.Fatalf("a cooling upstream received requests")
	}
}

func TestFailoverOnConnectErrorAndQuotaEvent(t *testing.T) {
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	// Both out of quota before response.created: replayed once, then the
	// second upstream's failure is the client's terminal event.
	h.ups["A"].Enqueue(upstreamtest.QuotaEvent(upstreamtest.ShapeFailed))
	h.ups["B"].Enqueue(upstreamtest.QuotaEvent(upstreamtest.ShapeFailed))
	_, evs := h.responsesStream(respBody)
	if last := assertOneTerminal(t, evs); last.typ != "response.failed" || last.code != "usage_limit_reached" || len(evs) != 2 {
		t.Fatalf("got %d events ending %s %q", len(evs), last.typ, last.code)
	}
	assertOpensItsFailure(t, evs)

	// A dead upstream (connection refused) is skipped for a live one.
	h2 := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	h2.ups["A"].Close()
	for i := 0; i < 4; i++ {
		_, evs := h2.responsesStream(respBody)
		if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
			t.Fatalf("request %d: %s", i, last.typ)
		}
	}
}

func TestFailoverIsBoundedToThreeAttempts(t *testing.T) {
	var ups []upstreamtest.Options
	for _, n := range []string{"A", "B", "C", "D"} {
		ups = append(ups, upstreamtest.Options{Name: n})
	}
	h := newHarness(t, harnessConfig{upstreams: ups})
	for _, n := range []string{"A", "B", "C", "D"} {
		h.ups[n].Enqueue(upstreamtest.Status5xx(503))
	}
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
	e := readError(t, resp)
	if resp.StatusCode != http.StatusBadGateway || deref(e.Error.Code) != "upstream_unavailable" || e.Error.Type != "server_error" {
		t.Fatalf("%d %+v", resp.StatusCode, e.Error)
	}
	total := 0
	for _, up := range h.ups {
		total += up.RequestCount()
	}
	if total != 3 {
		t.Fatalf("%d attempts, want 3", total)
	}
}

func TestNoFailoverAfterFirstByte(t *testing.T) {
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	h.ups["A"].Enqueue(upstreamtest.CutAfter(4))
	h.ups["B"].Enqueue(upstreamtest.CutAfter(4))
	_, evs := h.responsesStream(respBody)
	if last := assertOneTerminal(t, evs); last.code != "stream_incomplete" {
		t.Fatalf("terminal %s %s", last.typ, last.code)
	}
	if total := h.ups["A"].RequestCount() + h.ups["B"].RequestCount(); total != 1 {
		t.Fatalf("%d attempts after bytes were out, want 1", total)
	}
}

func TestDrainEndsInFlightStreamsWithTerminalEvent(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	h := newHarness(t, harnessConfig{opts: gateway.Options{DrainGrace: 300 * time.Millisecond}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(3))
	var wg sync.WaitGroup
	var evs []eventLike
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, evs = h.responsesStream(respBody)
	}()
	if err := h.ups["A"].WaitRequests(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.gw.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	wg.Wait()
	if took := time.Since(start); took < 250*time.Millisecond || took > 5*time.Second {
		t.Fatalf("drain took %v, want about the grace", took)
	}
	last := assertOneTerminal(t, evs)
	if last.code != "stream_incomplete" || !strings.Contains(string(last.data), "shutting down") {
		t.Fatalf("terminal %s", last.data)
	}
	// The attempt the drain stopped is counted as that (README
	// "Observability"), not as an answer that went out.
	rec := newRecorder()
	h.gw.Handler().ServeHTTP(rec, mustRequest(http.MethodGet, "/metrics"))
	if m, want := rec.body.String(), `sluice_upstream_attempts_total{outcome="drain",upstream="A"} 1`; !strings.Contains(m, want+"\n") {
		t.Errorf("the drained attempt counted as:\n%s\nwant %s", grep(m, "sluice_upstream_attempts_total"), want)
	}
	<-h.done
	h.done <- nil // let the cleanup's receive return
	for _, up := range h.ups {
		up.Close()
	}
	http.DefaultClient.CloseIdleConnections()
}

// drainingHarness is a harness whose gateway is draining, held open by a
// stream in flight for up to its DrainGrace of a second.
func drainingHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, harnessConfig{opts: gateway.Options{DrainGrace: time.Second}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(1))
	go func() { _, _ = h.responsesStream(respBody) }()
	if err := h.ups["A"].WaitRequests(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	go func() { _ = h.gw.Shutdown(context.Background()) }()
	deadline := time.Now().Add(15 * time.Second) // only a broken run waits this long
	for !h.gw.Draining() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	return h
}

func TestReadyzFailsWhileDraining(t *testing.T) {
	h := drainingHarness(t)
	rec := newRecorder()
	h.gw.Handler().ServeHTTP(rec, mustRequest(http.MethodGet, "/readyz"))
	if rec.code != http.StatusServiceUnavailable {
		t.Fatalf("readyz while draining = %d", rec.code)
	}
}

func TestClientThatStopsReadingIsCut(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{ClientWriteTimeout: 300 * time.Millisecond, MaxEventBytes: 1 << 20}})
	// ~24 MB of events: far more than the socket buffers hold.
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: upstreamtest.ResponsesStream("resp_big", "gpt-fake-1", strings.Repeat("x", 8<<20), 256)})
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(respBody), respBody)
	// Never read. The gateway must give up on this client and free the stream.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := h.metrics()
		if strings.Contains(m, "sluice_active_streams 0") && strings.Contains(m, `reason="client_gone"`) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream still held for a client that stopped reading:\n%s", grep(m, "sluice_active_streams")+"\n"+grep(m, "stream_terminal"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClientThatReadsIsNotCutByTheWriteTimeout: the per-flush write deadline
// is moved lazily (not on every flush), but a client that keeps reading a
// stream far longer than timeouts.client_write gets all of it.
func TestClientThatReadsIsNotCutByTheWriteTimeout(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{ClientWriteTimeout: 200 * time.Millisecond}})
	h.ups["A"].Enqueue(upstreamtest.StampedDeltas(20, 50*time.Millisecond)) // ~1 s, five write timeouts
	_, evs := h.streamEvents("/v1/responses", respBody)
	if len(evs) == 0 || evs[len(evs)-1].Name != "response.completed" {
		last := "none"
		if len(evs) > 0 {
			last = evs[len(evs)-1].Name + " " + string(evs[len(evs)-1].Data)
		}
		t.Fatalf("%d events, last %s; want the stream to complete", len(evs), last)
	}
}

// TestClientThatClosesCleanlyReleasesItsUpstream: a client that closes its
// connection (a FIN, no reset) while the upstream is silent is noticed at the
// first keepalive write that fails, and that cancels the attempt: the
// upstream is released long before the idle timeout.
func TestClientThatClosesCleanlyReleasesItsUpstream(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{KeepAlive: 100 * time.Millisecond, IdleTimeout: time.Minute}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(3))
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(respBody), respBody)
	// Read until the stream is under way, then drain what is buffered so
	// that Close sends a FIN, not a reset.
	buf := make([]byte, 64<<10)
	var got strings.Builder
	for !strings.Contains(got.String(), "response.created") {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("reading the stream: %v (%q)", err, got.String())
		}
		got.Write(buf[:n])
	}
	for {
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := conn.Read(buf); err != nil {
			break
		}
	}
	conn.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := h.metrics()
		if strings.Contains(m, "sluice_active_streams 0") && strings.Contains(m, `reason="client_gone"`) {
			// The attempt the client abandoned is counted as that, not as
			// an answer that went out (README "Observability").
			total, series := attemptsOfUpstream(m, "A")
			if want := `sluice_upstream_attempts_total{outcome="client_gone",upstream="A"} 1`; total != 1 || !strings.Contains(m, want+"\n") {
				t.Fatalf("the abandoned attempt counted as:\n%s\nwant %s", strings.Join(series, "\n"), want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream is still held for a client that closed:\n%s", grep(m, "sluice_active_streams")+"\n"+grep(m, "stream_terminal"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

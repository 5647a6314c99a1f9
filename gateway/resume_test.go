package gateway_test

import (
	"context"
	"encoding/json"
	"io"
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
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// resumeText is streamed slowly enough that a client can leave mid-way.
const resumeText = "one two three four five six seven eight nine ten eleven twelve"

func slowAnswer() upstreamtest.Script {
	a := upstreamtest.Answer(resumeText, 12)
	a.Gap = 40 * time.Millisecond
	return a
}

// readSome posts a streaming request as key, reads n SSE events and drops
// the connection.
func (h *harness) readSome(key, body string, n int) [][]byte {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v1/responses", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	var out [][]byte
	for len(out) < n {
		ev, err := r.Next()
		if err != nil {
			h.t.Fatalf("read %d events, then %v", len(out), err)
		}
		out = append(out, append([]byte(nil), ev.Data...))
	}
	return out
}

// resumeAfter resumes response id after the last of the events first (read
// with key) and returns the whole stream the client then has.
func (h *harness) resumeAfter(key, id string, first [][]byte) [][]byte {
	h.t.Helper()
	last := gjson.GetBytes(first[len(first)-1], "sequence_number").Int()
	status, rest, body := h.resume(key, id, last)
	if status != http.StatusOK {
		h.t.Fatalf("resume of %s after %d: %d %s", id, last, status, body)
	}
	return append(first, rest...)
}

// resume GETs /v1/responses/{id}?stream=true&starting_after=after as key
// and returns the status, the events and, for an error, the body.
func (h *harness) resume(key, id string, after int64) (int, [][]byte, string) {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/responses/"+id+"?stream=true&starting_after="+itoa(after), nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, nil, string(b)
	}
	r := sse.NewReader(resp.Body, 1<<20)
	var out [][]byte
	for {
		ev, err := r.Next()
		if err != nil {
			return resp.StatusCode, out, ""
		}
		out = append(out, append([]byte(nil), ev.Data...))
	}
}

// call sends method path as key and returns the status and body.
func (h *harness) call(method, path, key string) (int, []byte) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// createResponse posts a non-streaming Responses body and returns the id
// of the response the client got (it must be a 200).
func (h *harness) createResponse(body string) string {
	h.t.Helper()
	resp := h.post("/v1/responses", body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := gjson.GetBytes(b, "id").Str
	if resp.StatusCode != http.StatusOK || id == "" {
		h.t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	return id
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func resumeOpts() gateway.Options {
	return gateway.Options{Resume: gateway.ResumeOptions{DetachGrace: 5 * time.Second}, LifecycleHold: -1}
}

// TestResumeAfterDisconnect: a client that leaves after N events resumes
// from N and gets the rest of the one stream — contiguous sequence numbers,
// the whole text, one terminal — for every upstream kind, a continued
// stream, and the WebSocket.
func TestResumeAfterDisconnect(t *testing.T) {
	for _, tc := range []struct {
		name string
		hc   func() harnessConfig
		prep func(h *harness)
		body string
	}{
		{"responses upstream", func() harnessConfig { return harnessConfig{opts: resumeOpts()} },
			func(h *harness) { h.ups["A"].Enqueue(slowAnswer()) }, `{"model":"gpt-fake-1","input":"hi","stream":true}`},
		{"chat upstream", func() harnessConfig {
			return harnessConfig{opts: resumeOpts(), protocol: map[string]string{"A": "chat"}}
		}, func(h *harness) { h.ups["A"].Enqueue(slowAnswer()) }, `{"model":"gpt-fake-1","input":"hi","stream":true}`},
		{"continued stream", func() harnessConfig {
			hc := harnessConfig{opts: resumeOpts(), upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}}}
			hc.opts.Routes = []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}}}}
			return hc
		}, func(h *harness) {
			cut := slowAnswer()
			cut.StopAfterDeltas, cut.End = 3, upstreamtest.EndCut
			h.ups["P"].Enqueue(cut)
			h.ups["B"].Enqueue(slowAnswer())
		}, `{"model":"m","input":"hi","stream":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.hc())
			tc.prep(h)
			first := h.readSome("sk-client-secret", tc.body, 5)
			id := gjson.GetBytes(first[0], "response.id").Str
			if id == "" {
				t.Fatalf("the first event names no response: %s", first[0])
			}
			whole := h.resumeAfter("sk-client-secret", id, first)
			o := checkResponsesEvents(t, whole)
			if o.text != resumeText || o.terminal != "response.completed" {
				t.Fatalf("resumed stream: text %q, terminal %s", o.text, o.terminal)
			}
			// A second resume from the start replays the whole log.
			_, all, _ := h.resume("sk-client-secret", id, -1)
			if len(all) != len(whole) {
				t.Fatalf("a resume from the start got %d events, the stream had %d", len(all), len(whole))
			}
			if !strings.Contains(h.metrics(), `sluice_stream_resumes_total{via="sse"} 2`) {
				t.Fatal("resumes are not counted")
			}
		})
	}
}

// TestResumeWebSocket: a WebSocket client drops its socket after N frames
// and resumes on a new socket with response.resume.
func TestResumeWebSocket(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	h.ups["A"].Enqueue(slowAnswer())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func() *websocket.Conn { return h.dialWS(nil).conn }
	c := dial()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create","model":"gpt-fake-1","input":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	var first [][]byte
	for len(first) < 5 {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, data)
	}
	c.CloseNow()
	id := gjson.GetBytes(first[0], "response.id").Str
	last := gjson.GetBytes(first[len(first)-1], "sequence_number").Int()

	c2 := dial()
	defer c2.CloseNow()
	if err := c2.Write(ctx, websocket.MessageText, []byte(`{"type":"response.resume","response_id":"`+id+`","starting_after":`+itoa(last)+`}`)); err != nil {
		t.Fatal(err)
	}
	rest := [][]byte{}
	for {
		_, data, err := c2.Read(ctx)
		if err != nil {
			t.Fatalf("after %d resumed frames: %v", len(rest), err)
		}
		rest = append(rest, data)
		if isTerminal(gjson.GetBytes(data, "type").Str) {
			break
		}
	}
	o := checkResponsesEvents(t, append(first, rest...))
	if o.text != resumeText || o.terminal != "response.completed" {
		t.Fatalf("resumed stream: text %q, terminal %s", o.text, o.terminal)
	}
	// Another key's socket cannot resume it.
	c3 := h.dialWS(map[string]string{"Authorization": "Bearer sk-someone-else"}).conn
	_ = c3.Write(ctx, websocket.MessageText, []byte(`{"type":"response.resume","response_id":"`+id+`"}`))
	_, data, err := c3.Read(ctx)
	if err != nil || gjson.GetBytes(data, "type").Str != "error" || gjson.GetBytes(data, "status").Int() != 404 {
		t.Fatalf("another key's resume frame got %s (%v), want an error frame with status 404", data, err)
	}
}

// TestResumeRefused: another key, an unknown id and an expired log get a
// 404 that says why.
func TestResumeRefused(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	opts := resumeOpts()
	opts.Now = clock
	opts.Resume.Window = time.Minute
	h := newHarness(t, harnessConfig{opts: opts})
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	id := gjson.GetBytes(evs[0].Data, "response.id").Str

	if status, _, body := h.resume("sk-someone-else", id, -1); status != http.StatusNotFound || !strings.Contains(body, "another key") {
		t.Fatalf("another key: %d %s", status, body)
	}
	if status, _, _ := h.resume("sk-client-secret", "resp_unknown", -1); status != http.StatusNotFound {
		t.Fatalf("unknown id: %d", status)
	}
	if status, evs, _ := h.resume("sk-client-secret", id, -1); status != http.StatusOK || len(evs) == 0 {
		t.Fatalf("within the window: %d, %d events", status, len(evs))
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	status, _, body := h.resume("sk-client-secret", id, -1)
	if status != http.StatusNotFound || !strings.Contains(body, "resume_window is 1m0s") {
		t.Fatalf("after the window: %d %s", status, body)
	}
	if status, _ := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret"); status != http.StatusNotFound {
		t.Fatalf("GET after the window: %d", status)
	}
}

// TestResumeNoDetach: without a detach grace a client that leaves cancels
// the upstream at once (the stream cannot be finished), and a resume gets
// what was logged and a terminal event, never a stream that just stops.
func TestResumeNoDetach(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{LifecycleHold: -1}})
	h.ups["A"].Enqueue(slowAnswer())
	first := h.readSome("sk-client-secret", `{"model":"gpt-fake-1","input":"hi","stream":true}`, 5)
	id := gjson.GetBytes(first[0], "response.id").Str
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, evs, _ := h.resume("sk-client-secret", id, -1)
		if status != http.StatusOK {
			t.Fatalf("resume: %d", status)
		}
		if isTerminal(gjson.GetBytes(evs[len(evs)-1], "type").Str) {
			checkResponsesEvents(t, evs) // numbered without a gap, one terminal last
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the abandoned stream's log never ended")
		}
	}
}

// TestResponsesResourceAPI: GET, input_items and DELETE of a response the
// gateway served in front of a Chat upstream (JSON and stream).
func TestResponsesResourceAPI(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts(), protocol: map[string]string{"A": "chat"}})
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":[{"role":"user","content":"first"},{"type":"message","role":"user","content":[{"type":"input_text","text":"second"}]}]}`)
	var created map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	id, _ := created["id"].(string)
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("create: %d %v", resp.StatusCode, created)
	}
	status, body := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret")
	if status != 200 || gjson.GetBytes(body, "id").Str != id || gjson.GetBytes(body, "status").Str != "completed" ||
		gjson.GetBytes(body, "output.0.content.0.text").Str != "Hello from A" {
		t.Fatalf("GET: %d %s", status, body)
	}
	status, body = h.call(http.MethodGet, "/v1/responses/"+id+"/input_items?order=asc", "sk-client-secret")
	if status != 200 || gjson.GetBytes(body, "object").Str != "list" || gjson.GetBytes(body, "data.#").Int() != 2 ||
		gjson.GetBytes(body, "data.0.content.0.text").Str != "first" || gjson.GetBytes(body, "data.1.content.0.text").Str != "second" ||
		gjson.GetBytes(body, "data.0.id").Str == "" || gjson.GetBytes(body, "first_id").Str != gjson.GetBytes(body, "data.0.id").Str {
		t.Fatalf("input_items: %d %s", status, body)
	}
	if status, body = h.call(http.MethodGet, "/v1/responses/"+id+"/input_items", "sk-client-secret"); status != 200 || gjson.GetBytes(body, "data.0.content.0.text").Str != "second" {
		t.Fatalf("input_items are newest first by default: %d %s", status, body)
	}
	if status, _ = h.call(http.MethodGet, "/v1/responses/"+id, "sk-someone-else"); status != http.StatusNotFound {
		t.Fatalf("another key's GET: %d", status)
	}
	if status, _ = h.call(http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-client-secret"); status != http.StatusBadRequest {
		t.Fatalf("cancelling a foreground response: %d, want 400", status)
	}
	status, body = h.call(http.MethodDelete, "/v1/responses/"+id, "sk-client-secret")
	if status != 200 || gjson.GetBytes(body, "deleted").Type != gjson.True {
		t.Fatalf("DELETE: %d %s", status, body)
	}
	if status, _ = h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret"); status != http.StatusNotFound {
		t.Fatalf("GET after DELETE: %d", status)
	}
}

// TestBackground: a background request is answered at once, runs to its
// end with nobody reading, and can be polled, streamed and cancelled.
func TestBackground(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts(), protocol: map[string]string{"A": "chat"}})
	h.ups["A"].Enqueue(slowAnswer())
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := gjson.GetBytes(b, "id").Str
	if resp.StatusCode != 200 || id == "" || gjson.GetBytes(b, "status").Str != "in_progress" || gjson.GetBytes(b, "background").Type != gjson.True {
		t.Fatalf("background create: %d %s", resp.StatusCode, b)
	}
	if up := h.ups["A"].Requests(); len(up) != 1 || !up[0].Stream || gjson.GetBytes(up[0].Body, "background").Exists() {
		t.Fatalf("the upstream got %d requests; want one stream without background", len(up))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret")
		if gjson.GetBytes(body, "status").Str == "completed" {
			if got := gjson.GetBytes(body, "output.0.content.0.text").Str; got != resumeText {
				t.Fatalf("polled to completion: text %q", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never completed: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The whole stream can still be read.
	_, evs, _ := h.resume("sk-client-secret", id, -1)
	if o := checkResponsesEvents(t, evs); o.text != resumeText || o.terminal != "response.completed" {
		t.Fatalf("streamed later: %q %s", o.text, o.terminal)
	}

	// Cancelled mid-way (the upstream stalls after two deltas: it cannot end first).
	stall := slowAnswer()
	stall.StopAfterDeltas, stall.End = 2, upstreamtest.EndHang
	h.ups["A"].Enqueue(stall)
	resp = h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	id = gjson.GetBytes(b, "id").Str
	time.Sleep(120 * time.Millisecond)
	status, body := h.call(http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-client-secret")
	if status != 200 || gjson.GetBytes(body, "status").Str != "cancelled" {
		t.Fatalf("cancel: %d %s", status, body)
	}
	if text := gjson.GetBytes(body, "output.0.content.0.text").Str; text == resumeText {
		t.Fatalf("cancelled, yet the whole text is there")
	}
	_, evs, _ = h.resume("sk-client-secret", id, -1)
	last := evs[len(evs)-1]
	if gjson.GetBytes(last, "type").Str != "response.failed" || gjson.GetBytes(last, "response.status").Str != "cancelled" {
		t.Fatalf("a cancelled stream ends with %s", last)
	}
}

// TestResourceCallsGoToTheOwner: a response whose log the gateway does not
// have is asked of the Responses upstream that owns it (its anchor), with
// the id that upstream knows it by; another key's call reaches nobody.
func TestResourceCallsGoToTheOwner(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := continuityHarness(t, st, gateway.Options{Resume: gateway.ResumeOptions{Window: -1}})
	_, id := h.turn("", nil)
	if id == "" {
		t.Fatal("no response id")
	}
	owner := "A"
	if strings.HasPrefix(id, "resp_B_") {
		owner = "B"
	}
	before := len(h.ups[owner].Requests())
	status, body := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items?limit=5", "sk-client-secret")
	reqs := h.ups[owner].Requests()
	if len(reqs) != before+1 || reqs[len(reqs)-1].Method != http.MethodGet || reqs[len(reqs)-1].Path != "/v1/responses/"+id+"/input_items" {
		t.Fatalf("the owner got %d new requests (%v); want GET /v1/responses/%s/input_items", len(reqs)-before, reqs[len(reqs)-1].Path, id)
	}
	if status != http.StatusNotFound || !strings.Contains(string(body), "Invalid URL") { // the fake's own answer, passed through
		t.Fatalf("the owner's answer was not passed through: %d %s", status, body)
	}
	if status, _ := h.call(http.MethodDelete, "/v1/responses/"+id, "sk-someone-else"); status != http.StatusNotFound {
		t.Fatalf("another key's DELETE: %d", status)
	}
	if n := len(h.ups[owner].Requests()); n != before+1 {
		t.Fatalf("another key's call reached the owner")
	}
}

// TestBackgroundBounded: background runs hold no connection, so they are
// counted against max_connections: one too many is a retryable 503.
func TestBackgroundBounded(t *testing.T) {
	opts := resumeOpts()
	opts.MaxConnections = 1
	h := newHarness(t, harnessConfig{opts: opts})
	stall := slowAnswer()
	stall.StopAfterDeltas, stall.End = 2, upstreamtest.EndHang
	h.ups["A"].Enqueue(stall)
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := gjson.GetBytes(b, "id").Str
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("the first background request: %d %s", resp.StatusCode, b)
	}
	resp = h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || gjson.GetBytes(b, "error.code").Str != "server_overloaded" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("one background request too many: %d %s", resp.StatusCode, b)
	}
	if status, _ := h.call(http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-client-secret"); status != 200 {
		t.Fatalf("cancel: %d", status)
	}
}

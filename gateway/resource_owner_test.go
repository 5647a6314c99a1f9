package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

const ownerKey = "sk-UPSTREAM-SECRET-KEY-42"

// ownerFront is a fake upstream A whose resource calls (/v1/responses/{id}
// and below) are answered by resource; everything else is the scriptable
// fake's. resource calls are counted.
func ownerFront(t *testing.T, resource http.HandlerFunc) (*upstreamtest.Server, *atomic.Int64) {
	t.Helper()
	up := upstreamtest.NewHandler(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	var calls atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/responses/") {
			calls.Add(1)
			resource(w, r)
			return
		}
		up.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	up.URL = front.URL + "/v1"
	return up, &calls
}

// ownerHarness is a gateway keeping no logs (every resource call goes to
// the owner) in front of up, which it calls with ownerKey.
func ownerHarness(t *testing.T, up *upstreamtest.Server, opts gateway.Options) *harness {
	t.Helper()
	opts.Store = openStore(t, t.TempDir())
	opts.Resume = gateway.ResumeOptions{Window: -1}
	return newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up}, keys: map[string]string{"A": ownerKey}, opts: opts})
}

// callRaw sends method path as the test client and returns the whole answer.
func callRaw(t *testing.T, h *harness, method, path string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, h.url+path, nil)
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// streamFrom GETs path as the test client and reads its SSE events to the
// end; a non-200 answer fails the test.
func streamFrom(t *testing.T, h *harness, path string) []sse.Event {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.url+path, nil)
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	r := sse.NewReader(resp.Body, 1<<20)
	var evs []sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			return evs
		}
		evs = append(evs, ev.Clone())
	}
}

// terminalsOf counts the events that end a resumed stream: the Responses
// terminal events and error events.
func terminalsOf(evs []sse.Event) int {
	n := 0
	for _, ev := range evs {
		if typ := eventType(ev); isTerminal(typ) || typ == "error" {
			n++
		}
	}
	return n
}

func writeOwnerEvent(w io.Writer, typ string, seq int, rest string) {
	_, _ = fmt.Fprintf(w, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d%s}\n\n", typ, typ, seq, rest)
}

// TestOwnerAnswersAreScrubbedBoundedAndShaped: what the owner answers a
// resource call reaches the client as any upstream answer does: its key
// quoted in headers or body is [redacted], bodies are bounded, and an
// answer that is no OpenAI error (HTML, a redirect, a cut-off JSON error)
// becomes the gateway's OpenAI-shaped error.
func TestOwnerAnswersAreScrubbedBoundedAndShaped(t *testing.T) {
	big := strings.Repeat("x", 2<<20)
	up, _ := ownerFront(t, func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		switch r.URL.Query().Get("mode") {
		case "echo404":
			w.Header().Set("X-Echo-Auth", auth)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = fmt.Fprintf(w, `{"error":{"message":"no such response; you sent %s","type":"invalid_request_error","param":null,"code":null}}`, auth)
		case "echo200":
			w.Header().Set("X-Echo-Auth", auth)
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"id":"resp_x","object":"response","status":"completed","metadata":{"seen":%q}}`, auth)
		case "html500":
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "<html>resource boom "+auth+"</html>")
		case "html404":
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, "<html>nope</html>")
		case "redirect":
			w.Header().Set("Location", "http://127.0.0.1:1/elsewhere")
			w.WriteHeader(http.StatusFound)
		case "html200":
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>hello</html>")
		case "bigerror": // an OpenAI error, but past the 1 MiB error bound
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"message":"`+big+`","type":"invalid_request_error"}}`)
		case "bigok": // past 4 × max_event_bytes
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"resp_x","object":"response","pad":"`+big+`"}`)
		}
	})
	h := ownerHarness(t, up, gateway.Options{MaxEventBytes: 64 << 10})
	id := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)

	for _, tc := range []struct {
		method, path string
		mode         string
		status       int
		code         string // "" : the owner's own answer, passed on
	}{
		{http.MethodGet, "/v1/responses/" + id, "echo404", 404, ""},
		{http.MethodGet, "/v1/responses/" + id, "echo200", 200, ""},
		{http.MethodGet, "/v1/responses/" + id + "/input_items", "echo404", 404, ""},
		{http.MethodDelete, "/v1/responses/" + id, "echo404", 404, ""},
		{http.MethodPost, "/v1/responses/" + id + "/cancel", "echo404", 404, ""},
		{http.MethodGet, "/v1/responses/" + id, "html500", 502, "upstream_error"},
		{http.MethodDelete, "/v1/responses/" + id, "html500", 502, "upstream_error"},
		{http.MethodPost, "/v1/responses/" + id + "/cancel", "html500", 502, "upstream_error"},
		{http.MethodGet, "/v1/responses/" + id + "/input_items", "html404", 404, "upstream_error"},
		{http.MethodGet, "/v1/responses/" + id, "redirect", 502, "upstream_error"},
		{http.MethodGet, "/v1/responses/" + id, "html200", 502, "upstream_error"},
		{http.MethodGet, "/v1/responses/" + id, "bigerror", 400, "upstream_error"},
		{http.MethodGet, "/v1/responses/" + id, "bigok", 502, "stream_incomplete"},
		{http.MethodGet, "/v1/responses/" + id + "?stream=true", "html500", 502, "upstream_error"},
		{http.MethodGet, "/v1/responses/" + id + "?stream=true", "echo200", 502, "upstream_error"},
	} {
		path := tc.path + "?mode=" + tc.mode
		if strings.Contains(tc.path, "?") {
			path = tc.path + "&mode=" + tc.mode
		}
		resp, body := callRaw(t, h, tc.method, path)
		what := tc.method + " " + strings.Replace(path, id, "{id}", 1)
		var hdr bytes.Buffer
		_ = resp.Header.Write(&hdr)
		if strings.Contains(string(body)+hdr.String(), ownerKey) {
			t.Errorf("%s: the owner's key reached the client:\n%s\n%s", what, hdr.String(), body)
		}
		if resp.StatusCode != tc.status || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %s, want %d JSON", what, resp.StatusCode, resp.Header.Get("Content-Type"), tc.status)
		}
		if resp.Header.Get("Location") != "" {
			t.Errorf("%s: a redirect reached the client", what)
		}
		if len(body) > 1<<20 {
			t.Errorf("%s: %d bytes reached the client", what, len(body))
		}
		if tc.code == "" {
			if strings.Contains(tc.mode, "echo") && (!strings.Contains(string(body), "[redacted]") || resp.Header.Get("X-Echo-Auth") != "[redacted]") {
				t.Errorf("%s: the owner's answer was not passed on, scrubbed: %q %s", what, resp.Header.Get("X-Echo-Auth"), body)
			}
			continue
		}
		e := gjson.GetBytes(body, "error")
		if e.Get("code").Str != tc.code || e.Get("message").Str == "" || !e.Get("type").Exists() || !e.Get("param").Exists() {
			t.Errorf("%s: not the gateway's OpenAI error %s: %s", what, tc.code, body)
		}
	}
}

// TestOwnerStreamEndsWithOneTerminalEvent: a resume asked of the owner ends
// with exactly one terminal event whatever the owner's stream does: its
// own terminal event is passed on (scrubbed), a cut, a stall (past
// timeouts.idle, keepalive comments or not) or a garbage event ends it with
// the resume's error event,
// numbered after the last event the client got.
func TestOwnerStreamEndsWithOneTerminalEvent(t *testing.T) {
	up, _ := ownerFront(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("stream") != "true" {
			http.Error(w, "not a stream request", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		writeOwnerEvent(w, "response.output_text.delta", 5, `,"delta":"Hel"`)
		writeOwnerEvent(w, "response.output_text.delta", 6, `,"delta":"lo `+r.Header.Get("Authorization")+`"`)
		w.(http.Flusher).Flush()
		switch r.URL.Query().Get("mode") {
		case "completed":
			writeOwnerEvent(w, "response.completed", 7, `,"response":{"id":"resp_x","status":"completed"}`)
			writeOwnerEvent(w, "response.output_text.delta", 8, `,"delta":"after the end"`)
		case "cut":
		case "garbage":
			_, _ = io.WriteString(w, "data: <html>\n\n")
			writeOwnerEvent(w, "response.completed", 8, `,"response":{"id":"resp_x","status":"completed"}`)
		case "stall":
			<-r.Context().Done()
		case "keepalives": // bytes, but no event: a stall too
			for {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
					_, _ = io.WriteString(w, ": keepalive\n\n")
					w.(http.Flusher).Flush()
				}
			}
		}
	})
	h := ownerHarness(t, up, gateway.Options{IdleTimeout: 500 * time.Millisecond})
	id := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	for _, mode := range []string{"completed", "cut", "garbage", "stall", "keepalives"} {
		evs := streamFrom(t, h, "/v1/responses/"+id+"?stream=true&starting_after=4&mode="+mode)
		var all strings.Builder
		for _, ev := range evs {
			all.Write(ev.Data)
		}
		if strings.Contains(all.String(), ownerKey) || !strings.Contains(all.String(), "[redacted]") {
			t.Errorf("%s: the owner's key was not scrubbed: %s", mode, all.String())
		}
		if len(evs) < 3 || terminalsOf(evs) != 1 || terminalsOf(evs[len(evs)-1:]) != 1 {
			t.Errorf("%s: want the two deltas and one terminal event last, got %d events: %s", mode, len(evs), all.String())
			continue
		}
		last := evs[len(evs)-1]
		if seq := gjson.GetBytes(last.Data, "sequence_number").Int(); seq != 7 {
			t.Errorf("%s: the terminal event is numbered %d, want 7", mode, seq)
		}
		want := "error"
		if mode == "completed" {
			want = "response.completed"
		}
		if got := eventType(last); got != want || (want == "error" && gjson.GetBytes(last.Data, "code").Str != "stream_incomplete") {
			t.Errorf("%s: the stream ends with %s", mode, last.Data)
		}
	}
}

// TestOwnerStreamOutlivesHeaderAndIdleTimeouts: a live resume asked of the
// owner is bounded by the owner's silence (timeouts.idle), not by a total
// deadline: a stream whose events keep coming runs past timeouts.header +
// timeouts.idle to its own terminal event.
func TestOwnerStreamOutlivesHeaderAndIdleTimeouts(t *testing.T) {
	const header, idle, gap, n = time.Second, time.Second, 250 * time.Millisecond, 12 // n × gap > header + idle
	up, _ := ownerFront(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < n; i++ {
			writeOwnerEvent(w, "response.output_text.delta", i, `,"delta":"x"`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(gap):
			}
		}
		writeOwnerEvent(w, "response.completed", n, `,"response":{"id":"resp_x","status":"completed"}`)
	})
	h := ownerHarness(t, up, gateway.Options{HeaderTimeout: header, IdleTimeout: idle})
	id := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	evs := streamFrom(t, h, "/v1/responses/"+id+"?stream=true")
	if len(evs) != n+1 || eventType(evs[n]) != "response.completed" {
		t.Fatalf("the live stream was cut: %d events, the last %s", len(evs), evs[len(evs)-1].Data)
	}
}

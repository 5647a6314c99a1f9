package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/store"
)

// TestResourceOverlongIDIs400: a response id longer than the store keeps
// gets, on every resource call, the 400 invalid_value (param response_id)
// that /admin/continuity and previous_response_id give it, not a retryable
// 502, and costs no store error, ERROR log line or upstream call.
func TestResourceOverlongIDIs400(t *testing.T) {
	st := openStore(t, t.TempDir())
	opts := resumeOpts()
	opts.Store, opts.Resume.Store = st, st
	h := newHarness(t, harnessConfig{opts: opts})
	long := strings.Repeat("a", store.MaxIDLen+1)
	before := len(h.ups["A"].Requests())
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/responses/" + long},
		{http.MethodGet, "/v1/responses/" + long + "?stream=true"},
		{http.MethodGet, "/v1/responses/" + long + "/input_items"},
		{http.MethodDelete, "/v1/responses/" + long},
		{http.MethodPost, "/v1/responses/" + long + "/cancel"},
		{http.MethodGet, "/admin/continuity/" + long},
	} {
		status, body := h.call(c.method, c.path, "sk-client-secret")
		e := gjson.GetBytes(body, "error")
		if status != http.StatusBadRequest || e.Get("code").Str != "invalid_value" || e.Get("param").Str != "response_id" {
			t.Errorf("%s %s…: %d %.200s", c.method, c.path[:30], status, body)
		}
	}
	if n := len(h.ups["A"].Requests()); n != before {
		t.Errorf("the upstream got %d calls", n-before)
	}
	if logs := h.logs.String(); strings.Contains(logs, "[ERROR]") || strings.Contains(logs, "[WARN]") {
		t.Errorf("over-long ids were logged as failures:\n%s", logs)
	}
}

// TestResumeOfNothingIs400: GET ?stream=true of a response that was
// answered as JSON, or with starting_after past the last event of an ended
// stream, is an OpenAI-shaped 400 naming the parameter, from memory and
// from the store (another replica, or after a restart); at the terminal
// event itself it is an empty stream. A resumer that came while the stream
// ran, with a cursor past its end, gets one error event when it ends.
// (With streams.durable, a stream that ends before the log's first timed
// flush is written to the store ended, as any other.)
func TestResumeOfNothingIs400(t *testing.T) {
	st := openStore(t, t.TempDir())
	opts := resumeOpts()
	opts.Resume.Store = st
	h := newHarness(t, harnessConfig{opts: opts})
	jsonID := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	last := evs[len(evs)-1]
	streamID := gjson.GetBytes(last.Data, "response.id").Str
	lastSeq := gjson.GetBytes(last.Data, "sequence_number").Int()
	if !isTerminal(eventType(last)) || streamID == "" {
		t.Fatalf("the stream ended with %s", last.Data)
	}

	check := func(name string, g *harness) {
		t.Helper()
		for _, c := range []struct {
			id    string
			after int64
			param string
		}{
			{jsonID, -1, "stream"},
			{jsonID, 3, "stream"},
			{streamID, lastSeq + 1000, "starting_after"},
			{streamID, lastSeq + 1, "starting_after"},
		} {
			status, rest, body := g.resume("sk-client-secret", c.id, c.after)
			e := gjson.Parse(body).Get("error")
			if status != http.StatusBadRequest || e.Get("param").Str != c.param || e.Get("code").Str != "invalid_value" || e.Get("message").Str == "" {
				t.Errorf("%s: resume of %s after %d: %d %d events %s", name, c.id, c.after, status, len(rest), body)
			}
		}
		if status, rest, body := g.resume("sk-client-secret", streamID, lastSeq); status != http.StatusOK || len(rest) != 0 {
			t.Errorf("%s: a resume after the terminal event: %d %q %s", name, status, rest, body)
		}
	}

	check("memory", h)

	// A second gateway on the same store: it reads the logs from there,
	// once the stream's log is there, ended (a stream shorter than the
	// first timed flush included).
	replica := newHarness(t, harnessConfig{opts: opts})
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := st.GetStreamLog(context.Background(), streamID)
		if err == nil && rec.Ended {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream's log never reached the store ended: ended=%v status=%q %v", rec.Ended, rec.Status, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	check("store", replica)

	// Live: the cursor is past every event so far, and past the last one:
	// nothing was sent when the stream ends, so the answer is the same 400.
	h.ups["A"].Enqueue(slowAnswer())
	first := h.readSome("sk-client-secret", `{"model":"gpt-fake-1","input":"hi","stream":true}`, 2)
	liveID := gjson.GetBytes(first[0], "response.id").Str
	status, rest, body := h.resume("sk-client-secret", liveID, 1000)
	if status != http.StatusBadRequest || len(rest) != 0 || gjson.Get(body, "error.code").Str != "invalid_value" ||
		gjson.Get(body, "error.param").Str != "starting_after" {
		t.Fatalf("a live resume past the end: %d %q %s", status, rest, body)
	}
}

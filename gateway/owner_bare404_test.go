package gateway_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestOwnerBare404SaysWhy: a GET or resume of a response whose log the
// gateway no longer holds goes to the owner upstream; when the owner answers
// a bare 404 (no body), the client's error says that the owner answered
// without a message and why the gateway asked it: its log expired after
// streams.resume_window (or logs are off), not a message that stops at its
// colon.
func TestOwnerBare404SaysWhy(t *testing.T) {
	up, calls := ownerFront(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	})
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	const window = time.Minute
	logsKept := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up}, keys: map[string]string{"A": ownerKey},
		opts: gateway.Options{Store: openStore(t, t.TempDir()), Now: clock, Resume: gateway.ResumeOptions{Window: window}}})
	resp, evs := logsKept.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
	id := gjson.GetBytes(evs[0].data, "response.id").Str
	if resp.StatusCode != http.StatusOK || id == "" || len(evs) < 4 {
		t.Fatalf("the stream: %d, %d events, id %q", resp.StatusCode, len(evs), id)
	}
	mu.Lock()
	now = now.Add(window + time.Second) // the log expired
	mu.Unlock()

	logsOff := ownerHarness(t, up, gateway.Options{})
	offID := logsOff.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)

	for _, tc := range []struct {
		name string
		h    *harness
		path string
		why  string
	}{
		{"resume, log expired", logsKept, "/v1/responses/" + id + "?stream=true&starting_after=3", "streams.resume_window, 1m0s"},
		{"get, log expired", logsKept, "/v1/responses/" + id, "streams.resume_window, 1m0s"},
		{"resume, logs off", logsOff, "/v1/responses/" + offID + "?stream=true&starting_after=3", "keeps no stream logs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := calls.Load()
			resp, body := callRaw(t, tc.h, http.MethodGet, tc.path)
			if calls.Load() == before {
				t.Fatalf("the owner was not asked: %d %s", resp.StatusCode, body)
			}
			msg := gjson.GetBytes(body, "error.message").Str
			if resp.StatusCode != http.StatusNotFound || gjson.GetBytes(body, "error.code").Str != "upstream_error" ||
				!strings.Contains(msg, `upstream "A" that owns the response answered HTTP 404 Not Found without an error message`) ||
				!strings.Contains(msg, tc.why) {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		})
	}
}

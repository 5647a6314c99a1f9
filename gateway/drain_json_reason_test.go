package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A non-streaming request the drain ends, its upstream's headers not yet
// come or its JSON body still coming, is logged reason=drain and its attempt
// counted as drain, as a stream the drain cuts is (README "Access log",
// "Observability"): an operator counting the drain's casualties finds the
// JSON ones too, not among the gateway's own errors. So is a stream whose
// upstream had not answered yet, in sluice_stream_terminal_total too.
func TestDrainEndingAJSONRequestIsLoggedAsDrain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script upstreamtest.Script
		stream bool
	}{
		{"before the upstream's headers", upstreamtest.Script{End: upstreamtest.EndHang}, false},
		{"while its body comes", upstreamtest.Script{End: upstreamtest.EndHang, BodyPrefix: 5}, false},
		{"a stream before the upstream's headers", upstreamtest.Script{Latency: time.Hour}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: gateway.Options{DrainGrace: 50 * time.Millisecond}})
			h.ups["A"].Enqueue(tc.script)
			answered := make(chan *http.Response, 1)
			var streamed []eventLike
			go func() {
				if tc.stream {
					var resp *http.Response
					resp, streamed = h.responsesStream(respBody)
					answered <- resp
					return
				}
				answered <- h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
			}()
			if err := h.ups["A"].WaitRequests(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := h.gw.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			resp := <-answered
			if tc.stream {
				if last := assertOneTerminal(t, streamed); !strings.Contains(string(last.data), "shutting down") {
					t.Fatalf("the stream ended with %s, want the drain's", last.data)
				}
			} else if e := readError(t, resp); resp.StatusCode/100 != 5 || !strings.Contains(e.Error.Message, "shutting down") {
				t.Fatalf("the client got %d %+v, want the drain's 5xx", resp.StatusCode, e.Error)
			}
			waitAccessLine(t, h)
			line := accessFields(grepLines(h.logs.String(), "access: request"))
			if line["reason"] != "drain" {
				t.Errorf("access line reason=%s, want drain:\n%s", line["reason"], grepLines(h.logs.String(), "access: request"))
			}
			rec := newRecorder()
			h.gw.Handler().ServeHTTP(rec, mustRequest(http.MethodGet, "/metrics"))
			if m, want := rec.body.String(), `sluice_upstream_attempts_total{outcome="drain",upstream="A"} 1`; !strings.Contains(m, want+"\n") {
				t.Errorf("the drained attempt counted as:\n%s\nwant %s", grep(m, "sluice_upstream_attempts_total"), want)
			}
			if m, want := rec.body.String(), `sluice_stream_terminal_total{reason="drain",surface="responses_stream"} 1`; tc.stream && !strings.Contains(m, want+"\n") {
				t.Errorf("the drained stream's end counted as:\n%s\nwant %s", grep(m, "sluice_stream_terminal_total"), want)
			}
			<-h.done
			h.done <- nil // let the cleanup's receive return
		})
	}
}

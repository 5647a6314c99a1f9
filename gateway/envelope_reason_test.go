package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestErrorEnvelopeIn200ReasonNamesTheSentStatus: an upstream's 200 whose
// body is a server error's envelope is judged as the 502 it stands for (the
// route's next target is tried, the target is charged), but every reason
// that describes it (the client's upstream_unavailable message, the
// target's last failure in /admin/upstreams, the log) names what the
// upstream sent, a 200 with an error body, never a 502 it did not send.
// From a Responses and a Chat upstream, for a JSON and a stream request.
func TestErrorEnvelopeIn200ReasonNamesTheSentStatus(t *testing.T) {
	const envelope = `{"error":{"message":"something broke","type":"server_error","code":"server_error"}}`
	const want = "HTTP 200 error body: server_error"
	for _, proto := range []string{"responses", "chat"} {
		for _, s := range judgedSurfaces[:2] { // a Responses client: its 502 (or response.failed) quotes the reasons
			t.Run(proto+"/"+s.name, func(t *testing.T) {
				h := contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"P": proto, "B": proto}})
				h.ups["P"].SetDefault(answering(s, envelope))
				h.ups["B"].SetDefault(answering(s, envelope))
				var msg string
				if s.stream {
					resp, evs := postWith(t, h, s.path, s.body, nil)
					if resp.StatusCode != http.StatusOK || len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.failed" {
						t.Fatalf("%d, %d events; want a stream ending response.failed", resp.StatusCode, len(evs))
					}
					msg = gjson.GetBytes(evs[len(evs)-1].Data, "response.error.message").Str
				} else {
					resp := h.post(s.path, s.body)
					raw, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusBadGateway {
						t.Fatalf("%d %s; want 502 upstream_unavailable", resp.StatusCode, raw)
					}
					msg = gjson.GetBytes(raw, "error.message").Str
				}
				if !strings.Contains(msg, "P/m: "+want) || !strings.Contains(msg, "B/m: "+want) || strings.Contains(msg, "HTTP 502") {
					t.Fatalf("client's error message %q; want each target's %q", msg, want)
				}
				if tg, _ := h.target("P", "m"); tg.LastFailure == "" || !strings.Contains(tg.LastFailure, want) {
					t.Fatalf("P's last failure %q; want %q", tg.LastFailure, want)
				}
				if logs := h.logs.String(); !strings.Contains(logs, want) || strings.Contains(logs, "HTTP 502") {
					t.Fatalf("the log does not name the 200 the upstream sent:\n%s", logs)
				}
			})
		}
	}
}

// TestContinuationTargetErrorEnvelopeIn200ReasonNamesTheSentStatus: a
// continuation target's 200 whose body is a server error's envelope is
// judged as the 502 it stands for, but its failure reason (the target's
// last failure in /admin/upstreams, the log) names what the upstream sent,
// as a first attempt's does.
func TestContinuationTargetErrorEnvelopeIn200ReasonNamesTheSentStatus(t *testing.T) {
	const envelope = `{"error":{"message":"something broke","type":"server_error","code":"server_error"}}`
	const want = "HTTP 200 error body: server_error"
	for _, proto := range []string{"responses", "chat"} {
		t.Run(proto, func(t *testing.T) {
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"P": proto, "B": proto}})
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			h.ups["B"].SetDefault(answering(judgedSurfaces[1], envelope))
			h.streamEvents("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
			if n := h.ups["B"].RequestCount(); n == 0 {
				t.Fatal("the continuation target B was never asked")
			}
			if tg, _ := h.target("B", "m"); !strings.Contains(tg.LastFailure, want) {
				t.Fatalf("B's last failure %q; want %q", tg.LastFailure, want)
			}
			if logs := h.logs.String(); !strings.Contains(logs, want) || strings.Contains(logs, "HTTP 502") {
				t.Fatalf("the log does not name the 200 the upstream sent:\n%s", logs)
			}
		})
	}
}

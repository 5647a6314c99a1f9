package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestDrainOfContinuedStreamLogsTheClientID: a drain that ends a continued
// stream (P cut, B continuing) logs "stream ended by the gateway" with the
// response id its client was shown, the one every other line about the
// stream carries (README: "Logs carry ids as sha256:<12 hex>"), not B's own
// id, which the client never sees: an operator who searches for the id a
// user reports finds why the stream ended.
func TestDrainOfContinuedStreamLogsTheClientID(t *testing.T) {
	h := contHarnessStall(t, "auto", time.Minute, harnessConfig{opts: gateway.Options{DrainGrace: 50 * time.Millisecond}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 9).StallAfterDeltas(2))
	resp := h.post("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	var id, terminal string
	deltas := 0
	for terminal == "" {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("the stream broke after %d deltas: %v", deltas, err)
		}
		if id == "" {
			id = gjson.GetBytes(ev.Data, "response.id").Str
		}
		switch typ := eventType(ev); {
		case typ == "response.output_text.delta":
			if deltas++; deltas == 5 { // P's three and two of B's: B is streaming
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_ = h.gw.Shutdown(ctx)
				}()
			}
		case isTerminal(typ):
			terminal = typ
		}
	}
	if deltas != 5 || terminal != "response.failed" || !strings.HasPrefix(id, "resp_P_") {
		t.Fatalf("the client got %d deltas of %s, then %s; want P's three, B's two, then the drain's response.failed", deltas, id, terminal)
	}
	var ended string
	for _, line := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(line, "stream ended by the gateway") && strings.Contains(line, "reason=drain") {
			ended = line
		}
	}
	if want := "response_id=" + gateway.LogID(id); !strings.Contains(ended, want) {
		t.Fatalf("the drain's line is %q; want it to carry the client's id %s (%s)\nlog:\n%s", ended, id, want, h.logs.String())
	}
	if !strings.Contains(h.logs.String(), "continuing on the next target") {
		t.Fatalf("the stream was not continued on B:\n%s", h.logs.String())
	}
}

package gateway_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestFirstEventRateLimitOnEveryTargetSaysTheWait: when every target of a
// route answers a stream with a rate limit as its first event, without a
// wait of its own, the client's response.failed says the wait it faces
// (the first target back from the cooldown those failures started), as a
// 429 status on every target tells it (README "Failover and replay": a
// stream's response.failed, which has no header, has the wait in its
// message).
func TestFirstEventRateLimitOnEveryTargetSaysTheWait(t *testing.T) {
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
		opts: gateway.Options{Routes: []gateway.Route{{Models: []string{"m"},
			Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}}}}})
	limited := upstreamtest.Script{Frames: g6Frames(
		`{"type":"response.created","response":`+g6Resp("resp_rl", "in_progress", "[]")+`}`,
		`{"type":"response.failed","response":{"id":"resp_rl","object":"response","status":"failed","output":[],`+
			`"error":{"code":"rate_limit_exceeded","message":"boom"}}}`)}
	h.ups["A"].Enqueue(limited)
	h.ups["B"].Enqueue(limited)
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	msg := gjson.GetBytes(last.data, "response.error.message").Str
	if last.typ != "response.failed" || last.code != "rate_limit_exceeded" ||
		!strings.HasPrefix(msg, "boom; please try again in ") || !strings.HasSuffix(msg, "s") {
		t.Fatalf("terminal %s %s, message %q, want boom with the wait", last.typ, last.code, msg)
	}
}

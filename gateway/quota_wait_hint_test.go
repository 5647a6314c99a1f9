package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A capacity failure as a stream's first event reaches a Responses stream
// client as response.failed, whose message is the only place a wait can be
// told (README "Failover and replay"): a rate limit gets the cooldown it
// started as "; please try again in Ns", joined to a message that ends a
// sentence without a ".;", while a billing code (insufficient_quota,
// usage_not_included) gets no wait at all, since waiting does not cure it.
func TestStreamQuotaFailureWaitHint(t *testing.T) {
	for _, tc := range []struct {
		code, message string
		want          func(string) bool
		wantDesc      string
	}{
		{"insufficient_quota", "You exceeded your current quota.",
			func(m string) bool { return m == "You exceeded your current quota." }, "the upstream's message alone"},
		{"usage_not_included", "Your plan does not include this model.",
			func(m string) bool { return m == "Your plan does not include this model." }, "the upstream's message alone"},
		{"rate_limit_exceeded", "Rate limit reached.",
			func(m string) bool { return strings.HasPrefix(m, "Rate limit reached; please try again in ") }, "the message joined to the wait by \"; \""},
	} {
		t.Run(tc.code, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"error": map[string]any{"code": tc.code, "type": tc.code, "message": tc.message}})
			h := singleChatUpstream(t, "chat", upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusTooManyRequests, body))
			_, evs := postWith(t, h, "/v1/responses", respStreamBody, nil)
			if len(evs) == 0 {
				t.Fatal("no events")
			}
			last := evs[len(evs)-1].Data
			msg := gjson.GetBytes(last, "response.error.message").Str
			if gjson.GetBytes(last, "type").Str != "response.failed" || gjson.GetBytes(last, "response.error.code").Str != tc.code || !tc.want(msg) {
				t.Fatalf("stream ended with %s, want response.failed %s with %s", last, tc.code, tc.wantDesc)
			}
		})
	}
}

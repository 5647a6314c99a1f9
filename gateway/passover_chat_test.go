package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/translate"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// mixedRouteHarness is a gateway whose route "mix" tries the named upstreams
// in order; R speaks Responses, C speaks Chat Completions.
func mixedRouteHarness(t *testing.T, order ...string) *harness {
	t.Helper()
	var targets []gateway.RouteTarget
	var ups []upstreamtest.Options
	for _, name := range order {
		targets = append(targets, gateway.RouteTarget{Upstream: name})
		ups = append(ups, upstreamtest.Options{Name: name})
	}
	return newHarness(t, harnessConfig{upstreams: ups, protocol: map[string]string{"C": "chat"},
		opts: gateway.Options{Routes: []gateway.Route{{Models: []string{"mix"}, Targets: targets}}}})
}

// inputless are Responses requests OpenAI's CreateResponse accepts and a
// Chat upstream cannot take: no input, a prompt template instead.
var inputless = []string{`{"model":"mix"}`, `{"model":"mix","prompt":{"id":"pmpt_1"}}`}

// A Responses target that fails before content (a cut) on a route whose
// other target speaks Chat: the Chat target cannot take a request without
// input, so it is passed over, not allowed to answer its conversion's 400;
// the client gets the 502 naming R's failure and, after "not tried:", C
// and why, with the wait R's failure started (README "Failover and
// replay").
func TestChatTargetThatCannotTakeTheRequestIsPassedOverAfterAFailure(t *testing.T) {
	for _, body := range inputless {
		t.Run(body, func(t *testing.T) {
			h := mixedRouteHarness(t, "R", "C")
			h.ups["R"].Enqueue(upstreamtest.CutAfter(0), upstreamtest.CutAfter(0))
			resp, b := readAll(t, h, "/v1/responses", body)
			msg := gjson.GetBytes(b, "error.message").Str
			if resp.StatusCode != http.StatusBadGateway || gjson.GetBytes(b, "error.code").Str != "upstream_unavailable" {
				t.Fatalf("%d %s, want 502 upstream_unavailable", resp.StatusCode, b)
			}
			rAt, cAt := strings.Index(msg, "R/"), strings.Index(msg, "not tried: C/")
			if rAt < 0 || cAt < rAt || !strings.Contains(msg[cAt:], ": cannot take this request: ") {
				t.Fatalf("message %q: want R's failure, then C not tried and why", msg)
			}
			if n := h.ups["C"].RequestCount(); n != 0 {
				t.Fatalf("C was called %d times", n)
			}
			// R's failures cooled it down: the client is told that wait.
			if ra := resp.Header.Get("Retry-After"); ra == "" || !strings.Contains(msg, "please try again in ") {
				t.Fatalf("Retry-After %q, message %q: want R's cooldown as the wait", ra, msg)
			}
		})
	}
}

// The same route while R cools down after a rate limit: the client gets R's
// 429 with its wait, then, while R is still out, the answer naming R's
// cooldown and C passed over with the same wait; never the Chat
// conversion's 400, which SDKs do not retry.
func TestChatTargetThatCannotTakeTheRequestIsPassedOverWhileTheOtherCools(t *testing.T) {
	h := mixedRouteHarness(t, "R", "C")
	h.ups["R"].Enqueue(upstreamtest.Status429(30 * time.Second))
	resp, b := readAll(t, h, "/v1/responses", `{"model":"mix"}`)
	if resp.StatusCode != http.StatusTooManyRequests || gjson.GetBytes(b, "error.code").Str != "rate_limit_exceeded" ||
		resp.Header.Get("Retry-After") != "30" {
		t.Fatalf("%d Retry-After %q %s, want R's 429 with its 30s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	resp, b = readAll(t, h, "/v1/responses", `{"model":"mix","instructions":"be brief"}`)
	msg := gjson.GetBytes(b, "error.message").Str
	if resp.StatusCode == http.StatusBadRequest || resp.StatusCode < 429 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%d Retry-After %q %s, want a retryable status with the wait", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if !strings.Contains(msg, "R/") || !strings.Contains(msg, "C/mix: cannot take this request: ") || !strings.Contains(msg, "please try again in ") {
		t.Fatalf("message %q: want R's cooldown, C passed over and the wait", msg)
	}
	if r, c := h.ups["R"].RequestCount(), h.ups["C"].RequestCount(); r != 1 || c != 0 {
		t.Fatalf("R got %d requests, C %d; want 1 and 0", r, c)
	}
}

// A Chat target first on the route is passed over: the Responses target
// after it serves the request.
func TestResponsesTargetAfterAChatTargetServesARequestWithoutInput(t *testing.T) {
	for _, body := range inputless {
		t.Run(body, func(t *testing.T) {
			h := mixedRouteHarness(t, "C", "R")
			resp, b := readAll(t, h, "/v1/responses", body)
			if resp.StatusCode != http.StatusOK || gjson.GetBytes(b, "status").Str != "completed" {
				t.Fatalf("%d %s, want 200 from R", resp.StatusCode, b)
			}
			if r, c := h.ups["R"].RequestCount(), h.ups["C"].RequestCount(); r != 1 || c != 0 {
				t.Fatalf("R got %d requests, C %d; want 1 and 0", r, c)
			}
		})
	}
}

// With no target that could take it, the conversion's 400 is the answer,
// and a missing input reads the same whatever else the request carries.
func TestChatOnlyRouteRefusesARequestWithoutInput(t *testing.T) {
	h := mixedRouteHarness(t, "C")
	want := translate.MissingInput()
	for _, body := range []string{`{"model":"mix"}`, `{"model":"mix","instructions":"be brief"}`, `{"model":"mix","input":[]}`} {
		resp, b := readAll(t, h, "/v1/responses", body)
		e := gjson.GetBytes(b, "error")
		if resp.StatusCode != http.StatusBadRequest || e.Get("code").Str != want.Code || e.Get("param").Str != "input" || e.Get("message").Str != want.Message {
			t.Fatalf("%s: %d %s, want 400 %s %q", body, resp.StatusCode, b, want.Code, want.Message)
		}
	}
	if n := h.ups["C"].RequestCount(); n != 0 {
		t.Fatalf("C was called %d times", n)
	}
}

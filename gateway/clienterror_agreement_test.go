package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestUpstreamClientErrorSameForStreamAndJSON: a request that fails before
// any content because the last upstream tried refused it with a client
// error (a 4xx status) tells a Responses stream client what it tells a JSON
// client: the upstream's status and error object (message, type, code,
// param), never response.failed or the gateway's own message (README
// "Routes and fallbacks": every 4xx other than a context overflow passes
// through unchanged; a context overflow moves on to another model, then
// passes through). Read raw and through openai-go, as a client reads it.
func TestUpstreamClientErrorSameForStreamAndJSON(t *testing.T) {
	invalid := upstreamtest.ErrorBody("Invalid value for 'temperature': 5 is greater than the maximum of 2.",
		"invalid_request_error", "invalid_value", "temperature")
	overflow := upstreamtest.ErrorBody("Your input exceeds the context window of this model. Please adjust your input and try again.",
		"invalid_request_error", "context_length_exceeded", "input")
	twoModels := []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "A", Model: "m1"}, {Upstream: "B", Model: "m2"}}}}
	for _, tc := range []struct {
		name   string
		routes []gateway.Route
		model  string
		names  []string // the upstreams, each answering body
		body   []byte   // their 400 body
	}{
		{"single target, custom 400", nil, "gpt-fake-1", []string{"A"}, invalid},
		{"route of two, both context_length_exceeded", twoModels, "m", []string{"A", "B"}, overflow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := gjson.GetBytes(tc.body, "error")
			for _, stream := range []bool{false, true} {
				var ups []upstreamtest.Options
				for _, name := range tc.names {
					ups = append(ups, upstreamtest.Options{Name: name})
				}
				h := newHarness(t, harnessConfig{upstreams: ups, opts: gateway.Options{Routes: tc.routes}})
				for _, name := range tc.names {
					h.ups[name].SetDefault(upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusBadRequest, tc.body))
				}
				body := `{"model":"` + tc.model + `","input":"hi","temperature":5`
				if stream {
					body += `,"stream":true`
				}
				resp, b := readAll(t, h, "/v1/responses", body+"}")
				got := gjson.GetBytes(b, "error")
				if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("stream=%v: %d %s %s, want the upstream's 400 JSON error", stream, resp.StatusCode, resp.Header.Get("Content-Type"), b)
				}
				for _, f := range []string{"message", "type", "code", "param"} {
					if got.Get(f).Str != want.Get(f).Str {
						t.Fatalf("stream=%v: error.%s %q, want the upstream's %q (%s)", stream, f, got.Get(f).Str, want.Get(f).Str, b)
					}
				}
				for _, name := range tc.names { // each target once: the last one's refusal is the answer
					if n := len(h.ups[name].Requests()); n != 1 {
						t.Fatalf("stream=%v: %s called %d times, want once", stream, name, n)
					}
				}

				// The same through openai-go: the SDK raises the 400 with
				// the upstream's fields from either call.
				params := responses.ResponseNewParams{Model: tc.model, Temperature: openai.Float(5),
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
				client := h.client()
				var err error
				if stream {
					s := client.Responses.NewStreaming(context.Background(), params)
					for s.Next() {
						t.Fatalf("stream event %s, want none before the error", s.Current().RawJSON())
					}
					err = s.Err()
				} else {
					_, err = client.Responses.New(context.Background(), params)
				}
				var apiErr *openai.Error
				if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Message != want.Get("message").Str ||
					apiErr.Type != want.Get("type").Str || apiErr.Code != want.Get("code").Str || apiErr.Param != want.Get("param").Str {
					t.Fatalf("openai-go stream=%v: %v, want the upstream's 400 %s", stream, err, want.Raw)
				}
			}
		})
	}
}

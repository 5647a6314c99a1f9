package gateway

import (
	"net/http"
	"testing"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// TestRelayedErrorTypesAsEveryPath: an upstream's error answer that ends a
// committed stream is typed by the rule every other path uses
// (apierr.FromUpstream, server_error when it leaves none): a 4xx other than
// a 429 is invalid_request_error, a 429 and a 5xx server_error (a 429's code
// says what it is, rate_limit_exceeded), and an empty body still says so.
func TestRelayedErrorTypesAsEveryPath(t *testing.T) {
	for _, tc := range []struct {
		status  int
		body    string
		typ     string
		code    string
		message string
	}{
		{http.StatusTooManyRequests, `{"error":{"message":"slow down"}}`, apierr.TypeServer, apierr.CodeRateLimitExceeded, "slow down"},
		{http.StatusTooManyRequests, `{"error":{"message":"slow down","code":429}}`, apierr.TypeServer, apierr.CodeRateLimitExceeded, "slow down"},
		{http.StatusTooManyRequests, ``, apierr.TypeServer, apierr.CodeRateLimitExceeded, "the upstream answered HTTP 429 Too Many Requests without an error message"},
		{http.StatusUnauthorized, `{"error":{"message":"bad key"}}`, apierr.TypeInvalidRequest, "", "bad key"},
		{http.StatusForbidden, `{"error":{"message":"no"}}`, apierr.TypeInvalidRequest, "", "no"},
		{http.StatusNotFound, ``, apierr.TypeInvalidRequest, "", "the upstream answered HTTP 404 Not Found without an error message"},
		{http.StatusRequestTimeout, `{"error":{"message":"slow body"}}`, apierr.TypeInvalidRequest, "", "slow body"},
		{http.StatusConflict, `{"error":{"message":"busy"}}`, apierr.TypeInvalidRequest, "", "busy"},
		{http.StatusBadRequest, `{"error":{"message":"too long","code":400,"type":"exceed_context_size_error"}}`, apierr.TypeInvalidRequest, apierr.CodeContextLengthExceeded, "too long"},
		{http.StatusInternalServerError, `{"error":{"message":"boom"}}`, apierr.TypeServer, "", "boom"},
		{http.StatusBadGateway, ``, apierr.TypeServer, "", "the upstream answered HTTP 502 Bad Gateway without an error message"},
	} {
		e := relayedError(tc.status, []byte(tc.body))
		if e.Type != tc.typ || e.Code != tc.code || e.Message != tc.message {
			t.Errorf("HTTP %d %s: type %q code %q message %q, want type %q code %q message %q",
				tc.status, tc.body, e.Type, e.Code, e.Message, tc.typ, tc.code, tc.message)
		}
		// The same answer as the JSON body a client gets (openAIShapedBody)
		// carries the same type.
		if tc.body == "" {
			continue
		}
		if got, _ := apierr.Parse(openAIShapedBody(tc.status, []byte(tc.body), "")); got.Type != tc.typ {
			t.Errorf("HTTP %d %s relayed as a body: type %q, want %q", tc.status, tc.body, got.Type, tc.typ)
		}
	}
}

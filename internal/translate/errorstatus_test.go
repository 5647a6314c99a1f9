package translate

import (
	"net/http"
	"testing"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// TestErrorStatus: the status an upstream error object stands for when it
// names none.
func TestErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		e    apierr.Error
		want int
	}{
		{apierr.Error{Code: "429", Type: "rate_limit_error"}, http.StatusTooManyRequests},
		{apierr.Error{Code: "400"}, http.StatusBadRequest},
		{apierr.Error{Code: "999", Type: apierr.TypeServer}, http.StatusBadGateway},
		{apierr.Error{Code: apierr.CodeRateLimitExceeded, Type: "requests"}, http.StatusTooManyRequests},
		{apierr.Error{Code: apierr.CodeInsufficientQuota, Type: "insufficient_quota"}, http.StatusTooManyRequests},
		{apierr.Error{Code: "context_length_exceeded", Type: apierr.TypeInvalidRequest}, http.StatusBadRequest},
		{apierr.Error{Type: apierr.TypeServer}, http.StatusBadGateway},
		{apierr.Error{Code: "vendor_overloaded", Type: "vendor"}, 0},
		// OpenAI's stream error event names no type: the parameter at fault
		// marks a client error, unless the type or a code clients act on
		// says otherwise.
		{apierr.Error{Code: "invalid_value", Param: "temperature"}, http.StatusBadRequest},
		{apierr.Error{Code: "model_crashed", Type: apierr.TypeServer, Param: "temperature"}, http.StatusBadGateway},
		{apierr.Error{Code: apierr.CodeRateLimitExceeded, Param: "input"}, http.StatusTooManyRequests},
		{apierr.Error{Code: "server_is_overloaded", Param: "input"}, 0},
		{apierr.Error{Code: "context_length_exceeded", Param: "input"}, 0},
		{apierr.Error{Code: "invalid_value"}, 0},
	} {
		if got := ErrorStatus(tc.e); got != tc.want {
			t.Errorf("ErrorStatus(%+v) = %d, want %d", tc.e, got, tc.want)
		}
	}
}

package gateway

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// A value writeJSON cannot encode (a non-finite number) is answered as a
// 500 with an OpenAI-style error, never the status asked for with an empty
// body.
func TestWriteJSONThatCannotBeEncoded(t *testing.T) {
	for _, c := range []struct {
		name   string
		v      any
		status int
	}{
		{"encodable", map[string]any{"n": 1.5}, http.StatusOK},
		{"infinite", map[string]any{"n": math.Inf(1)}, http.StatusInternalServerError},
		{"not a number", map[string]any{"n": math.NaN()}, http.StatusInternalServerError},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			writeJSON(rec, http.StatusOK, c.v)
			if rec.Code != c.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
			}
			if c.status == http.StatusOK {
				return
			}
			if e, ok := apierr.Parse(rec.Body.Bytes()); !ok || e.Code != apierr.CodeInternalError {
				t.Fatalf("body %q is not an internal_error", rec.Body)
			}
		})
	}
}

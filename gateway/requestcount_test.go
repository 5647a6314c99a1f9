package gateway_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestEveryRequestIsCounted: a 404 (unknown endpoint, inside and outside
// /v1/), a 405, a 426 (GET /v1/responses without an upgrade) and
// /v1/models are counted in sluice_requests_total like API requests.
func TestEveryRequestIsCounted(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/v1/nothing-here", http.StatusNotFound},
		{http.MethodGet, "/nothing-here", http.StatusNotFound},
		{http.MethodDelete, "/v1/chat/completions", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/responses", http.StatusUpgradeRequired},
		{http.MethodGet, "/v1/models", http.StatusOK},
	} {
		req, _ := http.NewRequest(c.method, h.url+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("%s %s = %d, want %d", c.method, c.path, resp.StatusCode, c.want)
		}
	}
	m := h.metrics()
	for _, want := range []string{
		`sluice_requests_total{code="404",surface="other"} 2`,
		`sluice_requests_total{code="405",surface="other"} 1`,
		`sluice_requests_total{code="426",surface="websocket"} 1`,
		`sluice_requests_total{code="200",surface="models"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "sluice_requests_total"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

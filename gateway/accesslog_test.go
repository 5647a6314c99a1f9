package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
)

// TestResourceCallsCountAndLogUnderTheirSurface: the stored-response API
// (GET and DELETE /v1/responses/{id}, its input_items, cancel) is counted
// and logged as surface responses_resource, not as "other", which stays for
// unknown endpoints and methods; /v1/models logs its surface too. The access
// line's endpoint shows the response id as every log shows ids
// (SECURITY.md: sha256:<12 hex>, never raw), and so a streaming-input
// session id.
func TestResourceCallsCountAndLogUnderTheirSurface(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	id := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	const session = "sis_f981df4d990a7906ff36229587da3554"
	resource := map[int]int{} // status → calls
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/v1/responses/" + id},
		{http.MethodGet, "/v1/responses/" + id + "/input_items"},
		{http.MethodPost, "/v1/responses/" + id + "/cancel"},
		{http.MethodDelete, "/v1/responses/" + id},
	} {
		status, body := h.call(c.method, c.path, "sk-client-secret")
		if status == http.StatusNotFound && strings.Contains(string(body), "unknown endpoint") {
			t.Fatalf("%s %s is not routed: %s", c.method, c.path, body)
		}
		resource[status]++
	}
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/v1/responses/" + id + "/nothing", http.StatusNotFound},
		{http.MethodPut, "/v1/responses/" + id, http.StatusMethodNotAllowed},
		{http.MethodDelete, "/v1/streaming_input/sessions/" + session, http.StatusNotFound}, // not mounted here
		{http.MethodGet, "/v1/models", http.StatusOK},
	} {
		if status, body := h.call(c.method, c.path, "sk-client-secret"); status != c.want {
			t.Fatalf("%s %s = %d, want %d: %s", c.method, c.path, status, c.want, body)
		}
	}
	m := h.metrics()
	for status, n := range resource {
		want := fmt.Sprintf(`sluice_requests_total{code="%d",surface="responses_resource"} %d`, status, n)
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "sluice_requests_total"))
		}
	}
	for _, want := range []string{
		`sluice_requests_total{code="404",surface="other"} 2`,
		`sluice_requests_total{code="405",surface="other"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "sluice_requests_total"))
		}
	}

	waitAccessLines(t, h, 9)
	lines := grepLines(h.logs.String(), "access: request")
	if strings.Contains(lines, id) || strings.Contains(lines, session) {
		t.Fatalf("a raw id in the access log:\n%s", lines)
	}
	for _, want := range []string{
		"method=GET endpoint=/v1/responses/" + gateway.LogID(id) + " surface=responses_resource",
		"method=GET endpoint=/v1/responses/" + gateway.LogID(id) + "/input_items surface=responses_resource",
		"method=POST endpoint=/v1/responses/" + gateway.LogID(id) + "/cancel surface=responses_resource",
		"method=DELETE endpoint=/v1/responses/" + gateway.LogID(id) + " surface=responses_resource",
		"method=GET endpoint=/v1/responses/" + gateway.LogID(id) + "/nothing surface=other",
		"method=PUT endpoint=/v1/responses/" + gateway.LogID(id) + " surface=other",
		"method=DELETE endpoint=/v1/streaming_input/sessions/" + gateway.LogID(session) + " surface=other",
		"method=GET endpoint=/v1/models surface=models",
	} {
		if !strings.Contains(lines, want) {
			t.Errorf("no access line with %q:\n%s", want, lines)
		}
	}
}

package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestHeadWhereverGet: HEAD is answered wherever GET is (RFC 9110 §9.3.2),
// with the GET's status and headers and no body, and Allow lists HEAD next
// to GET. GET /v1/responses without an upgrade answers HEAD with its 426.
// A resume (?stream=true), answered event by event, is GET-only: its HEAD is
// a 405 at once, no stream started.
func TestHeadWhereverGet(t *testing.T) {
	const clientCred = "sk-client-secret" // the response's owner (harness.post)
	h := encodedSlashHarness(t, "")
	id := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	do := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, h.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+clientCred)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	for _, path := range []string{
		"/v1/models", "/v1/models/gpt-fake-1", "/v1/models/nope", "/v1/models/meta-llama%2FLlama-3.1-8B",
		"/v1/responses/" + id, "/v1/responses/" + id + "/input_items", "/v1/responses/resp_unknown",
		"/v1/responses", "/healthz", "/readyz", "/metrics", "/admin/keys", "/admin/usage", "/admin/upstreams",
	} {
		get, _ := do(http.MethodGet, path)
		head, b := do(http.MethodHead, path)
		if head.StatusCode != get.StatusCode || len(b) != 0 {
			t.Errorf("HEAD %s = %d with %d body bytes, want GET's %d without a body", path, head.StatusCode, len(b), get.StatusCode)
		}
		for _, name := range []string{"Content-Type", "Content-Length"} {
			if got, want := head.Header.Get(name), get.Header.Get(name); got != want && path != "/metrics" { // the metrics change between the two
				t.Errorf("HEAD %s: %s %q, GET's %q", path, name, got, want)
			}
		}
	}
	// A HEAD's content means nothing (RFC 9110 §9.3.2): the SDKs' {"stream":true}
	// in a GET's body asks for no stream in a HEAD's.
	req, _ := http.NewRequest(http.MethodHead, h.url+"/v1/responses/"+id, strings.NewReader(`{"stream":true}`))
	req.Header.Set("Authorization", "Bearer "+clientCred)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("HEAD with a body asking for a stream = %d %q, want the Response's 200 application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, tt := range []struct{ method, path, allow string }{
		{http.MethodOptions, "/v1/models", "GET, HEAD, OPTIONS"},
		{http.MethodPut, "/v1/models", "GET, HEAD, OPTIONS"},
		{http.MethodOptions, "/v1/responses/" + id, "DELETE, GET, HEAD, OPTIONS"},
		{http.MethodPost, "/admin/upstreams", "GET, HEAD, OPTIONS"},
		{http.MethodHead, "/v1/chat/completions", "OPTIONS, POST"},
		{http.MethodHead, "/v1/responses/" + id + "?stream=true", "DELETE, GET, OPTIONS"},
	} {
		resp, _ := do(tt.method, tt.path)
		if got := resp.Header.Get("Allow"); got != tt.allow {
			t.Errorf("%s %s: %d, Allow %q, want %q", tt.method, tt.path, resp.StatusCode, got, tt.allow)
		}
		if want := http.StatusMethodNotAllowed; tt.method != http.MethodOptions && resp.StatusCode != want {
			t.Errorf("%s %s = %d, want %d", tt.method, tt.path, resp.StatusCode, want)
		}
	}
}

package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// accessLineOf is the one access line of the request method path (its
// endpoint as the log shows it), or "" when there is none.
func accessLineOf(logs, method, endpoint string) string {
	var found []string
	for _, l := range strings.Split(grepLines(logs, "access: request"), "\n") {
		if strings.Contains(l, " method="+method+" endpoint="+endpoint+" ") {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		return ""
	}
	return found[0]
}

// TestGatewayRefusalsLogTheirCode: every OpenAI error the gateway answers
// itself puts its code on the request's access line (README "Access log"),
// whichever handler wrote it: the router's 404 and 405, /v1/models/{model},
// a streaming-input session refused, a stored response that does not exist,
// the 426 of GET /v1/responses without an upgrade.
func TestGatewayRefusalsLogTheirCode(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	mgr, err := streaminput.New(context.Background(), streaminput.Options{Dispatch: h.gw.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range mgr.Routes() {
		h.gw.Handle(rt.Method, rt.Path, rt.Handler)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = mgr.Close(ctx)
	})
	const missing = "resp_0123456789abcdef"
	cases := []struct {
		name, method, path, body string
		endpoint, surface        string // on the access line
		status                   int
		code                     string
	}{
		{"unknown model", http.MethodGet, "/v1/models/nope", "", "/v1/models/nope", "models", http.StatusNotFound, "model_not_found"},
		{"unknown endpoint", http.MethodGet, "/v1/nothing", "", "/v1/nothing", "other", http.StatusNotFound, "not_found"},
		{"unknown method", http.MethodPut, "/v1/responses", "", "/v1/responses", "other", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"streaming-input session refused", http.MethodPost, streaminput.PathPrefix,
			`{"endpoint":"/v1/responses","template":{"model":"gpt-fake-1"},"start_policy":"bad"}`,
			streaminput.PathPrefix, "streaming_input", http.StatusBadRequest, "invalid_value"},
		{"stored response not found", http.MethodGet, "/v1/responses/" + missing, "",
			"/v1/responses/" + gateway.LogID(missing), "responses_resource", http.StatusNotFound, "not_found"},
		{"WebSocket mode without an upgrade", http.MethodGet, "/v1/responses", "", "/v1/responses", "websocket", http.StatusUpgradeRequired, "websocket_required"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, h.url+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer sk-client-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != c.status {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("%s: %s %s = %d, want %d: %s", c.name, c.method, c.path, resp.StatusCode, c.status, body)
		}
		if got := deref(readError(t, resp).Error.Code); got != c.code {
			t.Fatalf("%s: the client got code %q, want %q", c.name, got, c.code)
		}
	}
	waitAccessLines(t, h, len(cases))
	logs := h.logs.String()
	for _, c := range cases {
		line := accessLineOf(logs, c.method, c.endpoint)
		surface := " surface=" + c.surface + " "
		status := fmt.Sprintf(" status=%d code=%s ", c.status, c.code)
		if !strings.Contains(line, surface) || !strings.Contains(line, status) {
			t.Errorf("%s: access line %q, want%sand%s", c.name, line, surface, status)
		}
	}
	if t.Failed() {
		t.Log(grepLines(logs, "access: request"))
	}
}

// TestOptionsCountsAsOtherWithTheStatusSent: an OPTIONS the router answers
// (200 with Allow) is counted and logged with that 200, under "other" as
// an unknown method is (README "Observability"), not with status 0 under
// the surface of its path.
func TestOptionsCountsAsOtherWithTheStatusSent(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	const id = "resp_0123456789abcdef"
	paths := map[string]string{ // path → its endpoint on the access line
		"/v1/responses":         "/v1/responses",
		"/v1/chat/completions":  "/v1/chat/completions",
		"/v1/models":            "/v1/models",
		"/v1/models/gpt-fake-1": "/v1/models/gpt-fake-1",
		"/v1/responses/" + id:   "/v1/responses/" + gateway.LogID(id),
	}
	for path := range paths {
		req, _ := http.NewRequest(http.MethodOptions, h.url+path, nil)
		req.Header.Set("Authorization", "Bearer sk-client-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Allow") == "" {
			t.Fatalf("OPTIONS %s = %d, Allow %q; want 200 with Allow", path, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	// The operator's endpoints are not counted, their OPTIONS included.
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		req, _ := http.NewRequest(http.MethodOptions, h.url+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("OPTIONS %s = %d", path, resp.StatusCode)
		}
	}
	m := h.metrics()
	if want := fmt.Sprintf(`sluice_requests_total{code="200",surface="other"} %d`, len(paths)); !strings.Contains(m, want) {
		t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "sluice_requests_total"))
	}
	if strings.Contains(m, `code="0"`) {
		t.Errorf("a request counted with status 0:\n%s", grepLines(m, "sluice_requests_total"))
	}
	waitAccessLines(t, h, len(paths))
	logs := h.logs.String()
	for path, endpoint := range paths {
		if line := accessLineOf(logs, http.MethodOptions, endpoint); !strings.Contains(line, " surface=other ") || !strings.Contains(line, " status=200 ") {
			t.Errorf("OPTIONS %s: access line %q, want surface=other and status=200", path, line)
		}
	}
	if t.Failed() {
		t.Log(grepLines(logs, "access: request"))
	}
}

// TestContentEncodingLinesAreOneList: a request's Content-Encoding header
// lines are one list (RFC 9110 §5.3), so gzip and br on two lines are
// refused as "gzip, br" on one line is, not decoded by the first line
// alone; only one coding, gzip or zstd, is read.
func TestContentEncodingLinesAreOneList(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	body := gzipped(t, []byte(respJSONBody))
	for _, c := range []struct {
		name   string
		lines  []string
		body   []byte
		status int
	}{
		{"gzip on one line", []string{"gzip"}, body, http.StatusOK},
		{"gzip, br on one line", []string{"gzip, br"}, body, http.StatusUnsupportedMediaType},
		{"gzip and br on two lines", []string{"gzip", "br"}, body, http.StatusUnsupportedMediaType},
		{"gzip twice on two lines", []string{"gzip", "gzip"}, body, http.StatusUnsupportedMediaType},
		{"gzip and an empty line", []string{"gzip", ""}, body, http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", bytes.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer sk-client-secret")
		req.Header.Set("Content-Type", "application/json")
		req.Header["Content-Encoding"] = c.lines
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d, want %d: %s", c.name, resp.StatusCode, c.status, got)
			continue
		}
		if c.status == http.StatusUnsupportedMediaType && !strings.Contains(string(got), `"unsupported_content_encoding"`) {
			t.Errorf("%s: %s, want unsupported_content_encoding", c.name, got)
		}
	}
}

// TestUpstreamContentEncodingLinesAreOneList: an upstream answer with gzip
// and br on two Content-Encoding lines is in a coding the gateway does not
// read, as with both on one line: not decoded as gzip alone and relayed.
func TestUpstreamContentEncodingLinesAreOneList(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	answer := upstreamtest.Script{Header: http.Header{"Content-Encoding": {"gzip", "br"}},
		Body: gzipped(t, []byte(`{"id":"resp_x","object":"response","status":"completed","output":[]}`))}
	h.ups["A"].Enqueue(answer, answer) // a same-target retry gets the same
	resp := h.post("/v1/responses", respJSONBody)
	if resp.StatusCode != http.StatusBadGateway {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("status %d, want 502: %s", resp.StatusCode, body)
	}
	e := readError(t, resp)
	if want := `Content-Encoding "gzip, br", which the gateway does not decode`; deref(e.Error.Code) != "upstream_unavailable" || !strings.Contains(e.Error.Message, want) {
		t.Fatalf("error %q %q, want upstream_unavailable saying %q", deref(e.Error.Code), e.Error.Message, want)
	}
}

package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestUpstreamErrorCodeIsOneBoundedLogValue: an upstream's 400 whose code
// holds newlines, a control character and 300 bytes more reaches the
// client as it came, and the request's access line stays one line with the
// code cut and cleaned as the model is (README "Access log"): an upstream
// cannot split or forge the gateway's lines.
func TestUpstreamErrorCodeIsOneBoundedLogValue(t *testing.T) {
	code := "bad\ncode=forged status=200\a" + strings.Repeat("y", 300)
	body := []byte(`{"error":{"code":"bad\ncode=forged status=200\u0007` + strings.Repeat("y", 300) +
		`","type":"invalid_request_error","message":"msg","param":null}}`)
	h := newHarness(t, harnessConfig{})
	h.ups["A"].SetDefault(upstreamtest.Script{Status: http.StatusBadRequest, Body: body})
	resp, _ := readAll(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want the upstream's 400", resp.StatusCode)
	}
	var lines []string
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, "access: request") || strings.Contains(l, "code=forged") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("%d access lines (or forged ones), want one:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	_, after, _ := strings.Cut(lines[0], " code=")
	got, _, _ := strings.Cut(after, " ttfe=")
	if strings.ContainsAny(got, "\n\a") || len(got) > 130 || !strings.Contains(got, "bad") || strings.Contains(got, code) {
		t.Fatalf("access line's code %q, want the code cut to 128 bytes without control characters", got)
	}
}

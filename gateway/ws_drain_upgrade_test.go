package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// A WebSocket upgrade that reaches the gateway during the drain is refused
// with a 426 that names the protocol to use instead (RFC 9110 §15.5.22:
// HTTP/1.1), so that a client such as Codex falls back to HTTP (README
// "Running it"); its access line has the status and code the client got.
func TestWebSocketUpgradeDuringDrainIs426WithUpgrade(t *testing.T) {
	h := drainingHarness(t)
	req := mustRequest(http.MethodGet, "/v1/responses")
	for k, v := range map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Authorization": "Bearer sk-client-secret"} {
		req.Header.Set(k, v)
	}
	rec := newRecorder()
	h.gw.Handler().ServeHTTP(rec, req)
	if rec.code != http.StatusUpgradeRequired || rec.h.Get("Upgrade") != "HTTP/1.1" ||
		gjson.GetBytes(rec.body.Bytes(), "error.code").Str != "upstream_unavailable" {
		t.Fatalf("upgrade while draining: %d, Upgrade %q, %s", rec.code, rec.h.Get("Upgrade"), rec.body.Bytes())
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		line := grepLines(h.logs.String(), "surface=websocket")
		if strings.Contains(line, "status=426") && strings.Contains(line, "code=upstream_unavailable") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upgrade's access line does not say its 426 and code:\n%s", line)
		}
	}
}

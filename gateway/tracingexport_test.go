package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
)

// TestTracingExportFailuresGoToTheGatewayLog: with WithExportLog, a batch
// the collector refuses is a WARN line of the gateway's logger (JSON here,
// as with log.json), and the SDK never sees the error, so it does not hand
// it to OpenTelemetry's global handler, which prints plain lines with Go's
// log package whatever the log's format and level.
func TestTracingExportFailuresGoToTheGatewayLog(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no traces here", http.StatusBadRequest)
	}))
	defer collector.Close()
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, JSONFormat: true, Level: hclog.Info})
	tp, err := gateway.NewOTLPTracerProvider(context.Background(), collector.URL+"/v1/traces", 1, "test", gateway.WithExportLog(logger))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessConfig{opts: gateway.Options{TracerProvider: tp}})
	if _, evs := postWith(t, h, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`, nil); len(evs) == 0 {
		t.Fatal("no events")
	}
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatalf("the SDK got the export's error (it hands those to otel.Handle): %v", err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line, got:\n%s", logs.String())
	}
	var line struct {
		Level   string `json:"@level"`
		Message string `json:"@message"`
		Error   string `json:"error"`
		Failed  int    `json:"failed_exports"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &line); err != nil || line.Level != "warn" || line.Failed != 1 ||
		!strings.Contains(line.Message, "exporting spans failed") || !strings.Contains(line.Error, "400 Bad Request") {
		t.Fatalf("line %s (%v)", lines[0], err)
	}
}

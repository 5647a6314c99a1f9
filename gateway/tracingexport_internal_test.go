package gateway

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// failingExporter fails every export.
type failingExporter struct{ sdktrace.SpanExporter }

func (failingExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	return errors.New("otlphttp: POST http://collector/v1/traces: connection refused")
}

// TestExportFailuresAreLoggedAtMostOncePerInterval: a collector that stays
// down fails every batch; the log gets one line per exportLogEvery, which
// counts the failures and spans since the line before.
func TestExportFailuresAreLoggedAtMostOncePerInterval(t *testing.T) {
	var out strings.Builder
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	e := &loggedExporter{SpanExporter: failingExporter{}, every: time.Minute, now: func() time.Time { return now },
		log: hclog.New(&hclog.LoggerOptions{Output: &out, Level: hclog.Warn})}
	spans := make([]sdktrace.ReadOnlySpan, 2)
	for _, at := range []time.Duration{0, 5 * time.Second, 55 * time.Second, 60 * time.Second} {
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(at)
		if err := e.ExportSpans(context.Background(), spans); err != nil {
			t.Fatalf("the error reached the SDK: %v", err)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "failed_exports=1 dropped_spans=2") ||
		!strings.Contains(lines[1], "failed_exports=3 dropped_spans=6") || !strings.Contains(lines[1], "connection refused") {
		t.Fatalf("lines:\n%s", out.String())
	}
}

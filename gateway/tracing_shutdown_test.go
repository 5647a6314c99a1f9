package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/sluice-gw/sluice/gateway"
)

// exportLog is a provider whose export failures go to a log the test
// reads, sending to collector.
func exportLog(t *testing.T, collector string) (*syncBuffer, func(n int), *sdktrace.TracerProvider) {
	t.Helper()
	out := &syncBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Warn})
	tp, err := gateway.NewOTLPTracerProvider(context.Background(), collector+"/v1/traces", 1, "test", gateway.WithExportLog(log))
	if err != nil {
		t.Fatal(err)
	}
	spans := func(n int) {
		for range n {
			_, s := tp.Tracer("test").Start(context.Background(), "span")
			s.End()
		}
	}
	return out, spans, tp
}

// TestTracingShutdownTellsWhatWasDropped: the spans dropped since the last
// one-a-minute WARN line, and those a flush cut by the shutdown's deadline
// never sent, are counted in a line at shutdown (README "Tracing"), not
// lost with the process.
func TestTracingShutdownTellsWhatWasDropped(t *testing.T) {
	t.Run("collector refusing, after a line", func(t *testing.T) {
		refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no", http.StatusBadRequest)
		}))
		t.Cleanup(refusing.Close)
		out, spans, tp := exportLog(t, refusing.URL)
		spans(2)
		// A first failed export writes its line; the next ones within the
		// minute are held back until then, or the shutdown.
		if err := tp.ForceFlush(context.Background()); err != nil || !strings.Contains(out.String(), "dropped_spans=2") {
			t.Fatalf("flush: %v; log:\n%s", err, out.String())
		}
		spans(3)
		if err := tp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[1], "failed_exports=1 dropped_spans=3") {
			t.Fatalf("log:\n%s\nwant a second line counting the 3 spans dropped at shutdown", out.String())
		}
	})
	t.Run("flush cut", func(t *testing.T) {
		release := make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(slow.Close)
		t.Cleanup(func() { close(release) })
		out, spans, tp := exportLog(t, slow.URL)
		spans(3)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		if err := tp.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("shutdown: %v, want its deadline", err)
		}
		if s := out.String(); !strings.Contains(s, "dropped_spans=3") || !strings.Contains(s, "unexported_spans=3") {
			t.Fatalf("log:\n%s\nwant a line counting the 3 spans the cut flush dropped", s)
		}
	})
}

// TestTracingAttributeValuesAreBounded: whatever a span is given, no
// attribute value reaches the collector longer than the provider's limit.
func TestTracingAttributeValuesAreBounded(t *testing.T) {
	recv := newOTLPReceiver(t)
	tp, err := gateway.NewOTLPTracerProvider(context.Background(), recv.URL+"/v1/traces", 1, "test")
	if err != nil {
		t.Fatal(err)
	}
	_, s := tp.Tracer("test").Start(context.Background(), "span")
	s.SetAttributes(attribute.String("long", strings.Repeat("x", 100000)))
	s.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := recv.waitSpans(t, 1)[0]
	if v := spanAttr(got, "long").GetStringValue(); v == "" || len(v) > 4096 {
		t.Errorf("the attribute reached the collector %d bytes long", len(v))
	}
}

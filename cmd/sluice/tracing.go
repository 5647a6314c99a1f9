package main

import (
	"context"
	"fmt"
	"strconv"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/hashicorp/go-hclog"
	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/config"
	"github.com/sluice-gw/sluice/internal/httpx"
)

// tracerProvider builds the OTLP/HTTP tracer provider of tracing: (spans to
// {otlp_endpoint}/v1/traces), or nil when tracing.otlp_endpoint is unset.
func tracerProvider(ctx context.Context, t config.Tracing, logger hclog.Logger) (*sdktrace.TracerProvider, error) {
	if !t.Enabled() {
		return nil, nil
	}
	tp, err := gateway.NewOTLPTracerProvider(ctx, t.TracesURL(), t.Ratio(), currentBuild().Version,
		gateway.WithExportLog(logger.Named("tracing"))) // failed exports go to this log, not the stdlib one
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return tp, nil
}

// tracerOption is tp as gateway.Options.TracerProvider: a nil interface
// (not a typed nil) when tracing is off.
func tracerOption(tp *sdktrace.TracerProvider) trace.TracerProvider {
	if tp == nil {
		return nil
	}
	return tp
}

// tracingSummary is the startup summary's tracing item: "off", or where
// spans go (credentials in the URL redacted) and the share of new traces
// recorded.
func tracingSummary(t config.Tracing) string {
	if !t.Enabled() {
		return "off"
	}
	return "on, OTLP to " + httpx.RedactURL(t.TracesURL()) + ", sample ratio " + strconv.FormatFloat(t.Ratio(), 'g', -1, 64)
}

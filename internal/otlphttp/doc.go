// Package otlphttp exports OpenTelemetry SDK spans to a collector over
// OTLP/HTTP with protobuf bodies.
//
// It replaces the official otlptracehttp exporter, which imports gRPC and
// through it golang.org/x/net/trace, whose html/template use makes the linker
// keep every exported method of every type converted to an interface (~15 MB
// of binary, ~9 MiB more resident). The SDK (TracerProvider, batching,
// sampling, resources) and the OTLP protobuf types stay the official ones.
package otlphttp

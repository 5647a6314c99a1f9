package config

import (
	"math"
	"net/url"
	"strings"

	"github.com/sluice-gw/sluice/internal/httpx"
)

// Tracing configures OpenTelemetry traces (tracing:). Without an
// otlp_endpoint nothing is traced and no trace context is invented.
type Tracing struct {
	// OTLPEndpoint is an OTLP/HTTP collector's base URL
	// (http://127.0.0.1:4318); spans are POSTed to {otlp_endpoint}/v1/traces.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// SampleRatio is the share of new traces recorded, 0 to 1; absent: 1.
	// A client's traceparent decides for its own trace (parent-based).
	SampleRatio *float64 `yaml:"sample_ratio"`
}

// Enabled reports whether spans are exported.
func (t Tracing) Enabled() bool { return strings.TrimSpace(t.OTLPEndpoint) != "" }

// Ratio is the sample ratio (default 1).
func (t Tracing) Ratio() float64 {
	if t.SampleRatio == nil {
		return 1
	}
	return *t.SampleRatio
}

// TracesURL is where spans go: {otlp_endpoint}/v1/traces.
func (t Tracing) TracesURL() string {
	return strings.TrimRight(strings.TrimSpace(t.OTLPEndpoint), "/") + "/v1/traces"
}

func (c *Config) validateTracing(bad func(key, format string, args ...any)) {
	t := c.Tracing
	if r := t.SampleRatio; r != nil && (math.IsNaN(*r) || *r < 0 || *r > 1) {
		bad("tracing.sample_ratio", "%v is not between 0 and 1", *r)
	}
	if !t.Enabled() {
		return
	}
	raw := strings.TrimSpace(t.OTLPEndpoint)
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		bad("tracing.otlp_endpoint", "%q is not an http(s) URL (a collector's base URL, like http://127.0.0.1:4318)", httpx.RedactURL(raw))
	case u.RawQuery != "" || u.Fragment != "":
		bad("tracing.otlp_endpoint", "%q must not have a query or fragment (spans go to {otlp_endpoint}/v1/traces)", httpx.RedactURL(raw))
	case strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/v1/traces"):
		bad("tracing.otlp_endpoint", "%q is the traces path; give the collector's base URL (/v1/traces is added)", httpx.RedactURL(raw))
	}
}

package config

import (
	"strings"
	"testing"
)

func TestTracingConfigValidated(t *testing.T) {
	ratio := func(f float64) *float64 { return &f }
	for _, tc := range []struct {
		tr   Tracing
		want string // "" valid
	}{
		{Tracing{}, ""},
		{Tracing{OTLPEndpoint: "http://127.0.0.1:4318", SampleRatio: ratio(0.5)}, ""},
		{Tracing{OTLPEndpoint: "https://otel.example:4318/"}, ""},
		{Tracing{OTLPEndpoint: "127.0.0.1:4318"}, "tracing.otlp_endpoint"},
		{Tracing{OTLPEndpoint: "http://127.0.0.1:4318/v1/traces"}, "tracing.otlp_endpoint"},
		{Tracing{OTLPEndpoint: "http://127.0.0.1:4318", SampleRatio: ratio(1.5)}, "tracing.sample_ratio"},
	} {
		c := Defaults()
		c.Tracing = tc.tr
		err := c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.tr, err, tc.want)
		}
	}
	tr := Tracing{OTLPEndpoint: "http://127.0.0.1:4318/"}
	if tr.TracesURL() != "http://127.0.0.1:4318/v1/traces" || tr.Ratio() != 1 {
		t.Fatalf("%s %v", tr.TracesURL(), tr.Ratio())
	}
}

package gateway

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-gw/sluice/gateway/upstream"
)

// Tests that pin behaviour sampled mutation testing found unchecked.

// TestScrubberKeyOfMinimumLength: a key exactly minScrubKeyLen long is
// scrubbed (only shorter ones are ignored).
func TestScrubberKeyOfMinimumLength(t *testing.T) {
	key := "k2345678"[:minScrubKeyLen]
	s := newScrubber([]string{key})
	if got := s.String("key " + key + " here"); got != "key [redacted] here" {
		t.Fatalf("String = %q", got)
	}
}

// TestItemAtNegativeIndex: an event naming a negative output_index matches
// no item (it must not index the item list).
func TestItemAtNegativeIndex(t *testing.T) {
	cs := &clientStream{}
	for _, ev := range []string{
		`{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","status":"in_progress","content":[]}}`,
		`{"type":"response.output_item.done","output_index":-1,"item":{"id":"x","type":"message","status":"completed","content":[]}}`,
	} {
		f, ok := scanEvent([]byte(ev))
		if !ok {
			t.Fatal(ev)
		}
		cs.track(&f)
	}
	if f, _ := scanEvent([]byte(`{"output_index":-1}`)); cs.sent.ItemAt(f.OutputIndex) != nil {
		t.Fatal("output_index -1 matched an item")
	}
	if cs.sent.Items[0].Done != nil {
		t.Fatalf("item 0 closed by an event for output_index -1: %s", cs.sent.Items[0].Done)
	}
}

// TestAttemptSpanDefaultPorts: an attempt span's server.port is the base
// URL's port, else the scheme's default (443 for https, 80 for http).
func TestAttemptSpanDefaultPorts(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	pool, err := upstream.NewPool([]upstream.Config{
		{Name: "s", BaseURL: "https://api.example.com/v1"},
		{Name: "p", BaseURL: "http://proxy.example.com/v1"},
		{Name: "x", BaseURL: "https://api.example.com:8443/v1"},
	}, upstream.Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{tracing: newTracing(tp)}
	want := map[string]int64{"s": 443, "p": 80, "x": 8443}
	for name := range want {
		req := &clientRequest{ep: responsesEndpoint, model: "m", header: http.Header{}, meta: &reqMeta{}}
		end := s.traceRequest(req)
		s.traceAttempt(req, upstream.Target{Upstream: pool.Get(name), Model: "m"})
		s.traceAttemptEnd(req, attemptResult{})
		end()
	}
	got := map[string]int64{}
	for _, sp := range rec.Ended() {
		var up string
		var port int64 = -1
		for _, kv := range sp.Attributes() {
			switch kv.Key {
			case "sluice.upstream":
				up = kv.Value.AsString()
			case "server.port":
				port = kv.Value.AsInt64()
			}
		}
		if up != "" {
			got[up] = port
		}
	}
	for name, p := range want {
		if got[name] != p {
			t.Errorf("upstream %s: server.port %d, want %d", name, got[name], p)
		}
	}
}

// TestBucketWait: a token bucket that cannot serve n says how long until it
// can: the missing tokens at the refill rate (capacity per minute).
func TestBucketWait(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBucket(60, now) // one token a second
	if ok, _ := b.take(60, now); !ok {
		t.Fatal("a full bucket refused its capacity")
	}
	if ok, wait := b.take(30, now); ok || wait != 30*time.Second {
		t.Fatalf("take(30) on an empty bucket: %v, wait %v; want a 30s wait", ok, wait)
	}
}

// TestPriceOfCachedInput: cached input tokens are priced at CachedInput,
// 0 included (the config's default to Input is applied before:
// config.Price.CachedInputPrice), the rest of the input at Input.
func TestPriceOfCachedInput(t *testing.T) {
	a := &accounts{opts: AccountsOptions{Pricing: map[string]Price{
		"m": {Input: 2, Output: 8, CachedInput: 0.5},
		"n": {Input: 2, Output: 8},
	}}}
	u := usage{input: 1_000_000, cached: 400_000, output: 1_000_000}
	for model, want := range map[string]float64{"m": 0.6*2 + 0.4*0.5 + 8, "n": 0.6*2 + 8} {
		if got, ok := a.priceOf(model, u); !ok || math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: cost %v (%v), want %v", model, got, ok, want)
		}
	}
	if _, ok := a.priceOf("unpriced", u); ok {
		t.Error("a model without a price was priced")
	}
}

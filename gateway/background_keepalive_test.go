package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A background run answered with JSON has no client reading its stream, so
// the keepalives its silences would get are not counted in
// sluice_keepalives_total, which counts those written to streaming clients
// (README "Observability"); a streaming client's, in the same conditions,
// are.
func TestBackgroundRunCountsNoKeepalives(t *testing.T) {
	opts := resumeOpts()
	opts.KeepAlive = 20 * time.Millisecond
	h := newHarness(t, harnessConfig{opts: opts})
	const silence = 150 * time.Millisecond // between the upstream's events: several keepalive periods
	keepalives := func() float64 {
		page := h.metrics()
		var n float64
		for _, l := range strings.Split(page, "\n") {
			if strings.HasPrefix(l, "sluice_keepalives_total{") {
				n += metricValue(page, l[:strings.LastIndexByte(l, ' ')])
			}
		}
		return n
	}

	h.ups["A"].Enqueue(upstreamtest.Slow(silence))
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := gjson.GetBytes(body, "id").Str
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("background create: %d %s", resp.StatusCode, body)
	}
	h.waitFor("/v1/responses/"+id, func(body []byte) bool { return gjson.GetBytes(body, "status").Str == "completed" })
	if n := keepalives(); n != 0 {
		t.Fatalf("a background run nobody reads counted %v keepalives", n)
	}

	h.ups["A"].Enqueue(upstreamtest.Slow(silence))
	if _, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`); len(evs) == 0 ||
		evs[len(evs)-1].Name != "response.completed" {
		t.Fatalf("the streaming request: %d events", len(evs))
	}
	if n := keepalives(); n == 0 {
		t.Fatal("a streaming client's silences counted no keepalive: the test's conditions do not make any")
	}
}

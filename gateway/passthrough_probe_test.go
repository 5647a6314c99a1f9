package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestPassThroughUpstreamWhoseModelsNeedAKey: an upstream without its own
// api_key gets each client's credential (README's zero-config drop-in in
// front of OpenAI). Its model list refuses the probe, which has no
// credential to send; that is no reason to take it out of service: a
// client with a good key is served, over SSE, and the upstream reads
// healthy.
func TestPassThroughUpstreamWhoseModelsNeedAKey(t *testing.T) {
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A", APIKey: "sk-client-own"}}})
	h.ups["A"].SetDefault(upstreamtest.Answer("passed through", 2))

	req, err := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(`{"model":"m","input":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-client-own")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "response.completed") || !strings.Contains(string(body), "passed") {
		t.Fatalf("a client with a good key: HTTP %d\n%s", resp.StatusCode, body)
	}

	resp, err = http.Get(h.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: HTTP %d %s, want 200: the upstream answers its probe", resp.StatusCode, ready)
	}
}

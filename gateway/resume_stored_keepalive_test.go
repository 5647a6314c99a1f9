package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestStoredFollowKeepsAliveEveryKeepAlivePeriod: a client that resumes on
// one replica a stream that another runs (following it through a shared
// store) gets a ": keepalive" comment every timeouts.keepalive while the
// upstream is silent, as a resumer on the replica running it does — not
// one every 15s whatever timeouts.keepalive says.
func TestStoredFollowKeepsAliveEveryKeepAlivePeriod(t *testing.T) {
	up, replica := redisReplicas(t, gateway.Options{KeepAlive: 50 * time.Millisecond, LifecycleHold: -1})
	running, other := replica(), replica()
	silent := upstreamtest.Answer(longText, 3)
	silent.Gap = 300 * time.Millisecond // silences of several keepalive periods
	up.Enqueue(silent)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := openStream(t, ctx, running, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	first, err := readEvents(src, 1)
	if err != nil {
		t.Fatal(err)
	}
	id := gjson.GetBytes(first[0], "response.id").Str
	// The other replica knows the response once its anchor and log are in
	// the store (written at once, off the stream): before that, a resume
	// there is a 404.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if status, _ := other.call(http.MethodGet, "/v1/responses/"+id, clientKey); status == http.StatusOK {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the other replica still answers %d for the response", status)
		}
	}

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/responses/%s?stream=true&starting_after=0", other.url, id), nil)
	req.Header.Set("Authorization", "Bearer "+clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("resume on the other replica: %d", resp.StatusCode)
	}
	keepalives, text, terminal := 0, "", ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == ": keepalive" {
			keepalives++
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			text += gjson.Get(d, "delta").Str
			if typ := gjson.Get(d, "type").Str; isTerminal(typ) || typ == "error" {
				terminal = typ
			}
		}
	}
	if terminal != "response.completed" || text != longText {
		t.Fatalf("the resumed stream ended with %q, text %q", terminal, text)
	}
	if keepalives < 3 {
		t.Fatalf("%d keepalives over silences of 300ms with timeouts.keepalive 50ms", keepalives)
	}
	// Each is counted where a live stream's are, and only there: the other
	// replica streams nothing else.
	m := other.metrics()
	if v := metricValue(m, `sluice_keepalives_total{surface="responses_stream"}`); v != float64(keepalives) {
		t.Fatalf("the resumer got %d keepalives, %v counted:\n%s", keepalives, v, grep(m, "keepalives"))
	}
}

// TestResumeKeepalivesAreCounted: a client that resumes a stream running on
// the same gateway gets a ": keepalive" comment every timeouts.keepalive
// while the upstream is silent, and each is counted in
// sluice_keepalives_total under the Responses stream's surface, as those
// the stream's own client gets are.
func TestResumeKeepalivesAreCounted(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{KeepAlive: 50 * time.Millisecond, LifecycleHold: -1}})
	silent := upstreamtest.Answer(longText, 3)
	silent.Gap = 300 * time.Millisecond // silences of several keepalive periods
	h.ups["A"].Enqueue(silent)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live := sseLines(t, ctx, http.MethodPost, h.url+"/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	first := <-live.events
	id := gjson.Get(first, "response.id").Str
	if id == "" {
		t.Fatalf("first event without a response id: %s", first)
	}
	resumed := sseLines(t, ctx, http.MethodGet, fmt.Sprintf("%s/v1/responses/%s?stream=true&starting_after=0", h.url, id), "")
	for range resumed.events {
	}
	for range live.events {
	}
	if resumed.terminal != "response.completed" || live.terminal != "response.completed" {
		t.Fatalf("the stream ended with %q, its resume with %q", live.terminal, resumed.terminal)
	}
	if resumed.keepalives == 0 {
		t.Fatal("no keepalive reached the resumer over silences of 300ms with timeouts.keepalive 50ms")
	}
	m := h.metrics()
	if v, want := metricValue(m, `sluice_keepalives_total{surface="responses_stream"}`), float64(live.keepalives+resumed.keepalives); v != want {
		t.Fatalf("the client got %d keepalives and the resumer %d, %v counted:\n%s", live.keepalives, resumed.keepalives, v, grep(m, "keepalives"))
	}
}

// sseStream is an SSE answer read to its end: its events' data as they
// come, then (once events is closed) its keepalive comments and the type of
// its terminal event.
type sseStream struct {
	events     chan string
	keepalives int
	terminal   string
}

func sseLines(t *testing.T, ctx context.Context, method, url, body string) *sseStream {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clientKey)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("%s %s: %d", method, url, resp.StatusCode)
	}
	s := &sseStream{events: make(chan string, 1024)}
	go func() {
		defer resp.Body.Close()
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if line == ": keepalive" {
				s.keepalives++
			}
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				if typ := gjson.Get(d, "type").Str; isTerminal(typ) || typ == "error" {
					s.terminal = typ
				}
				s.events <- d
			}
		}
	}()
	return s
}

// redisReplicas starts a redis-server and the upstream A, and returns A and
// a maker of gateway replicas with opts that share both: their store and
// resume store are that Redis.
func redisReplicas(t *testing.T, opts gateway.Options) (*upstreamtest.Server, func() *harness) {
	t.Helper()
	_, up, replica := redisReplicasWithServer(t, opts)
	return up, replica
}

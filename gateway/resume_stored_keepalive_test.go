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
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// TestStoredFollowKeepsAliveEveryKeepAlivePeriod: a client that resumes on
// one replica a stream that another runs (following it through a shared
// store) gets a ": keepalive" comment every timeouts.keepalive while the
// upstream is silent, as a resumer on the replica running it does — not
// one every 15s whatever timeouts.keepalive says.
func TestStoredFollowKeepsAliveEveryKeepAlivePeriod(t *testing.T) {
	rd := redistest.Start(t)
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	replica := func() *harness {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: rd.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		o := gateway.Options{KeepAlive: 50 * time.Millisecond, LifecycleHold: -1}
		o.Store, o.Resume.Store = rs, rs
		return newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up}, opts: o})
	}
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
}

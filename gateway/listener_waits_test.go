package gateway_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
)

// sluice_connection_limit_waits_total counts clients that waited for a
// connection slot: reaching limits.max_connections with nobody behind is no
// wait, nor is a client that takes at once the slot of an idle keep-alive
// connection the gateway closes for it, which
// sluice_connection_limit_idle_closed_total counts instead (a client that
// really waits: listener_midrequest_internal_test.go).
func TestConnectionLimitWaitsCountClientsThatWaited(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{MaxConnections: 2, DrainGrace: 100 * time.Millisecond}})
	idle := func() net.Conn { // a keep-alive client between requests: it holds its slot
		t.Helper()
		c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 512)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 200") {
			t.Fatalf("GET /healthz: %q %v", buf[:n], err)
		}
		return c
	}
	// The scrapes share one keep-alive connection: a connection of their
	// own each could find the previous one's slot not yet given back.
	scraper := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	t.Cleanup(scraper.CloseIdleConnections)
	scrape := func(name string) float64 {
		t.Helper()
		resp, err := scraper.Get(h.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		page, _ := io.ReadAll(resp.Body)
		return gaugeValue(string(page), name)
	}
	waits := func() float64 { t.Helper(); return scrape("sluice_connection_limit_waits_total") }

	a := idle()
	// One slot held, the scraper's connection takes the other: the limit
	// is reached, with nobody waiting.
	waits()
	if got := waits(); got != 0 {
		t.Fatalf("%v waits counted with no client waiting", got)
	}

	// Both slots held now (the scraper's and a, both idle between
	// requests): a third client takes a slot at once, which the gateway
	// makes by closing the connection idle longest (listener_idle_test.go).
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(h.url + "/healthz")
	if err != nil {
		t.Fatalf("the waiting client: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the waiting client: %d", resp.StatusCode)
	}
	_ = a.Close()
	if got := waits(); got != 0 {
		t.Fatalf("%v waits counted, want none: the client took an idle connection's slot at once", got)
	}
	if got := scrape("sluice_connection_limit_idle_closed_total"); got != 1 {
		t.Fatalf("%v idle connections counted closed for a new client, want 1", got)
	}
}

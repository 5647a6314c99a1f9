package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// rawHeaderUpstream is an upstream on a raw socket: it lists model "m",
// and answers every POST with a 200 whose header block is header (lines
// ending in \r\n), which net/http's server would not let a handler shape
// freely. posts counts the POSTs.
func rawHeaderUpstream(t *testing.T, header string) (baseURL string, posts *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	posts = &atomic.Int32{}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	t.Cleanup(func() { // the gateway keeps its connections: end them, and every goroutine here
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if req.Method == http.MethodGet {
						list := `{"object":"list","data":[{"id":"m","object":"model"}]}`
						fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(list), list)
						continue
					}
					posts.Add(1)
					body := `{"id":"resp_raw","object":"response","status":"completed","output":[]}`
					fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s", header, len(body), body)
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/v1", posts
}

// An upstream answer's header block is bounded (gateway.MaxUpstreamHeaderBytes,
// SECURITY.md Limits): past it the attempt fails before anything reaches
// the client, which gets the next target's answer, or an OpenAI-shaped
// error naming the cause when no target is left, never the block itself.
func TestUpstreamHeaderBlockIsBounded(t *testing.T) {
	oneBig := "X-Big: " + strings.Repeat("a", gateway.MaxUpstreamHeaderBytes) + "\r\n"
	var many strings.Builder
	for i := 0; many.Len() <= gateway.MaxUpstreamHeaderBytes; i++ {
		fmt.Fprintf(&many, "X-Many-%d: %s\r\n", i, strings.Repeat("b", 100))
	}
	for _, block := range []struct{ name, header string }{{"one big header", oneBig}, {"many headers", many.String()}} {
		for _, fallback := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, fallback %v", block.name, fallback), func(t *testing.T) {
				rawURL, posts := rawHeaderUpstream(t, block.header)
				cfgs := []upstream.Config{{Name: "A", BaseURL: rawURL}}
				targets := []gateway.RouteTarget{{Upstream: "A"}}
				if fallback {
					b := upstreamtest.NewServer(upstreamtest.Options{Name: "B"})
					t.Cleanup(b.Close)
					cfgs = append(cfgs, upstream.Config{Name: "B", BaseURL: b.URL})
					targets = append(targets, gateway.RouteTarget{Upstream: "B"})
				}
				logs := &syncBuffer{}
				logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
				pool, err := upstream.NewPool(cfgs, upstream.Options{Logger: logger})
				if err != nil {
					t.Fatal(err)
				}
				pool.ProbeAll(context.Background())
				gw, err := gateway.New(gateway.Options{Pool: pool, Logger: logger,
					Routes: []gateway.Route{{Models: []string{"m"}, Targets: targets}}})
				if err != nil {
					t.Fatal(err)
				}
				base := serveGateway(t, gw)

				req, _ := http.NewRequest(http.MethodPost, base+"/v1/responses", strings.NewReader(`{"model":"m","input":"hi"}`))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("the client could not read the gateway's answer: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if posts.Load() == 0 {
					t.Fatalf("upstream A was never tried; answer %d %s", resp.StatusCode, body)
				}
				for name := range resp.Header {
					if strings.HasPrefix(name, "X-Big") || strings.HasPrefix(name, "X-Many") {
						t.Fatalf("A's header %s reached the client", name)
					}
				}
				if fallback {
					if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "Hello from B") {
						t.Fatalf("want B's answer, got %d %s", resp.StatusCode, body)
					}
					return
				}
				if resp.StatusCode/100 != 5 {
					t.Fatalf("want a 5xx error, got %d %s", resp.StatusCode, body)
				}
				t.Logf("no target left: %d %s", resp.StatusCode, body)
				e := readError(t, &http.Response{Body: io.NopCloser(strings.NewReader(string(body))), Header: resp.Header})
				if want := fmt.Sprintf("response headers exceeded %d bytes", gateway.MaxUpstreamHeaderBytes); !strings.Contains(e.Error.Message, want) {
					t.Fatalf("the error does not name the cause (%q): %s", want, body)
				}
			})
		}
	}
}

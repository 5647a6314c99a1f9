package gateway_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// A client that leaves a silent stream is noticed by the first keepalive
// flush that fails: until then it holds its slot (a key's concurrent limit)
// and its upstream. A flush error must reach the client stream, not stop
// at the status recorder.
func TestClientGoneIsNoticedByTheFailingKeepAlive(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{KeepAlive: 20 * time.Millisecond}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(3))
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"gpt-fake-1","input":"hi","stream":true}`
	_, _ = conn.Write([]byte("POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
		itoa(int64(len(body))) + "\r\n\r\n" + body))
	br := bufio.NewReader(conn)
	for events := 0; events < 3; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			events++
		}
	}
	_ = conn.Close()
	line := ""
	for deadline := time.Now().Add(20 * time.Second); line == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		line = grepLines(h.logs.String(), "access: request")
	}
	if line == "" {
		t.Fatal("the stream whose client left did not end")
	}
	// The first keepalive after the close is accepted by the kernel (whose
	// answer is a reset); the flush of the second fails and ends the stream.
	// With the flush error lost, the second was counted too and only a third
	// write found the client gone.
	if n := metricValue(h.metrics(), `sluice_keepalives_total{surface="responses_stream"}`); n > 1 {
		t.Fatalf("%v keepalives were counted as written to a client that had left; access line: %s", n, line)
	}
}

// A stream whose client leaves runs on detached (so the client can resume
// it) and the upstream bills it: its usage is counted for the key like any
// other, or leaving and fetching the answer afterwards would take tokens
// past the key's limits. Over HTTP and over a WebSocket, the client reads
// two events and leaves.
func TestDetachedStreamIsMetered(t *testing.T) {
	for _, transport := range []string{"sse", "websocket"} {
		t.Run(transport, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: gateway.Options{Resume: gateway.ResumeOptions{DetachGrace: 5 * time.Second},
				Accounts: gateway.AccountsOptions{Required: true, Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})},
					Usage: openStore(t, t.TempDir())}}})
			h.ups["A"].Enqueue(upstreamtest.Slow(30 * time.Millisecond))
			if transport == "sse" {
				req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(`{"model":"gpt-fake-1","input":"hi","stream":true}`))
				req.Header.Set("Authorization", "Bearer "+teamAKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				r := sse.NewReader(resp.Body, 1<<20)
				for i := 0; i < 2; i++ {
					if _, err := r.Next(); err != nil {
						t.Fatal(err)
					}
				}
				resp.Body.Close()
			} else {
				c := h.dialWS(map[string]string{"Authorization": "Bearer " + teamAKey})
				c.send(createFrame(""))
				for i := 0; i < 2; i++ {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, _, err := c.conn.Read(ctx)
					cancel()
					if err != nil {
						t.Fatal(err)
					}
				}
				c.conn.CloseNow()
			}
			var rep usageReport
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				rep = usageReport{}
				if code := h.getJSON("/admin/usage?key=team-a", &rep); code != 200 {
					t.Fatalf("admin/usage: %d", code)
				}
				if rep.Total.Requests > 0 {
					break
				}
			}
			if rep.Total.Requests != 1 || rep.Total.InputTokens == 0 || rep.Total.OutputTokens == 0 {
				t.Fatalf("a detached stream's usage: %+v\n%s", rep.Total, grepLines(h.logs.String(), "access: request"))
			}
		})
	}
}

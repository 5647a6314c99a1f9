package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestDetachedStreamChargedWhatTheUpstreamSent: a stream whose client left
// after its first delta goes on detached; what the upstream generates then
// is counted for its key like any other stream's (README "Resuming a
// stream"). With no usage from the upstream, the estimate charges one
// output token per delta the upstream sent, not only those the client got.
func TestDetachedStreamChargedWhatTheUpstreamSent(t *testing.T) {
	const deltas = 6
	// Deltas larger than the gateway's write buffer are written to the
	// client's connection one by one, so a client that left is noticed at
	// the first of them, not after the whole answer was buffered.
	events := upstreamtest.ResponsesEvents("resp_detached", "m", strings.Repeat("word ", 6000), deltas)
	last := len(events) - 1
	noUsage, err := sjson.DeleteBytes(events[last], "response.usage")
	if err != nil {
		t.Fatal(err)
	}
	events[last] = noUsage
	firstDelta := -1
	for i, ev := range events {
		if gjson.GetBytes(ev, "type").Str == "response.output_text.delta" {
			firstDelta = i
			break
		}
	}
	clientLeft := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = fmt.Fprint(w, `{"object":"list","data":[{"id":"m","object":"model","created":1,"owned_by":"x"}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		write := func(evs [][]byte) {
			for _, ev := range evs {
				_, _ = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", gjson.GetBytes(ev, "type").Str, ev)
			}
			w.(http.Flusher).Flush()
		}
		write(events[:firstDelta+1])
		select { // the rest is generated after the client left
		case <-clientLeft:
		case <-r.Context().Done():
			return
		}
		write(events[firstDelta+1:])
	}))
	t.Cleanup(up.Close)
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})
	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: up.URL + "/v1"}}, upstream.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	pool.ProbeAll(context.Background())
	gw, err := gateway.New(gateway.Options{Pool: pool, Logger: logger, Resume: gateway.ResumeOptions{DetachGrace: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, url: serveGateway(t, gw), logs: logs}

	c := sendRaw(t, h, "/v1/responses", `{"model":"m","input":"hi","stream":true}`)
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("no text delta: %v", err)
		}
		if strings.Contains(line, "response.output_text.delta") {
			break
		}
	}
	// Leave with a reset: the gateway's next write to the client fails.
	_ = c.SetLinger(0)
	_ = c.Close()
	close(clientLeft)

	waitAccessLine(t, h)
	line := grepLines(logs.String(), "access: request")
	if want := fmt.Sprintf("output_tokens=%d ", deltas); !strings.Contains(line+" ", want) {
		t.Fatalf("the detached stream was charged for what its client got, want %s (every delta the upstream sent):\n%s", want, line)
	}
}

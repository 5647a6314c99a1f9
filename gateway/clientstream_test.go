package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// assertContiguous checks that a Responses stream's sequence_number runs
// 0, 1, 2, … without a gap.
func assertContiguous(t testing.TB, evs []eventLike) {
	t.Helper()
	for i, ev := range evs {
		var v struct {
			SequenceNumber *int64 `json:"sequence_number"`
		}
		_ = json.Unmarshal(ev.data, &v)
		if v.SequenceNumber == nil || *v.SequenceNumber != int64(i) {
			t.Fatalf("event %d (%s) has sequence_number %v: %s", i, ev.typ, v.SequenceNumber, ev.data)
		}
	}
}

// TestOpenAIClientReadsAStreamTheGatewayEnded: the upstream cuts the stream
// after content; openai-go reads the gateway's response.failed without an
// error, and it carries the text already streamed, in an incomplete item,
// numbered after the events before it.
func TestOpenAIClientReadsAStreamTheGatewayEnded(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.CutAfter(6)) // created … two text deltas: "Hello from"
	client := h.client()
	stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "gpt-fake-1",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	var seqs []int64
	var text string
	var last responses.ResponseStreamEventUnion
	for stream.Next() {
		last = stream.Current()
		seqs = append(seqs, last.SequenceNumber)
		if last.Type == "response.output_text.delta" {
			text += last.Delta
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("openai-go stream error: %v", err)
	}
	for i, s := range seqs {
		if s != int64(i) {
			t.Fatalf("sequence numbers %v", seqs)
		}
	}
	if last.Type != "response.failed" || text != "Hello from" {
		t.Fatalf("last event %s, streamed %q", last.Type, text)
	}
	r := last.Response
	if r.Status != "failed" || r.ID == "" || string(r.Error.Code) != "server_error" || !strings.HasPrefix(r.Error.Message, "stream_incomplete: ") {
		t.Fatalf("failed response %s %s %q %q", r.Status, r.ID, r.Error.Code, r.Error.Message)
	}
	if len(r.Output) != 1 || r.Output[0].Type != "message" || r.Output[0].Status != "incomplete" || r.OutputText() != "Hello from" {
		t.Fatalf("output %+v (text %q)", r.Output, r.OutputText())
	}
}

// quotaAfterLifecycle: response.created, response.in_progress, then an
// insufficient_quota error event.
func quotaAfterLifecycle() upstreamtest.Script {
	quota := upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusTooManyRequests,
		upstreamtest.ErrorBody("You exceeded your current quota.", "insufficient_quota", "insufficient_quota", ""))
	return upstreamtest.Script{Frames: append(upstreamtest.CutAfter(2).Frames, quota.Frames...)}
}

// TestQuotaAfterCreatedIsReplayedInvisibly: the lifecycle events are held
// back, so an error right after them finds a client that has seen nothing:
// the request is replayed on the other upstream and the client sees only
// its stream, one response.created — over SSE and WebSocket.
func TestQuotaAfterCreatedIsReplayedInvisibly(t *testing.T) {
	for _, surface := range []string{"sse", "websocket"} {
		t.Run(surface, func(t *testing.T) {
			h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
			h.ups["A"].Enqueue(quotaAfterLifecycle())
			var evs []eventLike
			// Selection rotates: within two requests one tries A first.
			for i := 0; i < 2 && h.ups["A"].Pending() == 1; i++ {
				if surface == "sse" {
					_, evs = h.responsesStream(respBody)
				} else {
					evs = h.dialWS(nil).turn(createFrame(""))
				}
			}
			if h.ups["A"].Pending() != 0 {
				t.Fatal("A was never tried")
			}
			last := assertOneTerminal(t, evs)
			created, text := 0, ""
			for _, ev := range evs {
				var v struct{ Type, Delta string }
				_ = json.Unmarshal(ev.data, &v)
				if v.Type == "response.created" {
					created++
				}
				if v.Type == "error" {
					t.Fatalf("the error reached the client: %s", ev.data)
				}
				text += v.Delta
			}
			if last.typ != "response.completed" || created != 1 || text != "Hello from B" || !strings.Contains(string(evs[0].data), `"resp_B_`) {
				t.Fatalf("client saw %d response.created, %q, ending %s; first %s", created, text, last.typ, evs[0].data)
			}
			assertContiguous(t, evs)
			if m := h.metrics(); !strings.Contains(m, `sluice_upstream_attempts_total{outcome="replayed",upstream="A"} 1`) {
				t.Fatalf("replay not counted:\n%s", grep(m, "upstream_attempts"))
			}
		})
	}
}

// TestLifecycleHoldDeadline: an upstream that sends response.created and
// then thinks for a while: the held events go out at the deadline, not
// with the first content.
func TestLifecycleHoldDeadline(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{LifecycleHold: 50 * time.Millisecond, IdleTimeout: 3 * time.Second}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(2))
	resp := h.post("/v1/responses", respBody)
	defer resp.Body.Close()
	got := make(chan sse.Event, 1)
	go func() {
		ev, _ := sse.NewReader(resp.Body, 1<<20).Next()
		got <- ev.Clone()
	}()
	select {
	case ev := <-got:
		if eventType(ev) != "response.created" {
			t.Fatalf("first event %s", ev.Data)
		}
	case <-time.After(1500 * time.Millisecond): // well before the idle timeout would end the stream
		t.Fatal("response.created was held past the deadline")
	}
}

// TestMalformedEvents: a single unparseable event is skipped and counted
// (the stream completes, numbered without a gap even though the dropped
// event carried a sequence_number); MalformedEvents "fail" fails on the
// first.
func TestMalformedEvents(t *testing.T) {
	t.Run("skip", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		// The fifth event (the first delta) arrives truncated: the rest of
		// the upstream's numbering is one ahead of the client's.
		frames := upstreamtest.ResponsesStream("resp_x", "gpt-fake-1", "Hello there", 3)
		cut := strings.TrimSuffix(string(frames[4].Raw), "\n\n")
		frames[4] = upstreamtest.Frame{Raw: []byte(cut[:len(cut)-5] + "\n\n"), WS: []byte("{")}
		h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames})
		_, evs := h.responsesStream(respBody)
		if last := assertOneTerminal(t, evs); last.typ != "response.completed" || len(evs) != len(frames)-1 {
			t.Fatalf("%d events ending %s", len(evs), last.typ)
		}
		assertContiguous(t, evs)
		if m := h.metrics(); !strings.Contains(m, `sluice_stream_skipped_events_total{reason="unparseable",surface="responses_stream"} 1`) {
			t.Fatalf("skip not counted:\n%s", grep(m, "skipped"))
		}
	})
	t.Run("fail", func(t *testing.T) {
		h := newHarness(t, harnessConfig{opts: gateway.Options{MalformedEvents: "fail"}})
		h.ups["A"].Enqueue(upstreamtest.Garbage())
		_, evs := h.responsesStream(respBody)
		if last := assertOneTerminal(t, evs); last.typ != "response.failed" || last.code != "stream_incomplete" {
			t.Fatalf("terminal %s %s", last.typ, last.code)
		}
		assertContiguous(t, evs)
		if m := h.metrics(); !strings.Contains(m, `sluice_stream_terminal_total{reason="unparseable_event",surface="responses_stream"} 1`) {
			t.Fatalf("%s", grep(m, "stream_terminal"))
		}
	})
	t.Run("chat skip", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		h.ups["A"].Enqueue(upstreamtest.Garbage())
		_, evs := h.streamEvents("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`)
		if len(evs) == 0 || !evs[len(evs)-1].Done || strings.Contains(string(evs[len(evs)-2].Data), `"error"`) {
			t.Fatalf("chat stream with one garbage chunk: %d events", len(evs))
		}
		if m := h.metrics(); !strings.Contains(m, `sluice_stream_skipped_events_total{reason="unparseable",surface="chat_stream"} 1`) {
			t.Fatalf("skip not counted:\n%s", grep(m, "skipped"))
		}
	})
}

// TestChatUpstreamFinishThenSilence: a Chat upstream (behind a Responses
// client) that sent its finish_reason and then hangs without [DONE]: the
// answer is complete.
func TestChatUpstreamFinishThenSilence(t *testing.T) {
	h := newHarness(t, harnessConfig{protocol: map[string]string{"A": "chat"}, opts: gateway.Options{IdleTimeout: 200 * time.Millisecond}})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(5))
	_, evs := h.responsesStream(respBody)
	if last := assertOneTerminal(t, evs); last.typ != "response.completed" {
		t.Fatalf("terminal %s: %s", last.typ, last.data)
	}
	assertContiguous(t, evs)
}

// BenchmarkTimeToFirstEvent: the hold-back costs nothing when content
// follows at once (the canned upstream sends everything without a gap).
// Two gateways, one holding lifecycle events back (the default) and one
// not, are measured interleaved, request by request, so the machine's load
// falls on both alike: ttfe-hold-µs and ttfe-nohold-µs are request → first
// event read by the client.
func BenchmarkTimeToFirstEvent(b *testing.B) {
	hold := newHarness(b, harnessConfig{})
	noHold := newHarness(b, harnessConfig{opts: gateway.Options{LifecycleHold: -1}})
	client := &http.Client{}
	ttfe := func(h *harness) time.Duration {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(respBody))
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := sse.NewReader(resp.Body, 1<<20).Next(); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		_, _ = io.Copy(io.Discard, resp.Body)
		return d
	}
	var withHold, without time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			withHold += ttfe(hold)
			without += ttfe(noHold)
		} else {
			without += ttfe(noHold)
			withHold += ttfe(hold)
		}
	}
	b.ReportMetric(float64(withHold.Microseconds())/float64(b.N), "ttfe-hold-µs")
	b.ReportMetric(float64(without.Microseconds())/float64(b.N), "ttfe-nohold-µs")
	b.ReportMetric(float64(withHold)/float64(without), "hold/nohold")
}

package gateway_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// scriptOf plays evs (Responses event JSON) as SSE events, and as text frames
// on a WebSocket.
func scriptOf(evs [][]byte) upstreamtest.Script {
	frames := make([]upstreamtest.Frame, len(evs))
	for i, ev := range evs {
		frames[i] = upstreamtest.SSEEvent(ev)
	}
	return upstreamtest.Script{Frames: frames}
}

// clientEvents runs one streaming Responses request through h, over SSE or
// a WebSocket, and returns the data of every event the client got.
func clientEvents(t *testing.T, h *harness, client string) [][]byte {
	t.Helper()
	var out [][]byte
	if client == "websocket" {
		for _, ev := range h.dialWS(nil).turn(createFrame("")) {
			out = append(out, ev.data)
		}
		return out
	}
	resp, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, ev := range evs {
		out = append(out, ev.Data)
	}
	return out
}

// TestInvalidUTF8InUpstreamEventsReachesClientsReplaced: bytes that are not
// UTF-8 inside an upstream event's strings, from an SSE or a WebSocket
// upstream, reach neither an SSE client nor a WebSocket client (whose text
// frames must be UTF-8, RFC 6455: strict clients drop the socket before the
// terminal event). Each becomes U+FFFD, the same in the delta, the done text
// and the terminal Response, and the stream ends completed.
func TestInvalidUTF8InUpstreamEventsReachesClientsReplaced(t *testing.T) {
	const want = "bad \uFFFD\uFFFD utf ok"
	for _, upstreamTransport := range []string{"http", "websocket"} {
		for _, client := range []string{"sse", "websocket"} {
			t.Run(upstreamTransport+"_upstream/"+client+"_client", func(t *testing.T) {
				h := newHarness(t, harnessConfig{transport: map[string]string{"A": upstreamTransport}})
				evs := upstreamtest.ResponsesEvents("resp_badutf8", "gpt-fake-1", "bad QQ utf ok", 3)
				for i, ev := range evs {
					evs[i] = bytes.ReplaceAll(ev, []byte("QQ"), []byte("\xff\xfe"))
				}
				h.ups["A"].Enqueue(scriptOf(evs))
				got := clientEvents(t, h, client)
				var deltas strings.Builder
				var done, final string
				terminals := 0
				for i, data := range got {
					if !utf8.Valid(data) {
						t.Fatalf("event %d is not UTF-8: %q", i, data)
					}
					switch typ := gjson.GetBytes(data, "type").Str; typ {
					case "response.output_text.delta":
						deltas.WriteString(gjson.GetBytes(data, "delta").Str)
					case "response.output_text.done":
						done = gjson.GetBytes(data, "text").Str
					case "response.completed", "response.failed", "response.incomplete":
						terminals++
						final = gjson.GetBytes(data, "response.output.0.content.0.text").Str
						if typ != "response.completed" {
							t.Fatalf("the stream ended %s: %s", typ, data)
						}
					}
				}
				if terminals != 1 || deltas.String() != want || done != want || final != want {
					t.Fatalf("%d terminal events; deltas %q, done %q, final %q; want %q", terminals, deltas.String(), done, final, want)
				}
			})
		}
	}
}

// TestInvalidUTF8InChatChunksReachesClientsReplaced: a Chat stream's
// chunks are repaired alike.
func TestInvalidUTF8InChatChunksReachesClientsReplaced(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	chunks := upstreamtest.ChatChunks("chatcmpl-bad", "gpt-fake-1", "bad QQ utf ok", 3)
	frames := make([]upstreamtest.Frame, 0, len(chunks)+1)
	for _, c := range chunks {
		frames = append(frames, upstreamtest.SSEData(bytes.ReplaceAll(c, []byte("QQ"), []byte("\xff\xfe"))))
	}
	frames = append(frames, upstreamtest.SSEData([]byte("[DONE]")))
	h.ups["A"].Enqueue(upstreamtest.Script{ChatFrames: frames})
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	var text strings.Builder
	for i, ev := range evs {
		if !utf8.Valid(ev.Data) {
			t.Fatalf("chunk %d is not UTF-8: %q", i, ev.Data)
		}
		text.WriteString(gjson.GetBytes(ev.Data, "choices.0.delta.content").Str)
	}
	if want := "bad \uFFFD\uFFFD utf ok"; text.String() != want || len(evs) == 0 || !evs[len(evs)-1].Done {
		t.Fatalf("content %q, want %q (%d chunks)", text.String(), want, len(evs))
	}
}

// TestStreamShowsOneResponseID: an upstream whose lifecycle or terminal
// event names another response id, or that sends a second response.created
// with another id mid-stream, still shows the client one response
// (docs/ARCHITECTURE.md §3: the client-visible id is the first one shown):
// the second response.created is dropped and counted, a lifecycle event
// carries the first id, every Response the client gets names the first id,
// and sequence_number stays contiguous. A terminal event naming another id
// is not this stream's end: without a route to continue on, the stream ends
// with the gateway's stream_incomplete (TestTerminalEventOfAnotherResponseIsACut).
func TestStreamShowsOneResponseID(t *testing.T) {
	base := func() [][]byte {
		return upstreamtest.ResponsesEvents("resp_first", "gpt-fake-1", "one two three", 3)
	}
	otherID := func(ev []byte) []byte {
		return bytes.ReplaceAll(ev, []byte(`"id":"resp_first"`), []byte(`"id":"resp_OTHER"`))
	}
	cases := map[string]func() [][]byte{
		"terminal_names_another": func() [][]byte {
			evs := base()
			evs[len(evs)-1] = otherID(evs[len(evs)-1])
			return evs
		},
		"in_progress_names_another": func() [][]byte {
			evs := base()
			evs[1] = otherID(evs[1])
			return evs
		},
		"in_progress_and_terminal_name_another": func() [][]byte {
			evs := base()
			evs[1] = otherID(evs[1])
			evs[len(evs)-1] = otherID(evs[len(evs)-1])
			return evs
		},
		"second_created": func() [][]byte {
			evs := base()
			second := otherID(evs[0])
			// After the first delta (created, in_progress, item added, part added, delta).
			return append(evs[:5:5], append([][]byte{second}, evs[5:]...)...)
		},
	}
	for name, events := range cases {
		for _, client := range []string{"sse", "websocket"} {
			t.Run(name+"/"+client, func(t *testing.T) {
				// An SSE upstream for both clients: on an upstream WebSocket,
				// an event of another response means the socket is out of
				// step, and the stream is cut instead
				// (TestWebSocketUpstreamEventOfAnotherResponseClosesTheSocket).
				h := newHarness(t, harnessConfig{})
				h.ups["A"].Enqueue(scriptOf(events()))
				got := clientEvents(t, h, client)
				created, ids := 0, map[string]bool{}
				for i, data := range got {
					if n := gjson.GetBytes(data, "sequence_number").Int(); n != int64(i) {
						t.Fatalf("event %d has sequence_number %d", i, n)
					}
					typ := gjson.GetBytes(data, "type").Str
					if typ == "response.created" {
						created++
					}
					if id := gjson.GetBytes(data, "response.id"); id.Exists() {
						ids[id.Str] = true
					}
				}
				last := gjson.GetBytes(got[len(got)-1], "type").Str
				wantLast := "response.completed"
				if strings.Contains(name, "terminal") {
					wantLast = "response.failed"
					if msg := gjson.GetBytes(got[len(got)-1], "response.error.message").Str; !strings.HasPrefix(msg, "stream_incomplete: ") {
						t.Fatalf("the stream failed with %q, want stream_incomplete", msg)
					}
				}
				if created != 1 || len(ids) != 1 || ids["resp_OTHER"] || last != wantLast {
					t.Fatalf("%d response.created, response ids %v, last %s (want %s):\n%s", created, ids, last, wantLast, bytes.Join(got, []byte("\n")))
				}
				if name == "second_created" {
					want := fmt.Sprintf(`sluice_stream_skipped_events_total{reason="second_created",surface="%s"} 1`,
						map[string]string{"sse": "responses_stream", "websocket": "websocket"}[client])
					if m := h.metrics(); !strings.Contains(m, want) {
						t.Fatalf("metrics lack %s:\n%s", want, grepLines(m, "skipped"))
					}
				}
			})
		}
	}
}

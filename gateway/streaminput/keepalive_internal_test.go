package streaminput

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedWriter is a reader's connection whose bytes the test reads while
// serve writes them.
type lockedWriter struct {
	mu     sync.Mutex
	header http.Header
	body   bytes.Buffer
}

func (w *lockedWriter) Header() http.Header { return w.header }
func (w *lockedWriter) WriteHeader(int)     {}
func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(p)
}
func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.String()
}

// TestQuietReaderGetsKeepalivesBetweenEvents: a reader of an event-stream
// answer that gets no byte for keepAlive gets an SSE comment, but only
// between events: while an event is half written (its runner went quiet
// in the middle of it), a comment would be a line inside it.
func TestQuietReaderGetsKeepalivesBetweenEvents(t *testing.T) {
	r := newResult(template{stream: true, body: []byte(`{"model":"m"}`)}, 1<<20, 64)
	r.Header().Set("Content-Type", "text/event-stream")
	r.WriteHeader(http.StatusOK)
	first := `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_k","object":"response","created_at":1,"model":"m","status":"in_progress","output":[]}}` + "\n\n"
	_, _ = r.Write([]byte(first))

	w := &lockedWriter{header: http.Header{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan struct{})
	go func() {
		defer close(served)
		r.serve(ctx, w, serveOptions{startingAfter: -1, keepAlive: 10 * time.Millisecond})
	}()
	waitFor := func(what string, ok func(string) bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(w.String()); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the reader got %q", what, w.String())
			}
		}
	}
	waitFor("a keepalive after the first event", func(s string) bool { return strings.HasPrefix(s, first+": keepalive\n\n") })

	half := `data: {"type":"response.in_progress",`
	_, _ = r.Write([]byte(half))
	waitFor("the half event", func(s string) bool { return strings.HasSuffix(s, half) })
	time.Sleep(100 * time.Millisecond) // ten keepalive periods inside the event
	if got := w.String(); !strings.HasSuffix(got, half) {
		t.Fatalf("a comment was written inside an event: %q", got)
	}
	_, _ = r.Write([]byte(`"sequence_number":1}` + "\n\n"))
	waitFor("a keepalive after the event ends", func(s string) bool {
		return strings.Contains(s, half+`"sequence_number":1}`+"\n\n: keepalive\n\n")
	})
	r.end()
	<-served
}

// TestCommentFilterKeepsEventsOnly: the SSE comments a dispatch handler
// writes into an answer are not recorded, whole or in pieces, between
// events (with the blank line that ends them) or inside one (the event
// staying whole); every other byte is, whatever the write boundaries.
func TestCommentFilterKeepsEventsOnly(t *testing.T) {
	ev := "event: response.output_text.delta\ndata: {\"delta\":\": not a comment\"}\n\n"
	for _, tc := range []struct{ name, in, want string }{
		{"no comment", ev + ev, ev + ev},
		{"a keepalive first", ": keepalive\n\n" + ev, ev},
		{"keepalives between events", ev + ": keepalive\n\n" + ev + ": keepalive\n\n: keepalive\n\n", ev + ev},
		{"comment lines in a row", ev + ": a\n: b\n\n" + ev, ev + ev},
		{"a comment opening an event", ": note\n" + ev, ev},
		{"a comment inside an event", "event: x\n: note\ndata: {}\n\n", "event: x\ndata: {}\n\n"},
		{"an empty comment", ":\n\n" + ev, ev},
		{"CRLF lines", ": keepalive\r\n\r\n" + ev, ev},
		{"a Chat stream", "data: {\"a\":1}\n\n: keepalive\n\ndata: [DONE]\n\n", "data: {\"a\":1}\n\ndata: [DONE]\n\n"},
		{"a colon inside a line", "data: a: b\n\n", "data: a: b\n\n"},
		{"a blank line of its own", ev + "\n" + ev, ev + "\n" + ev},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var whole commentFilter
			if got := string(whole.strip([]byte(tc.in))); got != tc.want {
				t.Fatalf("in one write: %q, want %q", got, tc.want)
			}
			for size := 1; size < len(tc.in); size++ {
				var f commentFilter
				var got []byte
				for in := []byte(tc.in); len(in) > 0; in = in[min(size, len(in)):] {
					got = append(got, f.strip(in[:min(size, len(in))])...)
				}
				if string(got) != tc.want {
					t.Fatalf("in writes of %d bytes: %q, want %q", size, got, tc.want)
				}
			}
		})
	}
}

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

package streaminput

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// stallingWriter is a reader's connection that takes the first write and
// then stalls until released, so the answer can run past it.
type stallingWriter struct {
	header  http.Header
	body    bytes.Buffer
	took    chan struct{} // closed at the first write
	release chan struct{}
}

func (w *stallingWriter) Header() http.Header { return w.header }
func (w *stallingWriter) WriteHeader(int)     {}
func (w *stallingWriter) Write(p []byte) (int, error) {
	first := w.body.Len() == 0
	w.body.Write(p)
	if first {
		close(w.took)
		<-w.release
	}
	return len(p), nil
}

// TestLostReaderTerminalFollowsItsLastEvent: a result reader that fell
// behind the replay buffer gets a response.failed numbered right after the
// last event it got, naming the response it was shown.
func TestLostReaderTerminalFollowsItsLastEvent(t *testing.T) {
	r := newResult(template{stream: true, model: "alias", body: []byte(`{"model":"alias"}`)}, 200, 64)
	r.Header().Set("Content-Type", "text/event-stream")
	r.WriteHeader(http.StatusOK)
	created := `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_x","object":"response","created_at":7,"model":"real-model","status":"in_progress","output":[]}}` + "\n\n"
	_, _ = r.Write([]byte(created))

	w := &stallingWriter{header: http.Header{}, took: make(chan struct{}), release: make(chan struct{})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		r.serve(context.Background(), w, serveOptions{startingAfter: -1, lost: func() *apierr.Error {
			return apierr.StreamIncomplete("this reader fell behind")
		}})
	}()
	<-w.took
	for i := 1; i <= 10; i++ { // well past the buffer while the reader stalls
		_, _ = r.Write([]byte(`data: {"type":"response.in_progress","sequence_number":` + strconv.Itoa(i) + "}\n\n"))
	}
	close(w.release)
	<-served

	got := w.body.String()
	rest, ok := strings.CutPrefix(got, created+"\n\nevent: response.failed\ndata: ")
	if !ok {
		t.Fatalf("the reader got %q", got)
	}
	ev := gjson.Parse(strings.TrimSpace(rest))
	if ev.Get("sequence_number").Raw != "1" || ev.Get("response.id").Str != "resp_x" || ev.Get("response.created_at").Raw != "7" ||
		ev.Get("response.model").Str != "real-model" || ev.Get("response.error.code").Str != "server_error" ||
		!strings.HasPrefix(ev.Get("response.error.message").Str, "stream_incomplete: ") {
		t.Fatalf("lost reader's terminal event: %s", rest)
	}
}

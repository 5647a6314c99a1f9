package streaminput_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// streamEvent is what these tests read of a Responses event.
type streamEvent struct {
	Type     string `json:"type"`
	Seq      int64  `json:"sequence_number"`
	Response struct {
		ID     string          `json:"id"`
		Status string          `json:"status"`
		Error  json.RawMessage `json:"error"`
	} `json:"response"`
}

func decodeEvent(t testing.TB, ev sse.Event) streamEvent {
	t.Helper()
	var v streamEvent
	mustJSON(t, ev.Data, &v)
	return v
}

// openStream sends a GET with the client's key and returns the response,
// read as SSE when it is a stream.
func (e *env) openStream(path string) (*http.Response, *sse.Reader) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.url+path, nil)
	req.Header.Set("Authorization", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp, sse.NewReader(resp.Body, 1<<20)
}

// nextEvent reads the next event of a stream that must have one.
func nextEvent(t testing.TB, what string, r *sse.Reader) (sse.Event, streamEvent) {
	t.Helper()
	ev, err := r.Next()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	ev = ev.Clone()
	return ev, decodeEvent(t, ev)
}

// TestDeleteSessionCancelsItsResponse: DELETE of a session whose answer
// streams cancels the response the way DELETE /v1/responses/{id} does,
// whether the gateway keeps a stream running after its client went away
// (detach_grace) or not: the upstream request stops at once, and the
// session's result reader, a reader resuming the response by its id and
// GET of the response all see it end cancelled, with the same terminal
// event.
func TestDeleteSessionCancelsItsResponse(t *testing.T) {
	for _, grace := range []time.Duration{0, time.Hour} {
		t.Run("detach_grace="+grace.String(), func(t *testing.T) {
			e := newEnv(t, envConfig{resume: gateway.ResumeOptions{DetachGrace: grace}})
			e.up.Enqueue(upstreamtest.HangAfter(3))
			id := e.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
			e.mustChunk(id, textChunk(0, "x", false))

			_, result := e.openStream(streaminput.PathPrefix + "/" + id + "/result")
			_, created := nextEvent(t, "result", result)
			respID := created.Response.ID
			if created.Type != "response.created" || respID == "" {
				t.Fatalf("first event: %+v", created)
			}
			for range 2 {
				nextEvent(t, "result", result)
			}
			resumeResp, resumer := e.openStream("/v1/responses/" + respID + "?stream=true")
			if resumeResp.StatusCode != http.StatusOK {
				t.Fatalf("resume: %d", resumeResp.StatusCode)
			}
			for range 3 {
				nextEvent(t, "resumer", resumer)
			}

			if code, b := e.do(http.MethodDelete, streaminput.PathPrefix+"/"+id, ""); code != http.StatusOK {
				t.Fatalf("delete: %d %s", code, b)
			}
			eventually(t, 10*time.Second, "the upstream request is cancelled", func() bool { return e.upIn.Load() == 0 })

			evR, endR := nextEvent(t, "result after delete", result)
			evF, _ := nextEvent(t, "resumer after delete", resumer)
			if endR.Type != "response.failed" || endR.Response.Status != "cancelled" || endR.Seq != 3 {
				t.Fatalf("result reader's terminal: %s", evR.Data)
			}
			if string(evF.Data) != string(evR.Data) {
				t.Fatalf("the resumer's terminal %s differs from the result reader's %s", evF.Data, evR.Data)
			}
			for name, r := range map[string]*sse.Reader{"result": result, "resumer": resumer} {
				if ev, err := r.Next(); err != io.EOF {
					t.Fatalf("%s went on after its terminal event: %s %v", name, ev.Data, err)
				}
			}
			code, b := e.do(http.MethodGet, "/v1/responses/"+respID, "")
			var got struct {
				Status string `json:"status"`
			}
			mustJSON(t, b, &got)
			if code != http.StatusOK || got.Status != "cancelled" {
				t.Fatalf("GET the response: %d %s", code, b)
			}
			if code, _ := e.status(id); code != http.StatusNotFound {
				t.Fatalf("status after delete: %d", code)
			}
		})
	}
}

// TestDeleteSessionBeforeItsResponseBegins: a session deleted while its
// request waits for the upstream's first byte still gives its reader one
// terminal event, and the upstream request stops at once.
func TestDeleteSessionBeforeItsResponseBegins(t *testing.T) {
	e := newEnv(t, envConfig{resume: gateway.ResumeOptions{DetachGrace: time.Hour}})
	e.up.Enqueue(upstreamtest.Script{Latency: time.Hour})
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	e.mustChunk(id, textChunk(0, "x", false))
	eventually(t, 10*time.Second, "upstream request in flight", func() bool { return e.upIn.Load() == 1 })
	done := make(chan []sse.Event, 1)
	go func() { _, evs, _ := e.result(id, ""); done <- evs }()
	time.Sleep(50 * time.Millisecond) // lets the reader attach (either way is checked below)
	if code, b := e.do(http.MethodDelete, streaminput.PathPrefix+"/"+id, ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, b)
	}
	eventually(t, 10*time.Second, "the upstream request is cancelled", func() bool { return e.upIn.Load() == 0 })
	// The reader attached before the delete: the response it was shown
	// ends cancelled, as one that had begun does. (One that came after the
	// delete got a 404 JSON error, no events.)
	evs := <-done
	if len(evs) > 0 {
		last := decodeEvent(t, evs[len(evs)-1])
		if len(evs) != 2 || eventType(evs[0]) != "response.created" || last.Type != "response.failed" || last.Response.Status != "cancelled" ||
			string(last.Response.Error) != "null" {
			t.Fatalf("result after delete: %v, ending %s", eventTypes(evs), evs[len(evs)-1].Data)
		}
	}
}

// TestResultStartingAfterAheadOfTheAnswer: starting_after follows the rule
// of the gateway's own resume. A reader ahead of a live answer waits for
// the event after its number; one past the last event of an ended answer
// gets 400 invalid_value; one at the last event gets an empty stream.
func TestResultStartingAfterAheadOfTheAnswer(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.up.Enqueue(upstreamtest.Script{Text: strings.Repeat("word ", 60), Deltas: 60, Gap: 20 * time.Millisecond})
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	e.mustChunk(id, textChunk(0, "x", true))

	// Attached early in the answer, the reader asks for what follows 50.
	_, first := e.openStream(streaminput.PathPrefix + "/" + id + "/result")
	nextEvent(t, "first reader", first)
	resp, evs, body := e.result(id, "?starting_after=50")
	if resp.StatusCode != http.StatusOK || len(evs) == 0 {
		t.Fatalf("starting_after=50: %d %s", resp.StatusCode, body)
	}
	for i, ev := range evs {
		if got := decodeEvent(t, ev).Seq; got != int64(51+i) {
			t.Fatalf("starting_after=50: event %d is numbered %d (%v)", i, got, eventTypes(evs))
		}
	}
	last := decodeEvent(t, evs[len(evs)-1])
	if last.Type != "response.completed" {
		t.Fatalf("starting_after=50 did not end with the terminal event: %v", eventTypes(evs))
	}

	// The answer has ended.
	if resp, evs, body := e.result(id, "?starting_after="+strconv.FormatInt(last.Seq, 10)); resp.StatusCode != http.StatusOK || len(evs) != 0 {
		t.Fatalf("starting_after at the terminal event: %d %v %s", resp.StatusCode, eventTypes(evs), body)
	}
	for _, after := range []int64{last.Seq + 1, 1000} {
		resp, _, body := e.result(id, "?starting_after="+strconv.FormatInt(after, 10))
		if ae := decodeError(t, body); resp.StatusCode != http.StatusBadRequest || ae.code() != "invalid_value" || ae.param() != "starting_after" {
			t.Fatalf("starting_after=%d after the end: %d %s", after, resp.StatusCode, body)
		}
	}
}

// runningChild is TestRestartChild's "running" mode: a session whose
// answer is streaming, read by a reader that has seen its first events
// when the process is killed. It prints the session and the sequence
// numbers the reader saw.
func runningChild(e *env) {
	e.up.SetDefault(upstreamtest.HangAfter(3))
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	e.mustChunk(id, textChunk(0, "run", false))
	fmt.Printf("SESSION %s\n", id)
	_, r := e.openStream(streaminput.PathPrefix + "/" + id + "/result")
	for range 3 {
		_, ev := nextEvent(e.t, "child reader", r)
		fmt.Printf("SEEN %d\n", ev.Seq)
	}
	fmt.Println("READY")
	time.Sleep(time.Minute) // killed long before
}

// TestRestartResumedReaderDoesNotJoinTheNewAnswer: after a crash the
// request of a running session is sent again, as a new response. A reader
// that comes back with the sequence number it reached in the lost answer
// is refused (410 result_unavailable) rather than given the events of the
// new answer that follow that number; read from the start, the new answer
// is whole.
func TestRestartResumedReaderDoesNotJoinTheNewAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	var id string
	seen := int64(-1)
	for _, line := range childLines(t, dir, "running") {
		switch {
		case strings.HasPrefix(line, "SESSION "):
			id = strings.TrimPrefix(line, "SESSION ")
		case strings.HasPrefix(line, "SEEN "):
			seen, _ = strconv.ParseInt(strings.TrimPrefix(line, "SEEN "), 10, 64)
		}
	}
	if id == "" || seen != 2 {
		t.Fatalf("child: session %q seen %d", id, seen)
	}

	e := newEnv(t, envConfig{dir: dir})
	resp, evs, body := e.result(id, "?starting_after="+strconv.FormatInt(seen, 10))
	if ae := decodeError(t, body); resp.StatusCode != http.StatusGone || ae.code() != streaminput.CodeResultGone || ae.param() != "starting_after" {
		t.Fatalf("resuming the lost answer: %d %v %s", resp.StatusCode, eventTypes(evs), body)
	}

	_, evs, _ = e.result(id, "")
	first, last := decodeEvent(t, evs[0]), decodeEvent(t, evs[len(evs)-1])
	if first.Type != "response.created" || first.Seq != 0 || last.Type != "response.completed" {
		t.Fatalf("the new answer: %v", eventTypes(evs))
	}
	for i, ev := range evs {
		if got := decodeEvent(t, ev).Seq; got != int64(i) {
			t.Fatalf("the new answer's event %d is numbered %d", i, got)
		}
	}
	// The refusal stands for every reader with starting_after: nothing
	// tells which answer the number counts in.
	if resp, _, body := e.result(id, "?starting_after=1"); resp.StatusCode != http.StatusGone {
		t.Fatalf("starting_after on the new answer: %d %s", resp.StatusCode, body)
	}
}

// TestSharedDeleteThroughAnotherReplicaCancelsTheResponse: a session
// deleted through another replica than the one running its answer cancels
// the response there too, instead of leaving it running for detach_grace.
func TestSharedDeleteThroughAnotherReplicaCancelsTheResponse(t *testing.T) {
	r := replicasWith(t, 2, redistest.Start(t), gateway.ResumeOptions{DetachGrace: time.Hour})
	r1, r2 := r[0], r[1]
	r1.up.Enqueue(upstreamtest.Script{Text: strings.Repeat("word ", 100), Deltas: 100, Gap: 20 * time.Millisecond})
	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	r1.mustChunk(id, textChunk(0, "x", false))

	_, result := r1.openStream(streaminput.PathPrefix + "/" + id + "/result")
	_, created := nextEvent(t, "result", result)
	if created.Type != "response.created" {
		t.Fatalf("first event: %+v", created)
	}
	if code, b := r2.do(http.MethodDelete, streaminput.PathPrefix+"/"+id, ""); code != http.StatusOK {
		t.Fatalf("delete on replica 2: %d %s", code, b)
	}
	var ev sse.Event
	var end streamEvent
	for end.Type != "response.failed" && end.Type != "response.completed" {
		ev, end = nextEvent(t, "result on replica 1", result)
	}
	if end.Response.Status != "cancelled" {
		t.Fatalf("replica 1's reader ended with %s", ev.Data)
	}
	code, b := r1.do(http.MethodGet, "/v1/responses/"+created.Response.ID, "")
	var got struct {
		Status string `json:"status"`
	}
	mustJSON(t, b, &got)
	if code != http.StatusOK || got.Status != "cancelled" {
		t.Fatalf("GET the response on replica 1: %d %s", code, b)
	}
}

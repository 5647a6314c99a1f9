package streaminput_test

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

func TestOrderingDuplicatesAndConflicts(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{ReorderWindow: 4}})
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))

	// Out of order: 2 is buffered until 0 and 1 arrive.
	if a := e.mustChunk(id, textChunk(2, "c", false)); a.NextSequenceID != 0 || a.Duplicate || a.Started {
		t.Fatalf("chunk 2: %+v", a)
	}
	if _, st := e.status(id); !slices.Equal(st.BufferedSequenceIDs, []uint64{2}) || st.NextSequenceID != 0 {
		t.Fatalf("status after 2: %+v", st)
	}
	if a := e.mustChunk(id, textChunk(0, "a", false)); a.NextSequenceID != 1 {
		t.Fatalf("chunk 0: %+v", a)
	}
	// The same chunk again is acknowledged again and changes nothing.
	if a := e.mustChunk(id, textChunk(0, "a", false)); !a.Duplicate || a.NextSequenceID != 1 || a.ReceivedBytes != 2 {
		t.Fatalf("duplicate chunk 0: %+v", a)
	}
	// Same id, another payload: conflict.
	if code, _, ae := e.chunk(id, textChunk(0, "X", false)); code != http.StatusConflict || ae.code() != streaminput.CodeSequenceConflict || ae.param() != "sequence_id" {
		t.Fatalf("conflicting chunk 0: %d %+v", code, ae)
	}
	// Beyond the reorder window (next 1 + window 4).
	if code, _, ae := e.chunk(id, textChunk(5, "far", false)); code != http.StatusConflict || ae.code() != streaminput.CodeOutOfWindow {
		t.Fatalf("chunk beyond the window: %d %+v", code, ae)
	}
	// Finishing with a gap is refused.
	code, b := e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", "")
	if ae := decodeError(t, b); code != http.StatusConflict || ae.code() != streaminput.CodeSequenceGap || !strings.Contains(ae.Error.Message, "1") {
		t.Fatalf("finish with a gap: %d %s", code, b)
	}
	if a := e.mustChunk(id, textChunk(1, "b", false)); a.NextSequenceID != 3 || a.Started {
		t.Fatalf("chunk 1: %+v", a)
	}
	// Malformed chunks: OpenAI-style 400s naming the field.
	for body, param := range map[string]string{
		`{"modality":"text","payload":"x"}`:                    "sequence_id",
		`{"sequence_id":-1,"payload":"x"}`:                     "sequence_id",
		`{"sequence_id":1.5,"payload":"x"}`:                    "sequence_id",
		`{"sequence_id":3,"modality":"video","payload":"x"}`:   "modality",
		`{"sequence_id":3,"modality":"audio","payload":"%%%"}`: "payload",
		`{"sequence_id":3}`:                                    "payload",
		`{"sequence_id":3,"payload":"x","end_of_input":"yes"}`: "end_of_input",
	} {
		code, _, ae := e.chunk(id, body)
		if code != http.StatusBadRequest || ae.param() != param || ae.Error.Type != "invalid_request_error" {
			t.Errorf("chunk %s: %d %+v, want 400 param %s", body, code, ae, param)
		}
	}
	if code, _, ae := e.chunk(id, `not json`); code != http.StatusBadRequest || ae.code() != "invalid_json" {
		t.Errorf("invalid JSON chunk: %d %+v", code, ae)
	}

	// Finish, twice: the second is a no-op with the same answer.
	var st1, st2 streaminput.SessionStatus
	code, b = e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", "")
	if code != http.StatusOK {
		t.Fatalf("finish: %d %s", code, b)
	}
	mustJSON(t, b, &st1)
	code, b = e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", `{}`)
	if code != http.StatusOK {
		t.Fatalf("finish again: %d %s", code, b)
	}
	mustJSON(t, b, &st2)
	if st1.State != "finished" || !st1.Started || st2.State != "finished" || st2.NextSequenceID != 3 || *st2.EndSequenceID != 2 {
		t.Fatalf("finish: %+v then %+v", st1, st2)
	}
	// After finish: a new chunk is refused, a retransmitted one is still fine.
	if code, _, ae := e.chunk(id, textChunk(3, "d", false)); code != http.StatusConflict || ae.code() != streaminput.CodeSessionFinished {
		t.Fatalf("chunk after finish: %d %+v", code, ae)
	}
	if a := e.mustChunk(id, textChunk(1, "b", false)); !a.Duplicate {
		t.Fatalf("retransmission after finish: %+v", a)
	}

	// The upstream saw the chunks in sequence order, once.
	req := e.upstreamRequest(0)
	if got := inputOf(t, req.Body); got != "Q: abc" {
		t.Fatalf("upstream input %q, want %q", got, "Q: abc")
	}
	if req.Header.Get("Authorization") != clientKey {
		t.Fatalf("the upstream request lost the client's Authorization: %q", req.Header.Get("Authorization"))
	}
	resp, evs, _ := e.result(id, "")
	if resp.StatusCode != http.StatusOK || len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("result: %d %v", resp.StatusCode, eventTypes(evs))
	}
	if resp.Header.Get("X-Streaming-Input-Chunks") != "3" || resp.Header.Get("X-Streaming-Input-Complete") != "true" {
		t.Fatalf("result headers: %v", resp.Header)
	}
	if e.up.RequestCount() != 1 {
		t.Fatalf("upstream requests: %d", e.up.RequestCount())
	}
}

func TestEndOfInputOutOfOrder(t *testing.T) {
	e := newEnv(t, envConfig{})
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	if a := e.mustChunk(id, textChunk(2, "!", true)); a.State != "open" || a.Started {
		t.Fatalf("end chunk first: %+v", a)
	}
	// Nothing may follow the end, and the end cannot move.
	if code, _, ae := e.chunk(id, textChunk(3, "x", false)); code != http.StatusConflict || ae.code() != streaminput.CodeSessionFinished {
		t.Fatalf("chunk after the end: %d %+v", code, ae)
	}
	if code, _, ae := e.chunk(id, textChunk(1, "x", true)); code != http.StatusConflict || ae.code() != streaminput.CodeSessionFinished {
		t.Fatalf("second end: %d %+v", code, ae)
	}
	e.mustChunk(id, textChunk(1, " there", false))
	if a := e.mustChunk(id, textChunk(0, "hi", false)); a.State != "finished" || !a.Started {
		t.Fatalf("last missing chunk: %+v", a)
	}
	if got := inputOf(t, e.upstreamRequest(0).Body); got != "Q: hi there!" {
		t.Fatalf("upstream input %q", got)
	}
}

func TestUnknownSessionAndOtherKeys(t *testing.T) {
	e := newEnv(t, envConfig{})
	for _, p := range []struct{ method, path, body string }{
		{http.MethodGet, "/sis_nope", ""},
		{http.MethodDelete, "/sis_nope", ""},
		{http.MethodPost, "/sis_nope/chunks", textChunk(0, "x", false)},
		{http.MethodPost, "/sis_nope/finish", ""},
		{http.MethodGet, "/sis_nope/result", ""},
	} {
		code, b := e.do(p.method, streaminput.PathPrefix+p.path, p.body)
		if ae := decodeError(t, b); code != http.StatusNotFound || ae.code() != "not_found" {
			t.Errorf("%s %s: %d %s", p.method, p.path, code, b)
		}
	}
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	// A session belongs to the key that created it.
	if code, _ := e.doKey("Bearer sk-someone-else", http.MethodGet, streaminput.PathPrefix+"/"+id, ""); code != http.StatusNotFound {
		t.Fatalf("another key sees the session: %d", code)
	}
	if code, _ := e.doKey("", http.MethodPost, streaminput.PathPrefix+"/"+id+"/chunks", textChunk(0, "x", false)); code != http.StatusNotFound {
		t.Fatalf("no key can write the session: %d", code)
	}
	// Wrong methods and paths.
	if code, b := e.do(http.MethodPut, streaminput.PathPrefix+"/"+id+"/chunks", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("PUT chunks: %d %s", code, b)
	}
	if code, b := e.do(http.MethodGet, streaminput.PathPrefix+"/"+id+"/nope", ""); code != http.StatusNotFound {
		t.Fatalf("unknown action: %d %s", code, b)
	}
}

func TestCreateValidation(t *testing.T) {
	e := newEnv(t, envConfig{})
	for body, param := range map[string]string{
		`{"template":{"model":"m"},"endpoint":"/v1/embeddings"}`:                           "endpoint",
		`{"endpoint":"/v1/responses"}`:                                                     "template",
		`{"template":{"input":"x"}}`:                                                       "template.model",
		`{"template":{"model":"m","stream":"yes"}}`:                                        "template.stream",
		`{"template":{"model":"m"},"start_policy":"eventually"}`:                           "start_policy",
		`{"template":{"model":"m"},"start_policy":"on_min_length:0"}`:                      "start_policy",
		`{"template":{"model":"m"},"chunk":{"sequence_id":0,"modality":"x","payload":""}}`: "chunk.modality",
		`{"template":{"model":"m","messages":{}},"endpoint":"/v1/chat/completions"}`:       "template.messages",
	} {
		code, b := e.do(http.MethodPost, streaminput.PathPrefix, body)
		if ae := decodeError(t, b); code != http.StatusBadRequest || ae.param() != param {
			t.Errorf("create %s: %d %s, want 400 param %s", body, code, b, param)
		}
	}
	// A create with a first chunk that already satisfies on_first_chunk starts at once.
	code, b := e.do(http.MethodPost, streaminput.PathPrefix, `{"start_policy":"on_first_chunk","template":`+respTemplate+`,"chunk":{"payload":"now"}}`)
	var st streaminput.SessionStatus
	mustJSON(t, b, &st)
	if code != http.StatusOK || !st.Started || st.NextSequenceID != 1 {
		t.Fatalf("create with a first chunk: %d %s", code, b)
	}
	if got := inputOf(t, e.upstreamRequest(0).Body); got != "Q: now" {
		t.Fatalf("upstream input %q", got)
	}
}

func TestByteCapClosesSession(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxSessionBytes: 100}})
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	e.mustChunk(id, textChunk(0, strings.Repeat("a", 60), false))
	code, _, ae := e.chunk(id, textChunk(1, strings.Repeat("b", 60), false))
	if code != http.StatusRequestEntityTooLarge || ae.code() != "payload_too_large" || ae.Error.Type != "invalid_request_error" || ae.param() != "input" {
		t.Fatalf("chunk over the cap: %d %+v", code, ae)
	}
	// The session is gone, in memory and in the store.
	if code, _ := e.status(id); code != http.StatusNotFound {
		t.Fatalf("status after the cap: %d", code)
	}
	if code, _, _ := e.chunk(id, textChunk(1, "b", false)); code != http.StatusNotFound {
		t.Fatalf("chunk after the cap: %d", code)
	}
	if _, err := e.st.GetInputSession(context.Background(), id); err == nil {
		t.Fatal("the closed session is still in the store")
	}
	// An oversized single request body is the same 413 and closes the session too.
	id2 := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	code, _, ae = e.chunk(id2, textChunk(0, strings.Repeat("z", 200<<10), false))
	if code != http.StatusRequestEntityTooLarge || ae.code() != "payload_too_large" {
		t.Fatalf("oversized body: %d %+v", code, ae)
	}
	if code, _ := e.status(id2); code != http.StatusNotFound {
		t.Fatalf("status after an oversized body: %d", code)
	}
	if e.up.RequestCount() != 0 {
		t.Fatalf("a closed session reached the upstream")
	}
}

func TestIdleTimeoutClosesSession(t *testing.T) {
	const idle = 400 * time.Millisecond
	e := newEnv(t, envConfig{opts: streaminput.Options{IdleTimeout: idle}})
	busy := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	quiet := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	start := time.Now()
	e.mustChunk(quiet, textChunk(0, "a", false))
	// Activity keeps a session alive past the timeout.
	for i := 0; time.Since(start) < 2*idle; i++ {
		e.mustChunk(busy, textChunk(i, "x", false))
		time.Sleep(idle / 4)
	}
	if code, _ := e.status(busy); code != http.StatusOK {
		t.Fatalf("a busy session expired: %d", code)
	}
	eventually(t, 5*time.Second, "the quiet session closes", func() bool { code, _ := e.status(quiet); return code == http.StatusNotFound })
	if _, err := e.st.GetInputSession(context.Background(), quiet); err == nil {
		t.Fatal("the idle session's data is still in the store")
	}
	if chunks, err := e.st.Chunks(context.Background(), quiet); err == nil {
		t.Fatalf("the idle session's chunks are still readable: %d", len(chunks))
	}
}

func TestSessionCapPerKey(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxSessionsPerKey: 2}})
	body := sessionBody(streaminput.EndpointResponses, "", respTemplate)
	a := e.create(body)
	e.create(body)
	code, b := e.do(http.MethodPost, streaminput.PathPrefix, body)
	if ae := decodeError(t, b); code != http.StatusTooManyRequests || ae.code() != streaminput.CodeTooManySessions {
		t.Fatalf("third session: %d %s", code, b)
	}
	// Another key has its own budget.
	if code, b := e.doKey("Bearer sk-other", http.MethodPost, streaminput.PathPrefix, body); code != http.StatusOK {
		t.Fatalf("other key: %d %s", code, b)
	}
	// A session whose answer has ended no longer counts.
	e.mustChunk(a, textChunk(0, "x", true))
	e.result(a, "")
	eventually(t, 5*time.Second, "a completed session frees its slot", func() bool {
		code, _ := e.do(http.MethodPost, streaminput.PathPrefix, body)
		return code == http.StatusOK
	})
	if code, b := e.do(http.MethodPost, streaminput.PathPrefix, body); code != http.StatusTooManyRequests {
		t.Fatalf("cap after reuse: %d %s", code, b)
	}
}

func TestResultAttachReplayAndReattach(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.up.Enqueue(upstreamtest.Slow(40 * time.Millisecond))
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))

	// A reader attached before the upstream starts waits for the answer.
	early := make(chan []sse.Event, 1)
	go func() { _, evs, _ := e.result(id, ""); early <- evs }()
	time.Sleep(50 * time.Millisecond)
	e.mustChunk(id, textChunk(0, "hello", true))

	// A reader that leaves after the first event and comes back gets it all.
	req, _ := http.NewRequest(http.MethodGet, e.url+streaminput.PathPrefix+"/"+id+"/result", nil)
	req.Header.Set("Authorization", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); !strings.HasPrefix(line, "event: response.created") {
		t.Fatalf("first line %q", line)
	}
	resp.Body.Close()

	want := <-early
	if n := len(want); n < 5 || eventType(want[n-1]) != "response.completed" {
		t.Fatalf("early reader: %v", eventTypes(want))
	}
	for _, name := range []string{"after the fact", "re-attach"} {
		_, evs, _ := e.result(id, "")
		if !slices.EqualFunc(evs, want, func(a, b sse.Event) bool { return string(a.Data) == string(b.Data) }) {
			t.Fatalf("%s: %v, want %v", name, eventTypes(evs), eventTypes(want))
		}
	}
	// starting_after skips what the reader already has.
	_, evs, _ := e.result(id, "?starting_after=3")
	if len(evs) != len(want)-4 || string(evs[0].Data) != string(want[4].Data) {
		t.Fatalf("starting_after=3: %v", eventTypes(evs))
	}
	if code, st := e.status(id); code != http.StatusOK || st.Result == nil || st.Result.Status != "completed" || st.Result.HTTPStatus != 200 {
		t.Fatalf("status: %d %+v", code, st.Result)
	}
}

func TestResultJSONWhenTemplateDoesNotStream(t *testing.T) {
	e := newEnv(t, envConfig{})
	id := e.create(sessionBody(streaminput.EndpointChat, "", `{"model":"gpt-fake-1","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"Say: "}]}`))
	e.mustChunk(id, textChunk(0, "hi", true))
	resp, _, body := e.result(id, "")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !strings.Contains(string(body), `"chat.completion"`) {
		t.Fatalf("result: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	up := e.upstreamRequest(0)
	if !strings.Contains(string(up.Body), `{"role":"user","content":"Say: hi"}`) || up.Path != "/v1/chat/completions" {
		t.Fatalf("upstream body %s", up.Body)
	}
}

func TestGatewayErrorBecomesResult(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.up.Enqueue(upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusBadRequest, upstreamtest.ErrorBody("bad things", "invalid_request_error", "bad_thing", "input")))
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	e.mustChunk(id, textChunk(0, "x", true))
	resp, _, body := e.result(id, "")
	if ae := decodeError(t, body); resp.StatusCode != http.StatusBadRequest || ae.code() != "bad_thing" {
		t.Fatalf("result: %d %s", resp.StatusCode, body)
	}
	if _, st := e.status(id); st.Result.Status != "failed" {
		t.Fatalf("status: %+v", st.Result)
	}
}

func TestDeleteCancelsInFlightUpstream(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.up.Enqueue(upstreamtest.HangAfter(2))
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	e.mustChunk(id, textChunk(0, "x", false))

	req, _ := http.NewRequest(http.MethodGet, e.url+streaminput.PathPrefix+"/"+id+"/result", nil)
	req.Header.Set("Authorization", clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	for i := 0; i < 2; i++ {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 5*time.Second, "upstream request in flight", func() bool { return e.upIn.Load() == 1 })
	if code, b := e.do(http.MethodDelete, streaminput.PathPrefix+"/"+id, ""); code != http.StatusOK || !strings.Contains(string(b), `"deleted":true`) {
		t.Fatalf("delete: %d %s", code, b)
	}
	// The response is cancelled as DELETE /v1/responses/{id} cancels it.
	ev, err := r.Next()
	if err != nil || eventType(ev) != "response.failed" || !strings.Contains(string(ev.Data), `"status":"cancelled"`) {
		t.Fatalf("after delete: %s %v", ev.Data, err)
	}
	if _, err := r.Next(); err == nil {
		t.Fatal("the stream went on after its terminal event")
	}
	eventually(t, 5*time.Second, "the upstream request is cancelled", func() bool { return e.upIn.Load() == 0 })
	if code, _ := e.status(id); code != http.StatusNotFound {
		t.Fatalf("status after delete: %d", code)
	}
	if _, err := e.st.GetInputSession(context.Background(), id); err == nil {
		t.Fatal("the deleted session is still in the store")
	}
}

func TestDispatchPanicStillEndsWithTerminalEvent(t *testing.T) {
	panicky := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("X-Case"), "late") {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte("event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\"}}\n\n"))
			http.NewResponseController(w).Flush()
		}
		panic("boom")
	})
	e := newEnv(t, envConfig{dispatch: panicky})
	for _, c := range []string{"late", "early"} {
		req, _ := http.NewRequest(http.MethodPost, e.url+streaminput.PathPrefix, strings.NewReader(sessionBody(streaminput.EndpointResponses, "", respTemplate)))
		req.Header.Set("Authorization", clientKey)
		req.Header.Set("X-Case", c)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st streaminput.SessionStatus
		b := make([]byte, 4096)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		mustJSON(t, b[:n], &st)
		e.mustChunk(st.ID, textChunk(0, "x", true))
		_, evs, _ := e.result(st.ID, "")
		last := evs[len(evs)-1]
		if eventType(last) != "response.failed" || failureCode(last) != "stream_incomplete" {
			t.Fatalf("%s panic: %v %s", c, eventTypes(evs), last.Data)
		}
		if c == "late" && (len(evs) != 2 || !strings.Contains(string(last.Data), `"resp_1"`) || !strings.Contains(string(last.Data), `"sequence_number":1`)) {
			t.Fatalf("the terminal event does not continue the stream: %s", last.Data)
		}
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, envConfig{})
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	e.mustChunk(id, textChunk(0, "abc", false))
	e.mustChunk(id, textChunk(0, "abc", false))
	open := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	_ = open
	e.mustChunk(id, textChunk(1, "de", true))
	e.result(id, "")
	gather := func() map[string]float64 {
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				key := mf.GetName()
				for _, l := range m.GetLabel() {
					key += "/" + l.GetValue()
				}
				switch {
				case m.Counter != nil:
					got[key] = m.Counter.GetValue()
				case m.Gauge != nil:
					got[key] = m.Gauge.GetValue()
				case m.Histogram != nil:
					got[key] = float64(m.Histogram.GetSampleCount())
				}
			}
		}
		return got
	}
	// The reader can see the last byte a moment before the session records
	// that its answer is over.
	var got map[string]float64
	eventually(t, 5*time.Second, "the session counts as completed", func() bool {
		got = gather()
		return got["sluice_streaming_input_sessions/completed"] == 1
	})
	for k, v := range map[string]float64{
		"sluice_streaming_input_chunks_total/accepted":  2,
		"sluice_streaming_input_chunks_total/duplicate": 1,
		"sluice_streaming_input_bytes_total":            5,
		"sluice_streaming_input_sessions/open":          1,
		"sluice_streaming_input_sessions/completed":     1,
		"sluice_streaming_input_start_delay_seconds":    1,
	} {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestDrain: a drain refuses new input and releases readers of unstarted
// sessions with a retryable 503, while a running answer completes.
func TestDrain(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.up.Enqueue(upstreamtest.Slow(60 * time.Millisecond))
	running := e.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	e.mustChunk(running, textChunk(0, "go", false))
	waiting := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))

	runningDone := make(chan []sse.Event, 1)
	go func() { _, evs, _ := e.result(running, ""); runningDone <- evs }()
	waitingDone := make(chan []byte, 1)
	go func() { _, _, b := e.result(waiting, ""); waitingDone <- b }()
	time.Sleep(50 * time.Millisecond)

	e.mgr.Drain()
	if ae := decodeError(t, <-waitingDone); ae.code() != "upstream_unavailable" || ae.Error.Type != "server_error" {
		t.Fatalf("waiting reader: %+v", ae)
	}
	if code, _, ae := e.chunk(waiting, textChunk(0, "x", false)); code != http.StatusServiceUnavailable || ae.code() != "upstream_unavailable" {
		t.Fatalf("chunk while draining: %d %+v", code, ae)
	}
	if code, _ := e.do(http.MethodPost, streaminput.PathPrefix, sessionBody(streaminput.EndpointResponses, "", respTemplate)); code != http.StatusServiceUnavailable {
		t.Fatalf("create while draining: %d", code)
	}
	if evs := <-runningDone; eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("running answer: %v", eventTypes(evs))
	}
	// The unstarted session is kept for the next process.
	if _, err := e.st.GetInputSession(context.Background(), waiting); err != nil {
		t.Fatalf("a drained session was dropped: %v", err)
	}
}

// TestWithoutStore: with no store, sessions work in memory.
func TestWithoutStore(t *testing.T) {
	e := newEnv(t, envConfig{noStore: true})
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	e.mustChunk(id, textChunk(1, "b", false))
	e.mustChunk(id, textChunk(0, "a", false))
	e.mustChunk(id, textChunk(2, "c", true))
	if got := inputOf(t, e.upstreamRequest(0).Body); got != "Q: abc" {
		t.Fatalf("upstream input %q", got)
	}
	_, evs, _ := e.result(id, "")
	if eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("result: %v", eventTypes(evs))
	}
}

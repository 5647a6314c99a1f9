package streaminput_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
)

// Restored sessions after a restart (what the new Manager logs, how they
// count against its caps, where their input ends), and session limits and
// gaps (README, "Mutation testing"). The session and manager survivors
// judged equivalent are listed in mutation_gaps3_session_test.go.

// TestReopenLogsAndSessionCap: a new Manager logs how many sessions it
// restored and how many it sends upstream, and the restored ones count
// against max sessions.
func TestReopenLogsAndSessionCap(t *testing.T) {
	dir := t.TempDir()
	// A dispatch that never reaches an upstream: a finished session is
	// started but has no answer when the first Manager closes.
	e1 := newEnv(t, envConfig{dir: dir, dispatch: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })})
	open := e1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	e1.mustChunk(open, textChunk(0, "one ", false))
	finished := e1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	if a := e1.mustChunk(finished, textChunk(0, "all", true)); !a.Started {
		t.Fatalf("the finished session did not start: %+v", a)
	}
	e1.stop()

	e2 := newEnv(t, envConfig{dir: dir, opts: streaminput.Options{MaxSessions: 2}})
	logs := e2.logs.String()
	for _, want := range []string{"streaming-input sessions restored: sessions=2 to_send=1", "restored streaming-input sessions sent upstream: sessions=1"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("no %q in the logs:\n%s", want, logs)
		}
	}
	code, b := e2.do(http.MethodPost, streaminput.PathPrefix, sessionBody(streaminput.EndpointResponses, "", respTemplate))
	if code != http.StatusServiceUnavailable || decodeError(t, b).code() != "server_overloaded" {
		t.Fatalf("a third session with max 2 restored: %d %s", code, b)
	}
}

// TestReopenKeyAndBytesCaps: restored open sessions count against their
// key's session cap and, with their template and chunk bytes, against the
// bytes cap; an empty chunk needs no bytes, even over the cap.
func TestReopenKeyAndBytesCaps(t *testing.T) {
	dir := t.TempDir()
	e1 := newEnv(t, envConfig{dir: dir})
	if strings.Contains(e1.logs.String(), "sessions restored") {
		t.Fatalf("an empty store logged restored sessions:\n%s", e1.logs.String())
	}
	big := strings.Repeat("x", 10000)
	var ids []string
	for range 2 {
		id := e1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
		e1.mustChunk(id, textChunk(0, big, false))
		ids = append(ids, id)
	}
	e1.stop()

	e2 := newEnv(t, envConfig{dir: dir, opts: streaminput.Options{MaxSessionsPerKey: 2}})
	if strings.Contains(e2.logs.String(), "sent upstream") {
		t.Fatalf("no session was sent, yet it was logged:\n%s", e2.logs.String())
	}
	code, b := e2.do(http.MethodPost, streaminput.PathPrefix, sessionBody(streaminput.EndpointResponses, "", respTemplate))
	if code != http.StatusTooManyRequests || decodeError(t, b).code() != streaminput.CodeTooManySessions {
		t.Fatalf("a third session for a key with 2 restored: %d %s", code, b)
	}
	e2.stop()

	// The two sessions hold 2×(envelope + 10,000) bytes: over 15,000.
	e3 := newEnv(t, envConfig{dir: dir, opts: streaminput.Options{MaxTotalBytes: 15000}})
	code, b = e3.do(http.MethodPost, streaminput.PathPrefix, sessionBody(streaminput.EndpointResponses, "", respTemplate))
	if code != http.StatusServiceUnavailable || decodeError(t, b).code() != "server_overloaded" {
		t.Fatalf("a session over the bytes cap after restart: %d %s", code, b)
	}
	if code, _, e := e3.chunk(ids[0], textChunk(1, "", false)); code/100 != 2 {
		t.Fatalf("an empty chunk over the bytes cap: %d %+v", code, e)
	}
	if code, _, e := e3.chunk(ids[0], textChunk(2, "more", false)); code != http.StatusServiceUnavailable {
		t.Fatalf("a chunk over the bytes cap: %d %+v", code, e)
	}
}

// TestReopenFinishedWithoutEndChunk: a session finished by a finish call
// (no chunk set end_of_input) ends after its last chunk also after a
// restart: that chunk may be sent again, a later one is refused, and its
// status names the last chunk as the end (none for a session finished
// without chunks).
func TestReopenFinishedWithoutEndChunk(t *testing.T) {
	dir := t.TempDir()
	e1 := newEnv(t, envConfig{dir: dir, dispatch: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })})
	id := e1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	e1.mustChunk(id, textChunk(0, "one ", false))
	e1.mustChunk(id, textChunk(1, "two", false))
	empty := e1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	for _, sid := range []string{id, empty} {
		if code, b := e1.do(http.MethodPost, streaminput.PathPrefix+"/"+sid+"/finish", ""); code != http.StatusOK {
			t.Fatalf("finish: %d %s", code, b)
		}
	}
	e1.stop()

	e2 := newEnv(t, envConfig{dir: dir, dispatch: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })})
	if code, _, e := e2.chunk(id, textChunk(1, "two", false)); code/100 != 2 {
		t.Fatalf("the last chunk again: %d %+v", code, e)
	}
	if code, _, e := e2.chunk(id, textChunk(2, "three", false)); code != http.StatusConflict || e.code() != streaminput.CodeSessionFinished {
		t.Fatalf("a chunk after the end: %d %+v", code, e)
	}
	if code, st := e2.status(id); code != http.StatusOK || st.EndSequenceID == nil || *st.EndSequenceID != 1 || st.State != "finished" {
		t.Fatalf("status after restart: %d %+v", code, st)
	}
	if code, st := e2.status(empty); code != http.StatusOK || st.EndSequenceID != nil || st.State != "finished" {
		t.Fatalf("status of a session finished without chunks, after restart: %d %+v", code, st)
	}
}

// TestSessionBytesCapBoundary: a session may hold exactly
// MaxSessionBytes of payload; one byte more ends it as too large.
func TestSessionBytesCapBoundary(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxSessionBytes: 10}})
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	e.mustChunk(id, textChunk(0, "12345", false))
	e.mustChunk(id, textChunk(1, "67890", false))
	id2 := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	e.mustChunk(id2, textChunk(0, "12345", false))
	if code, _, ae := e.chunk(id2, textChunk(1, "678901", false)); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("11 bytes with a cap of 10: %d %+v", code, ae)
	}
}

// TestFinishGapsAndEmptyFinish: finishing with chunks missing names them
// (below the highest received, or below the end of input; at most ten);
// finishing with no chunk at all has no end sequence id.
func TestFinishGapsAndEmptyFinish(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{ReorderWindow: 64}})
	finish := func(id string) (int, apiError) {
		code, b := e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", "")
		if code == http.StatusOK {
			return code, apiError{}
		}
		return code, decodeError(t, b)
	}
	for _, tt := range []struct {
		name   string
		chunks []string
		gaps   string
	}{
		{"below the highest", []string{textChunk(0, "a", false), textChunk(3, "d", false)}, "ids 1, 2 are missing"},
		{"below the end", []string{textChunk(0, "a", false), textChunk(4, "e", true)}, "ids 1, 2, 3 are missing"},
		{"one", []string{textChunk(0, "a", false), textChunk(2, "c", false)}, "id 1 is missing"},
		{"at most ten, and a count", []string{textChunk(0, "a", false), textChunk(13, "n", false)}, "12 sequence ids are missing: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more"},
	} {
		id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
		for _, c := range tt.chunks {
			e.mustChunk(id, c)
		}
		code, ae := finish(id)
		if code != http.StatusConflict || ae.code() != streaminput.CodeSequenceGap || !strings.Contains(ae.Error.Message, tt.gaps) {
			t.Fatalf("%s: finish %d %+v, want the gaps %s", tt.name, code, ae, tt.gaps)
		}
	}
	empty := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	e.up.SetDefault(upstreamHangScript())
	if code, ae := finish(empty); code != http.StatusOK {
		t.Fatalf("finish without chunks: %d %+v", code, ae)
	}
	if code, st := e.status(empty); code != http.StatusOK || st.EndSequenceID != nil {
		t.Fatalf("status of a session finished without chunks: %d %+v", code, st)
	}
}

// TestRequestSizeBoundaries: a chunk request of exactly the largest size
// and a template of exactly MaxTemplateBytes are accepted; a null
// start_policy is the default.
func TestRequestSizeBoundaries(t *testing.T) {
	const sessionBytes = 3000
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxSessionBytes: sessionBytes, MaxTemplateBytes: int64(len(respTemplate))}})
	id := e.create(`{"endpoint":"` + streaminput.EndpointResponses + `","start_policy":null,"template":` + respTemplate + `}`)
	if code, st := e.status(id); code != http.StatusOK || st.StartPolicy != "on_end_only" {
		t.Fatalf("a null start_policy: %d %+v", code, st)
	}
	big := `{"model":"gpt-fake-1","stream":true,"input":"Q:  "}` // one byte over
	code, b := e.do(http.MethodPost, streaminput.PathPrefix, sessionBody(streaminput.EndpointResponses, "", big))
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a template one byte over: %d %s", code, b)
	}
	limit := sessionBytes/3*4 + 64<<10 // the largest chunk request (base64 of the session's bytes, and room)
	body := textChunk(0, "x", false)
	body += strings.Repeat(" ", limit-len(body))
	if code, _, ae := e.chunk(id, body); code/100 != 2 {
		t.Fatalf("a chunk request of exactly %d bytes: %d %+v", limit, code, ae)
	}
	if code, _, _ := e.chunk(id, body+" "); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a chunk request one byte over: %d", code)
	}
}

// TestKeepAliveOutlivesReadTimeout: the read deadline that bounds a REST
// body is lifted once the body is read, so the next request on the same
// keep-alive connection, sent after ReadTimeout, is served. (net/http
// clears the deadline itself once a body is read to its end; a request with
// no body is TestShrReadTimeoutBoundsOnlyTheBody's case.)
func TestKeepAliveOutlivesReadTimeout(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{ReadTimeout: 200 * time.Millisecond}})
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	tr := &http.Transport{MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var conns atomic.Int32
	post := func(seq int) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.url+streaminput.PathPrefix+"/"+id+"/chunks", strings.NewReader(textChunk(seq, "x", false)))
		req.Header.Set("Authorization", clientKey)
		req.Header.Set("Content-Type", "application/json")
		trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
			if !info.Reused {
				conns.Add(1)
			}
		}}
		resp, err := c.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
		if err != nil {
			t.Fatalf("chunk %d: %v", seq, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("chunk %d: %d", seq, resp.StatusCode)
		}
	}
	post(0)
	time.Sleep(400 * time.Millisecond) // past ReadTimeout, while the connection idles
	post(1)
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for two requests, want the first one kept alive", n)
	}
}

// TestModeAErrorNamesTheLine: a Mode A body's bad line is named by its
// line number, the header being line 1.
func TestModeAErrorNamesTheLine(t *testing.T) {
	e := newEnv(t, envConfig{})
	body := `{"template":` + respTemplate + `}` + "\n" + `{"sequence_id":0,"payload":"x"}` + "\n" + "{nope\n"
	code, _, b := e.postRaw(streaminput.EndpointResponses, strings.NewReader(body), modeAHeaders())
	if ae := decodeError(t, b); code != http.StatusBadRequest || !strings.Contains(ae.Error.Message, "line 3 of the body") {
		t.Fatalf("%d %s", code, b)
	}
}

// TestFollowingReplicaReportsTheStart: a replica that follows an answer
// another replica runs reports the same upstream start time in its status.
func TestFollowingReplicaReportsTheStart(t *testing.T) {
	r := replicas(t, 2, redistest.Start(t))
	r1, r2 := r[0], r[1]
	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	r1.mustChunk(id, textChunk(0, "one", true)) // replica 1 runs it
	r1.result(id, "")
	r2.result(id, "") // replica 2 follows it from the store
	_, st1 := r1.status(id)
	code, st2 := r2.status(id)
	if st1.UpstreamSaw == nil || st1.UpstreamSaw.StartedAt == 0 {
		t.Fatalf("the running replica's status: %+v", st1)
	}
	if code != http.StatusOK || st2.UpstreamSaw == nil || st2.UpstreamSaw.StartedAt != st1.UpstreamSaw.StartedAt {
		t.Fatalf("the following replica's status: %d %+v, want started_at %d", code, st2.UpstreamSaw, st1.UpstreamSaw.StartedAt)
	}
}

// TestModeABombClosedAsTooLarge: a compressed Mode A body that decodes past
// its cap closes its session with the reason too_large, not rejected.
func TestModeABombClosedAsTooLarge(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxTemplateBytes: 1024, MaxSessionBytes: 300}})
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(`{"template":` + respTemplate + `}` + "\n" + strings.Repeat("\n", 8<<20)))
	_ = zw.Close()
	code, _, body := e.postRaw(streaminput.EndpointResponses, bytes.NewReader(b.Bytes()), modeAHeaders("Content-Encoding", "gzip"))
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d %s", code, body)
	}
	if tooLarge, rejected := shrClosed(t, e, "too_large"), shrClosed(t, e, "rejected"); tooLarge != 1 || rejected != 0 {
		t.Fatalf("sessions closed: %v too_large, %v rejected", tooLarge, rejected)
	}
}

// TestDeletedOnAnotherReplica: a session deleted through one replica is
// closed on another that held it, the next time a request names it there.
func TestDeletedOnAnotherReplica(t *testing.T) {
	r := replicas(t, 2, redistest.Start(t))
	r1, r2 := r[0], r[1]
	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
	r2.mustChunk(id, textChunk(0, "one", false)) // replica 2 now holds it
	if n := sessGauge(t, r2, "open"); n != 1 {
		t.Fatalf("replica 2 holds %v open sessions", n)
	}
	if code, b := r1.do(http.MethodDelete, streaminput.PathPrefix+"/"+id, ""); code/100 != 2 {
		t.Fatalf("delete on replica 1: %d %s", code, b)
	}
	if code, _ := r2.status(id); code != http.StatusNotFound {
		t.Fatalf("status on replica 2 after the delete: %d", code)
	}
	if n := sessGauge(t, r2, "open"); n != 0 {
		t.Fatalf("replica 2 still holds %v open sessions after the delete", n)
	}
}

package streaminput_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// Restored sessions after a restart: what the new Manager logs and how
// they count against its caps (README, "Mutation testing").

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

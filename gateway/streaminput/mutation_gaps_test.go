package streaminput_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// Tests that pin behaviour sampled mutation testing found unchecked.

// TestDeleteRemovesStoredSessionQuietly: deleting a durable session removes
// its stored data and logs no deletion failure when there was none.
func TestDeleteRemovesStoredSessionQuietly(t *testing.T) {
	e := newEnv(t, envConfig{})
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	if _, err := e.st.GetInputSession(context.Background(), id); err != nil {
		t.Fatalf("the session is not stored: %v", err)
	}
	if code, b := e.do(http.MethodDelete, streaminput.PathPrefix+"/"+id, ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, b)
	}
	if _, err := e.st.GetInputSession(context.Background(), id); err == nil {
		t.Fatal("the deleted session is still in the store")
	}
	if strings.Contains(e.logs.String(), "could not delete") {
		t.Fatalf("a successful deletion was logged as a failure:\n%s", e.logs.String())
	}
}

// TestCreateAtCapRefusedBeforeBody: at the global session cap a create is
// refused as overloaded before its body is read (a malformed body does not
// turn it into a 400).
func TestCreateAtCapRefusedBeforeBody(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxSessions: 1}})
	e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	code, b := e.doKey("Bearer sk-rotating-z", http.MethodPost, streaminput.PathPrefix, "{not json")
	wantError(t, "a malformed create at the cap", code, b, http.StatusServiceUnavailable, streaminput.CodeServerOverloaded)
}

// TestResultBufferIsBounded: an answer longer than ResultBuffer keeps only
// its tail; a reader attaching after the fact no longer gets its start.
func TestResultBufferIsBounded(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{ResultBuffer: 256}})
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	e.mustChunk(id, textChunk(0, "hello", true))
	eventually(t, 5*time.Second, "the answer ends", func() bool {
		_, st := e.status(id)
		return st.Result != nil && st.Result.Status == "completed"
	})
	_, evs, _ := e.result(id, "")
	if len(evs) > 0 && eventType(evs[0]) == "response.created" {
		t.Fatalf("the whole answer was kept past ResultBuffer: %v", eventTypes(evs))
	}
}

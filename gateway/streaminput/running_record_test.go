package streaminput_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// TestRunningSessionOutlivesTheIdleTimeoutInTheStore: on Pebble, an answer
// that runs for longer than the idle timeout keeps its session's record in
// the store, so a restart after that still finds the session and sends its
// request again (README "Privacy and retention": the timeout of a started
// session counts from the end of its answer).
func TestRunningSessionOutlivesTheIdleTimeoutInTheStore(t *testing.T) {
	const idle = 2 * time.Second
	dir := t.TempDir()
	opts := streaminput.Options{IdleTimeout: idle}
	e1 := newEnv(t, envConfig{dir: dir, opts: opts})
	e1.up.SetDefault(upstreamHangScript())
	id := e1.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	e1.mustChunk(id, textChunk(0, "run", false))

	_, r := e1.openStream(streaminput.PathPrefix + "/" + id + "/result")
	if ev, err := r.Next(); err != nil || eventType(ev) != "response.created" {
		t.Fatalf("first event: %v", err)
	}
	time.Sleep(5 * idle / 2) // the answer runs on, past the idle timeout
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e1.mgr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	e1.stop()

	e2 := newEnv(t, envConfig{dir: dir, opts: opts})
	code, st := e2.status(id)
	if code != http.StatusOK || !st.Started {
		t.Fatalf("status after the restart: %d %+v; want the running session restored", code, st)
	}
	if got := inputOf(t, e2.upstreamRequest(0).Body); got != "Q: run" {
		t.Fatalf("request sent again after the restart: %q", got)
	}
}

package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// resumeWithin is harness.resume bounded by a deadline, so that a resume
// that never answers fails the test rather than hanging it.
func resumeWithin(t *testing.T, h *harness, id, after string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/v1/responses/"+id+"?stream=true&starting_after="+after, nil)
	req.Header.Set("Authorization", "Bearer "+clientKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("resume from %s: %v", after, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("resume from %s: reading the answer: %v", after, err)
	}
	return resp.StatusCode, string(b)
}

// TestStartingAfterBeyondAnySequenceNumberIsRefused: a starting_after that
// no event can have (the int64 maximum, whose next number overflows) is a
// 400 invalid_value naming starting_after, over SSE as on a WebSocket, on
// the replica running the response; the response runs on to its end and
// stays readable. Before, the follow on the running replica panicked with
// the log's lock held, wedging the response, its readers and its writer.
func TestStartingAfterBeyondAnySequenceNumberIsRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	h.ups["A"].Enqueue(slowAnswer())
	id := startBackground(t, h)
	for _, after := range []string{"9223372036854775807", "9223372036854775806", "9007199254740992", "-2"} {
		status, body := resumeWithin(t, h, id, after)
		if status != http.StatusBadRequest || gjson.Get(body, "error.code").Str != "invalid_value" ||
			gjson.Get(body, "error.param").Str != "starting_after" {
			t.Fatalf("SSE resume from %s: %d %s, want 400 invalid_value naming starting_after", after, status, body)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := h.dialWS(nil).conn
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.resume","response_id":"`+id+`","starting_after":9007199254740992}`)); err != nil {
		t.Fatal(err)
	}
	_, data, err := c.Read(ctx)
	if err != nil || gjson.GetBytes(data, "type").Str != "error" || gjson.GetBytes(data, "status").Int() != 400 ||
		gjson.GetBytes(data, "error.param").Str != "starting_after" {
		t.Fatalf("WebSocket resume from 2^53: %s (%v), want the error frame of a 400 naming starting_after", data, err)
	}

	eventually(t, "the background response completes", func() bool {
		_, b := h.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		return gjson.GetBytes(b, "status").Str == "completed"
	})
	status, body := resumeWithin(t, h, id, "-1")
	if status != http.StatusOK || !strings.Contains(body, "response.completed") {
		t.Fatalf("a whole replay after the refused resumes: %d %s", status, body)
	}
}

// redisReplicasWithServer is redisReplicas that also returns the Redis
// server, for a test that stops it.
func redisReplicasWithServer(t *testing.T, opts gateway.Options) (*redistest.Server, *upstreamtest.Server, func() *harness) {
	t.Helper()
	rd := redistest.Start(t)
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	return rd, up, func() *harness {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: rd.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		o := opts
		o.Store, o.Resume.Store = rs, rs
		return newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up}, opts: o})
	}
}

// knownOn waits until replica answers a GET of id (its record is in the
// store).
func knownOn(t *testing.T, replica *harness, id string) {
	t.Helper()
	eventually(t, "the other replica knows the response", func() bool {
		status, _ := replica.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		return status == http.StatusOK
	})
}

// TestResumePastTheEndOnAnotherReplicaIs400: a resume on a replica that
// follows through the store a stream another runs, with starting_after
// past where the stream ends, gets the 400 invalid_value the replica
// running it answers (README "Resuming a stream"), not a 200 with an error
// event numbered as no event of the stream.
func TestResumePastTheEndOnAnotherReplicaIs400(t *testing.T) {
	up, replica := redisReplicas(t, resumeOpts())
	running, other := replica(), replica()
	up.Enqueue(slowAnswer())
	id := startBackground(t, running)
	knownOn(t, other, id)
	status, body := resumeWithin(t, other, id, "500")
	if status != http.StatusBadRequest || gjson.Get(body, "error.code").Str != "invalid_value" ||
		gjson.Get(body, "error.param").Str != "starting_after" {
		t.Fatalf("resume past the end on the other replica: %d %s, want 400 invalid_value naming starting_after", status, body)
	}
}

// TestEndedResponseIsServedFromMemoryWhileTheStoreIsDown: with Redis down,
// the replica that ran a response and holds its whole log answers GET and
// resume for it once it ended, as it does while it runs (README "Scale-out
// with Redis"), rather than 503.
func TestEndedResponseIsServedFromMemoryWhileTheStoreIsDown(t *testing.T) {
	rd, up, replica := redisReplicasWithServer(t, resumeOpts())
	h := replica()
	up.Enqueue(upstreamtest.Answer(resumeText, 4))
	id := startBackground(t, h)
	eventually(t, "the background response completes", func() bool {
		_, b := h.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		return gjson.GetBytes(b, "status").Str == "completed"
	})
	rd.Stop()

	status, b := h.call(http.MethodGet, "/v1/responses/"+id, clientKey)
	if status != http.StatusOK || gjson.GetBytes(b, "status").Str != "completed" || gjson.GetBytes(b, "output.0.content.0.text").Str != resumeText {
		t.Fatalf("GET with the store down: %d %s, want the completed response", status, b)
	}
	status, body := resumeWithin(t, h, id, "2")
	if status != http.StatusOK || !strings.Contains(body, `"sequence_number":3`) || !strings.Contains(body, "response.completed") {
		t.Fatalf("resume from 2 with the store down: %d %s, want the events from 3 to the terminal one", status, body)
	}
}

// queuedThenHang is an upstream stream that opens queued and is never
// started: its response.created says queued, then nothing comes.
func queuedThenHang() upstreamtest.Script {
	return upstreamtest.Script{
		Frames: []upstreamtest.Frame{{Raw: []byte("event: response.created\ndata: " +
			`{"type":"response.created","sequence_number":0,"response":{"id":"` + upstreamtest.PlaceholderID +
			`","object":"response","created_at":` + upstreamtest.PlaceholderCreatedAt + `,"status":"queued","model":"` +
			upstreamtest.PlaceholderModel + `","output":[]}}` + "\n\n")}},
		End: upstreamtest.EndHang,
	}
}

// TestQueuedBackgroundResponseReadsQueued: a GET of a background response
// the upstream has not started yet says queued, as its create answered, on
// the replica running it and on another one (OpenAI's retrieve does).
func TestQueuedBackgroundResponseReadsQueued(t *testing.T) {
	up, replica := redisReplicas(t, resumeOpts())
	running, other := replica(), replica()
	up.Enqueue(queuedThenHang())
	status, b := running.callBody(http.MethodPost, "/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	id := gjson.GetBytes(b, "id").Str
	if status != http.StatusOK || gjson.GetBytes(b, "status").Str != "queued" {
		t.Fatalf("background create: %d %s, want it answered queued", status, b)
	}
	knownOn(t, other, id)
	for name, h := range map[string]*harness{"running": running, "other": other} {
		status, b := h.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		if status != http.StatusOK || gjson.GetBytes(b, "status").Str != "queued" {
			t.Errorf("GET on the %s replica: %d %s, want status queued", name, status, b)
		}
	}
	if status, b := running.call(http.MethodPost, "/v1/responses/"+id+"/cancel", clientKey); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, b)
	}
}

// TestGetOnAnotherReplicaShowsTheStoredEvents: a GET on a replica that
// does not run the response shows the output its stored events hold, as a
// resume there delivers it, not the record's Response, rewritten at most
// once a second: here a stream that stalls after its third delta, its
// record last written before the last deltas.
func TestGetOnAnotherReplicaShowsTheStoredEvents(t *testing.T) {
	opts := resumeOpts()
	opts.IdleTimeout = 5 * time.Minute // the stall is not an abandoned stream
	up, replica := redisReplicas(t, opts)
	running, other := replica(), replica()
	stall := upstreamtest.Answer(resumeText, 12)
	stall.Gap, stall.StopAfterDeltas, stall.End = 300*time.Millisecond, 3, upstreamtest.EndHang
	up.Enqueue(stall)
	id := startBackground(t, running)
	var text string
	eventually(t, "three deltas on the running replica", func() bool {
		_, b := running.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		text = gjson.GetBytes(b, "output.0.content.0.text").Str
		return len(strings.Fields(text)) == 3
	})
	eventually(t, "the other replica's GET shows the three deltas", func() bool {
		_, b := other.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		return gjson.GetBytes(b, "output.0.content.0.text").Str == text && gjson.GetBytes(b, "status").Str == "in_progress"
	})
	if status, b := running.call(http.MethodPost, "/v1/responses/"+id+"/cancel", clientKey); status != http.StatusOK {
		t.Fatalf("cancel: %d %s", status, b)
	}
}

package gateway_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// TestResumeDurableAcrossRestart: with streams.durable, a stream, a
// background response and a JSON answer survive a restart of the gateway
// (the store reopened from its directory); a log whose gateway stopped
// before its end is replayed and ended with an error event.
func TestResumeDurableAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	opts := resumeOpts()
	opts.Resume.Store = st
	h := newHarness(t, harnessConfig{opts: opts, protocol: map[string]string{"A": "chat"}})
	h.ups["A"].Enqueue(slowAnswer())
	first := h.readSome("sk-client-secret", `{"model":"gpt-fake-1","input":"hi","stream":true}`, 5)
	streamID := gjson.GetBytes(first[0], "response.id").Str
	// The stream runs on, detached, to its end; a background one too.
	h.ups["A"].Enqueue(slowAnswer())
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"bg","background":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	bgID := gjson.GetBytes(b, "id").Str
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body := h.call(http.MethodGet, "/v1/responses/"+bgID, "sk-client-secret")
		_, sbody := h.call(http.MethodGet, "/v1/responses/"+streamID, "sk-client-secret")
		if gjson.GetBytes(body, "status").Str == "completed" && gjson.GetBytes(sbody, "status").Str == "completed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never completed: %s / %s", body, sbody)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A stream whose gateway died mid-way: its record and first events.
	if err := st.PutStreamLog(context.Background(), store.StreamLog{ResponseID: "resp_crashed", Owner: ownerOf(t, st, streamID),
		Status: "in_progress", ExpiresAt: time.Now().Add(time.Hour), Response: []byte(`{"id":"resp_crashed","status":"in_progress"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendStreamEvents(context.Background(), "resp_crashed", 0, []store.StreamEvent{
		{Name: "response.created", Data: []byte(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_crashed"}}`)}}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.gw.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	st2 := openStore(t, dir)
	opts.Resume.Store = st2
	h2 := newHarness(t, harnessConfig{opts: opts, protocol: map[string]string{"A": "chat"}})

	if o := checkResponsesEvents(t, h2.resumeAfter("sk-client-secret", streamID, first)); o.text != resumeText || o.terminal != "response.completed" {
		t.Fatalf("resumed after a restart: %q %s", o.text, o.terminal)
	}
	_, got := h2.call(http.MethodGet, "/v1/responses/"+bgID, "sk-client-secret")
	if gjson.GetBytes(got, "status").Str != "completed" || gjson.GetBytes(got, "output.0.content.0.text").Str != resumeText ||
		gjson.GetBytes(got, "background").Type != gjson.True {
		t.Fatalf("the background response after a restart: %s", got)
	}
	if status, got := h2.call(http.MethodGet, "/v1/responses/"+bgID+"/input_items", "sk-client-secret"); status != 200 ||
		gjson.GetBytes(got, "data.0.content.0.text").Str != "bg" {
		t.Fatalf("input_items after a restart: %d %s", status, got)
	}
	if status, _, _ := h2.resume("sk-someone-else", streamID, -1); status != http.StatusNotFound {
		t.Fatalf("another key after a restart: %d", status)
	}
	_, crashed, _ := h2.resume("sk-client-secret", "resp_crashed", -1)
	if len(crashed) != 2 || gjson.GetBytes(crashed[1], "type").Str != "error" || gjson.GetBytes(crashed[1], "sequence_number").Int() != 1 {
		t.Fatalf("an unfinished log after a restart: %q", crashed)
	}
}

// ownerOf reads the owner a durable log was recorded with (the key's hash).
func ownerOf(t *testing.T, st store.StreamLogStore, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if rec, err := st.GetStreamLog(ctx, id); err == nil {
			return rec.Owner
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no durable log of %s", id)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestResumeAcrossReplicas: on Redis, a stream running on one replica is
// resumed on the other while it is still live, and a background response
// run by one is polled and cancelled through the other.
func TestResumeAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	replica := func() *harness {
		rs, err := store.OpenRedis(context.Background(), store.RedisOptions{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rs.Close() })
		o := resumeOpts()
		o.Store, o.Resume.Store = rs, rs
		return newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up}, opts: o})
	}
	r1, r2 := replica(), replica()

	up.Enqueue(slowAnswer())
	first := r1.readSome("sk-client-secret", `{"model":"gpt-fake-1","input":"hi","stream":true}`, 5)
	id := gjson.GetBytes(first[0], "response.id").Str
	if o := checkResponsesEvents(t, r2.resumeAfter("sk-client-secret", id, first)); o.text != resumeText || o.terminal != "response.completed" {
		t.Fatalf("resumed on the other replica: %q %s", o.text, o.terminal)
	}

	// Background on r1, cancelled through r2.
	slow := slowAnswer()
	slow.Gap = 200 * time.Millisecond
	up.Enqueue(slow)
	resp := r1.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	bg := gjson.GetBytes(b, "id").Str
	if status, got := r2.call(http.MethodGet, "/v1/responses/"+bg, "sk-client-secret"); status != 200 || gjson.GetBytes(got, "id").Str != bg {
		t.Fatalf("polling the other replica: %d %s", status, got)
	}
	if status, got := r2.call(http.MethodPost, "/v1/responses/"+bg+"/cancel", "sk-client-secret"); status != 200 || gjson.GetBytes(got, "status").Str != "cancelled" {
		t.Fatalf("cancel through the other replica: %d %s", status, got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, got := r1.call(http.MethodGet, "/v1/responses/"+bg, "sk-client-secret")
		if gjson.GetBytes(got, "status").Str == "cancelled" {
			if gjson.GetBytes(got, "output.0.content.0.text").Str == resumeText {
				t.Fatal("cancelled, yet it ran to its end")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica running it never stopped: %s", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

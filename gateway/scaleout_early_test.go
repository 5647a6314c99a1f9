package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// A client behind a load balancer that is not sticky reaches the other
// replica right after the response started: the response's anchor is in
// the shared store at once, and so must its log be (or be awaited), or the
// call goes to the upstream that owns the response, which never heard of
// a stream the gateway keeps (README "Durable").

// startStreamingBackground posts a streaming background request on h and
// returns its id, the sequence number of the last of the n events read,
// and a func that drops the connection.
func startStreamingBackground(t *testing.T, h *harness, n int) (string, int64, func()) {
	t.Helper()
	ctx, drop := context.WithCancel(context.Background())
	t.Cleanup(drop)
	src := openStream(t, ctx, h, `{"model":"gpt-fake-1","input":"hi","stream":true,"background":true}`)
	first, err := readEvents(src, n)
	if err != nil {
		t.Fatal(err)
	}
	return gjson.GetBytes(first[0], "response.id").Str, gjson.GetBytes(first[len(first)-1], "sequence_number").Int(), drop
}

// TestScaleOutResumeOnTheOtherReplicaRightAfterTheStart: a resume sent to
// the other replica the moment the client dropped the stream follows the
// live response to its end.
func TestScaleOutResumeOnTheOtherReplicaRightAfterTheStart(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	p.up.Enqueue(longAnswer(20 * time.Millisecond))
	id, last, drop := startStreamingBackground(t, p.r1, 4)
	drop()
	status, rest, body := p.r2.resume(clientKey, id, last)
	if status != http.StatusOK {
		t.Fatalf("resume on the other replica right after the start: %d %s", status, body)
	}
	if len(rest) == 0 {
		t.Fatal("the resume sent no events")
	}
	if got := gjson.GetBytes(rest[0], "sequence_number").Int(); got != last+1 {
		t.Fatalf("the resume began at event %d, want %d", got, last+1)
	}
	end := gjson.ParseBytes(rest[len(rest)-1])
	if end.Get("type").Str != "response.completed" || end.Get("response.output.0.content.0.text").Str != longText {
		t.Fatalf("the resume ended with %s", rest[len(rest)-1])
	}
}

// TestScaleOutCancelOnTheOtherReplicaRightAfterTheStart: a cancel sent to
// the other replica as soon as the response was created cancels it.
func TestScaleOutCancelOnTheOtherReplicaRightAfterTheStart(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	p.up.Enqueue(longAnswer(20 * time.Millisecond))
	id, _, _ := startStreamingBackground(t, p.r1, 4)
	status, answer := p.r2.call(http.MethodPost, "/v1/responses/"+id+"/cancel", clientKey)
	if status != http.StatusOK || gjson.GetBytes(answer, "status").Str != "cancelled" {
		t.Fatalf("cancel on the other replica right after the start: %d %s", status, answer)
	}
	_, got := p.r1.call(http.MethodGet, "/v1/responses/"+id, clientKey)
	if gjson.GetBytes(got, "status").Str != "cancelled" {
		t.Fatalf("GET on the replica that ran it after the cancel: %s", got)
	}
}

// TestScaleOutDeleteOnTheOtherReplicaRightAfterTheStart: a DELETE sent to
// the other replica as soon as the response was created deletes it, on
// both replicas.
func TestScaleOutDeleteOnTheOtherReplicaRightAfterTheStart(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	p.up.Enqueue(longAnswer(20 * time.Millisecond))
	id, _, _ := startStreamingBackground(t, p.r1, 4)
	status, answer := p.r2.call(http.MethodDelete, "/v1/responses/"+id, clientKey)
	if status != http.StatusOK || !gjson.GetBytes(answer, "deleted").Bool() {
		t.Fatalf("DELETE on the other replica right after the start: %d %s", status, answer)
	}
	eventually(t, "the response gone on the replica that ran it", func() bool {
		status, _ := p.r1.call(http.MethodGet, "/v1/responses/"+id, clientKey)
		return status == http.StatusNotFound
	})
}

package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

// TestScaleOutWebSocketResumeOnTheOtherReplicaRightAfterTheStart: a
// response.resume frame sent to the other replica the moment the client
// dropped the stream follows the live response to its end, as the SSE
// resume does (README "Durable").
func TestScaleOutWebSocketResumeOnTheOtherReplicaRightAfterTheStart(t *testing.T) {
	p := newDurablePair(t, 5*time.Second)
	p.up.Enqueue(longAnswer(20 * time.Millisecond))
	id, last, drop := startStreamingBackground(t, p.r1, 4)
	drop()
	c := p.r2.dialWS(nil)
	defer c.conn.CloseNow()
	c.send(`{"type":"response.resume","response_id":"` + id + `","starting_after":` + itoa(last) + `}`)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	next := last + 1
	for {
		_, data, err := c.conn.Read(ctx)
		if err != nil {
			t.Fatalf("the resume broke after event %d: %v", next-1, err)
		}
		ev := gjson.ParseBytes(data)
		if ev.Get("type").Str == "error" {
			t.Fatalf("resume on the other replica right after the start: %s", data)
		}
		if got := ev.Get("sequence_number").Int(); got != next {
			t.Fatalf("event %d where %d was due: %s", got, next, data)
		}
		next++
		if isTerminal(ev.Get("type").Str) {
			if ev.Get("type").Str != "response.completed" || ev.Get("response.output.0.content.0.text").Str != longText {
				t.Fatalf("the resume ended with %s", data)
			}
			return
		}
	}
}

package gateway_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestFirstTokenMeansContent: a route's first_token bounds the wait for the
// first CONTENT event, not for any event. Upstream A sends response.created
// and response.in_progress (Chat: the role-only chunk) at once and then
// nothing; first_token cancels it and B serves the request, A is not
// retried, and the client sees one stream: B's whole answer, one
// response.created, one response id, sequence_number contiguous from 0
// (Chat: one completion id, one role chunk). Whether the lifecycle hold
// expired before first_token (the client saw A's lifecycle events: a
// continuation with nothing to reproduce) or not (an invisible failover)
// makes no difference to the client but the model its answer names: the
// one it was first shown, A's once it saw A's lifecycle events or role
// chunk (README "Continuation"), else B's. The idle timeout is far away: the old
// meaning (first event) only ended A after it.
func TestFirstTokenMeansContent(t *testing.T) {
	cases := []struct {
		name             string
		hold, firstToken time.Duration
		continuationOff  bool
		// shown: A's lifecycle events reach a Responses client before
		// first_token (the hold expired); a Chat client always sees A's
		// role chunk at once.
		shown bool
	}{
		{name: "default hold, first_token 300ms", hold: 0, firstToken: 300 * time.Millisecond, shown: true},
		{name: "first_token shorter than the hold", hold: time.Second, firstToken: 200 * time.Millisecond},
		{name: "first_token longer than the hold", hold: 50 * time.Millisecond, firstToken: 300 * time.Millisecond, shown: true},
		{name: "continuation off, first_token shorter than the hold", hold: time.Second, firstToken: 200 * time.Millisecond, continuationOff: true},
		{name: "continuation off, first_token longer than the hold", hold: 50 * time.Millisecond, firstToken: 300 * time.Millisecond,
			continuationOff: true, shown: true},
	}
	for _, surface := range []string{"responses_sse", "responses_websocket", "chat_sse"} {
		for _, c := range cases {
			t.Run(surface+"/"+c.name, func(t *testing.T) {
				route := gateway.Route{Models: []string{"gpt-5*"}, FirstToken: c.firstToken,
					Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B", Model: "gpt-4.1"}}}
				if c.continuationOff {
					route.Continuation = gateway.ContinuationOff
				}
				h := newHarness(t, harnessConfig{
					upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
					opts:      gateway.Options{Routes: []gateway.Route{route}, LifecycleHold: c.hold, IdleTimeout: 20 * time.Second},
				})
				silent := upstreamtest.HangAfter(2)                      // response.created, response.in_progress
				silent.ChatFrames = upstreamtest.HangAfter(1).ChatFrames // the role-only chunk
				h.ups["A"].Enqueue(silent)

				start := time.Now()
				var evs []eventLike
				switch surface {
				case "responses_sse":
					_, evs = h.responsesStream(`{"model":"gpt-5-mini","input":"hi","stream":true}`)
				case "responses_websocket":
					c := h.dialWS(nil)
					evs = c.turn(`{"type":"response.create","model":"gpt-5-mini","input":"hi"}`)
				case "chat_sse":
					_, raw := h.streamEvents("/v1/chat/completions", `{"model":"gpt-5-mini","messages":[{"role":"user","content":"hi"}],"stream":true}`)
					for _, ev := range raw {
						evs = append(evs, eventLike{data: ev.Data, empty: ev.Done})
					}
				}
				took := time.Since(start)
				if took > 5*time.Second {
					t.Fatalf("took %v: A was not left at first_token (%v)", took, c.firstToken)
				}
				a, b := h.ups["A"].RequestCount(), h.ups["B"].RequestCount()
				// With continuation off, what the client saw of A ends the
				// stream with the gateway's terminal event, as before.
				wantFailed := c.continuationOff && (c.shown || surface == "chat_sse")
				wantB := 1
				if wantFailed {
					wantB = 0
				}
				if a != 1 || b != wantB {
					t.Fatalf("A called %d times, B %d; want 1, %d", a, b, wantB)
				}
				wantModel := "gpt-4.1" // B's
				if c.shown || surface == "chat_sse" {
					wantModel = "gpt-5-mini" // A's, which the client was shown
				}
				if surface == "chat_sse" {
					checkChatOneStream(t, evs, wantFailed, wantModel)
					return
				}
				checkResponsesOneStream(t, evs, wantFailed, wantModel)
			})
		}
	}
}

// checkResponsesOneStream checks that a Responses client saw one stream:
// one response.created first, sequence_number contiguous from 0, one
// response id and model (wantModel) throughout, and B's whole answer (or,
// wantFailed, a response.failed and no content).
func checkResponsesOneStream(t *testing.T, evs []eventLike, wantFailed bool, wantModel string) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	var text, id, last string
	created := 0
	for i, ev := range evs {
		var v struct {
			Type     string
			Seq      *int64 `json:"sequence_number"`
			Delta    string
			Response *struct{ ID, Model string }
		}
		if err := json.Unmarshal(ev.data, &v); err != nil {
			t.Fatalf("event %d is not JSON: %s", i, ev.data)
		}
		if v.Seq == nil || *v.Seq != int64(i) {
			t.Fatalf("event %d (%s) has sequence_number %v; want %d", i, v.Type, v.Seq, i)
		}
		switch v.Type {
		case "response.created":
			created++
			if i != 0 {
				t.Fatalf("response.created at %d", i)
			}
		case "response.output_text.delta":
			text += v.Delta
		}
		if v.Response != nil {
			if id == "" {
				id = v.Response.ID
			} else if v.Response.ID != id {
				t.Fatalf("%s carries response id %q; the client was shown %q", v.Type, v.Response.ID, id)
			}
			if !wantFailed && v.Response.Model != wantModel {
				t.Fatalf("%s names model %q; want %q throughout", v.Type, v.Response.Model, wantModel)
			}
		}
		last = v.Type
	}
	if created != 1 {
		t.Fatalf("%d response.created events; want 1", created)
	}
	if wantFailed {
		if last != "response.failed" || text != "" {
			t.Fatalf("ended with %s after %q; want response.failed and no content", last, text)
		}
		return
	}
	if last != "response.completed" || text != "Hello from B" {
		t.Fatalf("ended with %s, text %q; want B's whole answer", last, text)
	}
}

// checkChatOneStream checks that a Chat client saw one completion: one id
// and model (wantModel), one role chunk, B's whole answer and [DONE] (or,
// wantFailed, an error chunk and no content).
func checkChatOneStream(t *testing.T, evs []eventLike, wantFailed bool, wantModel string) {
	t.Helper()
	if len(evs) == 0 || !evs[len(evs)-1].empty {
		t.Fatalf("the stream did not end with [DONE] (%d events)", len(evs))
	}
	var text, id string
	roles, errs := 0, 0
	for _, ev := range evs[:len(evs)-1] {
		var v struct {
			ID      string
			Model   string
			Error   json.RawMessage
			Choices []struct {
				Delta struct {
					Role    string
					Content string
				}
			}
		}
		if err := json.Unmarshal(ev.data, &v); err != nil {
			t.Fatalf("chunk is not JSON: %s", ev.data)
		}
		if v.Error != nil {
			errs++
			continue
		}
		if id == "" {
			id = v.ID
		} else if v.ID != id {
			t.Fatalf("chunk id %q; the client was shown %q", v.ID, id)
		}
		if v.Model != wantModel {
			t.Fatalf("chunk names model %q; want %q throughout", v.Model, wantModel)
		}
		for _, ch := range v.Choices {
			if ch.Delta.Role != "" {
				roles++
			}
			text += ch.Delta.Content
		}
	}
	if wantFailed {
		if errs != 1 || text != "" {
			t.Fatalf("%d error chunks after %q; want one and no content", errs, text)
		}
		return
	}
	if errs != 0 || roles != 1 || text != "Hello from B" {
		t.Fatalf("%d role chunks, text %q; want one role chunk and B's whole answer", roles, text)
	}
}

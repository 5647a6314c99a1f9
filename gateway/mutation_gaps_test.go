package gateway_test

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// Tests that pin behaviour sampled mutation testing found unchecked.

// TestContinuedItemClosesCompleted: the message a continuation closes for
// the client (its output_item.done, written from what the client has) is
// completed, not left incomplete.
func TestContinuedItemClosesCompleted(t *testing.T) {
	for _, mode := range []string{gateway.ContinuationAuto, gateway.ContinuationRestart} {
		t.Run(mode, func(t *testing.T) {
			h := contHarness(t, mode, harnessConfig{})
			h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 4))
			_, evs := h.streamEvents("/v1/responses", `{"model":"m","input":"hi","stream":true}`)
			dones := 0
			for _, ev := range evs {
				data := gjson.ParseBytes(ev.Data)
				if data.Get("type").Str != "response.output_item.done" {
					continue
				}
				dones++
				if st := data.Get("item.status").Str; st != "completed" {
					t.Fatalf("output_item.done has status %q: %s", st, ev.Data)
				}
			}
			if dones != 1 {
				t.Fatalf("%d output_item.done events, want 1", dones)
			}
		})
	}
}

// TestResumeWithoutStartingAfterReplaysAll: a stream GET without
// starting_after replays the response's events from the first.
func TestResumeWithoutStartingAfterReplaysAll(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	h.ups["A"].Enqueue(slowAnswer())
	first := h.readSome("sk-client-secret", `{"model":"gpt-fake-1","input":"hi","stream":true}`, 3)
	id := gjson.GetBytes(first[0], "response.id").Str
	if id == "" {
		t.Fatalf("the first event names no response: %s", first[0])
	}
	_, all, _ := h.resume("sk-client-secret", id, -1) // waits for the end
	req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/responses/"+id+"?stream=true", nil)
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	var got []string
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		got = append(got, string(ev.Data))
	}
	if len(got) == 0 || len(got) != len(all) || gjson.Get(got[0], "sequence_number").Int() != 0 {
		t.Fatalf("got %d events (first %.80s), the log has %d", len(got), got, len(all))
	}
}

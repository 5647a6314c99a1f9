package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// A background response is one: every Response object its stream carries
// (response.created, in_progress, completed — live, and replayed by
// GET ?stream=true, which the SDKs' stream helpers build their final
// Response from) says background: true, as its retrieve does, whether the
// upstream speaks Responses (it never sees background) or Chat.
func TestBackgroundStreamSaysBackground(t *testing.T) {
	for _, protocol := range []string{"responses", "chat"} {
		t.Run(protocol, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: resumeOpts(), protocol: map[string]string{"A": protocol}})
			c := h.client()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			checkStream := func(what string, next func() bool, current func() responses.ResponseStreamEventUnion, errf func() error) string {
				t.Helper()
				var id string
				n := 0
				for next() {
					ev := current()
					switch ev.Type {
					case "response.created", "response.in_progress", "response.completed":
						n++
						id = ev.Response.ID
						if !ev.Response.Background {
							t.Errorf("%s: %s says background: %v, want true", what, ev.Type, ev.Response.Background)
						}
					}
				}
				if err := errf(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if n < 2 {
					t.Fatalf("%s: %d lifecycle/terminal events", what, n)
				}
				return id
			}
			live := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-fake-1", Background: openai.Bool(true),
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
			id := checkStream("live", live.Next, live.Current, live.Err)
			r, err := c.Responses.Get(ctx, id, responses.ResponseGetParams{})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Background {
				t.Errorf("retrieve says background: false")
			}
			replay := c.Responses.GetStreaming(ctx, id, responses.ResponseGetParams{})
			checkStream("replayed", replay.Next, replay.Current, replay.Err)
		})
	}
}

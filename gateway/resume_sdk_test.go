package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// TestResumeWithOpenAIGo: the official Go SDK runs a background response
// through Sluice in front of a Chat-only upstream — created, polled,
// resumed from a sequence number, its input items listed, deleted — and
// parses every object and event Sluice wrote.
func TestResumeWithOpenAIGo(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts(), protocol: map[string]string{"A": "chat"}})
	h.ups["A"].Enqueue(slowAnswer())
	c := h.client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-fake-1", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != responses.ResponseStatusInProgress || !r.Background || r.ID == "" {
		t.Fatalf("created: status %s, background %v, id %q", r.Status, r.Background, r.ID)
	}
	for r.Status != responses.ResponseStatusCompleted {
		time.Sleep(50 * time.Millisecond)
		if r, err = c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); err != nil {
			t.Fatal(err)
		}
	}
	if r.OutputText() != resumeText {
		t.Fatalf("polled: %q", r.OutputText())
	}

	stream := c.Responses.GetStreaming(ctx, r.ID, responses.ResponseGetParams{StartingAfter: openai.Int(3)})
	var seqs []int64
	var text string
	var last string
	for stream.Next() {
		ev := stream.Current()
		seqs = append(seqs, ev.SequenceNumber)
		if ev.Type == "response.output_text.delta" {
			text += ev.Delta
		}
		last = ev.Type
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seqs) == 0 || seqs[0] != 4 || last != "response.completed" || text == "" {
		t.Fatalf("resumed after 3: first seq %v, last %s, text %q", seqs, last, text)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("resumed sequence numbers have a gap: %v", seqs)
		}
	}

	items, err := c.Responses.InputItems.List(ctx, r.ID, responses.InputItemListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(items.Data) != 1 || items.Data[0].Type != "message" || items.Data[0].ID == "" {
		t.Fatalf("input items: %+v", items.Data)
	}

	if err := c.Responses.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("after delete: %v", err)
	}
}

package gateway

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// shortReplacePolicy replaces every delta containing "secret" with "x".
type shortReplacePolicy struct{ BuiltinPolicy }

func (shortReplacePolicy) StreamHookActive() bool { return true }

func (shortReplacePolicy) StreamEvent(_ context.Context, in hostabi.StreamEventInput) hostabi.StreamEventOutput {
	if in.HasDelta && strings.Contains(in.Delta, "secret") {
		return hostabi.StreamEventOutput{Verdict: hostabi.StreamReplace, HasDelta: true, Delta: "x"}
	}
	return hostabi.StreamEventOutput{}
}

// TestStreamHookOneCharacterEdit: a hook that shortens a part's whole text
// to one character has the done events and response.completed repeat that
// character.
func TestStreamHookOneCharacterEdit(t *testing.T) {
	s := streamHookServer(t, shortReplacePolicy{})
	sink := &recordSink{}
	cs := s.newClientStream(context.Background(), recordResponder{sink}, hookReq(), time.Now())
	defer cs.close()
	feed(t, cs, upstreamtest.ResponsesEvents("resp_1", "m", "secret", 1))
	for _, e := range sink.evs {
		d := gjson.ParseBytes(e)
		var text string
		switch d.Get("type").Str {
		case "response.output_text.done":
			text = d.Get("text").Str
		case "response.content_part.done":
			text = d.Get("part.text").Str
		case "response.output_item.done":
			text = d.Get("item.content.0.text").Str
		case "response.completed":
			text = d.Get("response.output.0.content.0.text").Str
		default:
			continue
		}
		if text != "x" {
			t.Fatalf("%s repeats %q, want the edited %q: %s", d.Get("type").Str, text, "x", e)
		}
	}
}

// TestStreamHookEditedItemDoneWithoutContent: an upstream whose
// output_item.done lists fewer content parts than it streamed (here none)
// is relayed as it is; the edited part it no longer lists is not looked up.
func TestStreamHookEditedItemDoneWithoutContent(t *testing.T) {
	s := streamHookServer(t, shortReplacePolicy{})
	sink := &recordSink{}
	cs := s.newClientStream(context.Background(), recordResponder{sink}, hookReq(), time.Now())
	defer cs.close()
	raw := upstreamtest.ResponsesEvents("resp_1", "m", "secret", 1)
	for i, e := range raw {
		if gjson.GetBytes(e, "type").Str == "response.output_item.done" {
			raw[i] = bytes.Replace(e, []byte(`"content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"secret"}]`), []byte(`"content":[]`), 1)
			if bytes.Equal(raw[i], e) {
				t.Fatalf("no content to empty in %s", e)
			}
		}
	}
	feed(t, cs, raw)
	last := gjson.ParseBytes(sink.evs[len(sink.evs)-1])
	if last.Get("type").Str != "response.completed" {
		t.Fatalf("last event %s", last.Raw)
	}
}

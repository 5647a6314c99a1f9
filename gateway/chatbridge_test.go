package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

func chatHarness(t *testing.T) *harness {
	st := openStore(t, t.TempDir())
	return newHarness(t, harnessConfig{opts: gateway.Options{Store: st, Conversations: st},
		protocol: map[string]string{"C": "chat"}, upstreams: []upstreamtest.Options{{Name: "C"}}})
}

func TestResponsesInFrontOfChatUpstream(t *testing.T) {
	h := chatHarness(t)
	client := h.client()
	ctx := context.Background()
	stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model:        "gpt-fake-1",
		Instructions: openai.String("be brief"),
		Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	var text, id string
	var types []string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text += ev.Delta
		}
		if ev.Type == "response.completed" {
			id = ev.Response.ID
			if ev.Response.OutputText() != "Hello from C" {
				t.Fatalf("completed output %q", ev.Response.OutputText())
			}
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if text != "Hello from C" || !strings.HasPrefix(id, "resp_") || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Fatalf("text %q id %q types %v", text, id, types)
	}
	reqs := h.ups["C"].Requests()
	if len(reqs) != 1 || reqs[0].Path != "/v1/chat/completions" {
		t.Fatalf("upstream saw %+v", reqs)
	}
	var chat struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(reqs[0].Body, &chat)
	if len(chat.Messages) != 2 || chat.Messages[0].Role != "system" || chat.Messages[1].Role != "user" {
		t.Fatalf("converted request %s", reqs[0].Body)
	}

	// Turn 2 names turn 1: the upstream never had it, the gateway expands it.
	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "gpt-fake-1",
		PreviousResponseID: openai.String(id),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("and again")},
	})
	if err != nil {
		t.Fatalf("turn 2: %v", err)
	}
	if resp.OutputText() != "Hello from C" {
		t.Fatalf("turn 2 output %q", resp.OutputText())
	}
	second := string(h.ups["C"].Requests()[1].Body)
	for _, want := range []string{`"hi"`, `"Hello from C"`, `"and again"`, `"assistant"`} {
		if !strings.Contains(second, want) {
			t.Fatalf("turn 2's Chat request lacks %s: %s", want, second)
		}
	}
	if strings.Contains(second, "previous_response_id") {
		t.Fatal("previous_response_id leaked to the Chat upstream")
	}
	// Turn 3 chains on the JSON turn 2.
	resp3, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-fake-1", PreviousResponseID: openai.String(resp.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("third")},
	})
	if err != nil || resp3.OutputText() != "Hello from C" {
		t.Fatalf("turn 3: %v", err)
	}
	if third := string(h.ups["C"].Requests()[2].Body); strings.Count(third, `"Hello from C"`) != 2 || !strings.Contains(third, `"and again"`) {
		t.Fatalf("turn 3 history: %s", third)
	}
}

func TestUnknownPreviousResponseForChatUpstream(t *testing.T) {
	h := chatHarness(t)
	for _, body := range []string{
		`{"model":"gpt-fake-1","input":"x","previous_response_id":"resp_nope"}`,
		`{"model":"gpt-fake-1","input":"x","stream":true,"previous_response_id":"resp_nope"}`,
	} {
		resp := h.post("/v1/responses", body)
		e := readError(t, resp)
		if resp.StatusCode != 400 || deref(e.Error.Code) != "previous_response_not_found" || deref(e.Error.Param) != "previous_response_id" {
			t.Fatalf("%d %+v", resp.StatusCode, e.Error)
		}
	}
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":[{"type":"message","role":"user","content":[{"type":"input_file","file_id":"f"}]}]}`)
	if e := readError(t, resp); resp.StatusCode != 400 || !strings.HasPrefix(deref(e.Error.Param), "input[0]") {
		t.Fatalf("input_file: %d %+v", resp.StatusCode, e.Error)
	}
	if n := h.ups["C"].RequestCount(); n != 0 {
		t.Fatalf("%d upstream calls for rejected requests", n)
	}
}

func TestChatUpstreamOverWebSocketWithStoreFalse(t *testing.T) {
	h := chatHarness(t)
	c := h.dialWS(nil)
	frame := func(prev string) string {
		f := `{"type":"response.create","model":"gpt-fake-1","store":false,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"ping"}]}]`
		if prev != "" {
			f += `,"previous_response_id":"` + prev + `"`
		}
		return f + "}"
	}
	evs := c.turn(frame(""))
	id := completedIDOf(evs)
	if evs[len(evs)-1].typ != "response.completed" || id == "" {
		t.Fatalf("turn 1 %v", evs)
	}
	evs = c.turn(frame(id))
	if evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("turn 2 on the same socket: %s", evs[len(evs)-1].data)
	}
	if second := string(h.ups["C"].Requests()[1].Body); !strings.Contains(second, "Hello from C") {
		t.Fatalf("turn 2 lacks turn 1's answer: %s", second)
	}
	// store:false items live only as long as the socket: another socket
	// cannot chain on them.
	other := h.dialWS(nil)
	evs = other.turn(frame(id))
	if last := evs[len(evs)-1]; last.typ != "error" || last.code != "previous_response_not_found" || errorStatus(last) != http.StatusBadRequest {
		t.Fatalf("store:false turn visible elsewhere: %s", last.data)
	}
}

func TestWarmUpForChatUpstreamIsAnsweredLocally(t *testing.T) {
	h := chatHarness(t)
	c := h.dialWS(nil)
	// Codex opens a turn with generate:false; the Chat upstream has no such
	// mode, so the gateway answers it without a (billed) completion.
	evs := c.turn(`{"type":"response.create","model":"gpt-fake-1","generate":false,"instructions":"be brief","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"warm"}]}]}`)
	if evs[0].typ != "response.created" || evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("warm-up frames %v", evs)
	}
	warm := completedIDOf(evs)
	if n := h.ups["C"].RequestCount(); n != 0 {
		t.Fatalf("the warm-up reached the Chat upstream (%d requests)", n)
	}
	// The next frame chains on the warm-up's id; the upstream sees its items.
	evs = c.turn(createFrame(warm))
	if evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("chained turn: %s", evs[len(evs)-1].data)
	}
	if body := string(h.ups["C"].Requests()[0].Body); !strings.Contains(body, "warm") || !strings.Contains(body, `"hi"`) {
		t.Fatalf("the chained Chat request lacks the warm-up's input: %s", body)
	}
}

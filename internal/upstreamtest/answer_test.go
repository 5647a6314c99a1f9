package upstreamtest

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

const answerText = "one two three four five six"

func deltasOf(evs []map[string]any) string {
	var b strings.Builder
	for _, e := range evs {
		if e["type"] == "response.output_text.delta" {
			b.WriteString(str(e["delta"]))
		}
	}
	return b.String()
}

func chatTextOf(evs []map[string]any) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(str(path(e, "choices", 0, "delta", "content")))
	}
	return b.String()
}

// TestAnswerContinuesAPrefill: a Text script answers a request ending with
// an assistant message that begins the answer with the rest only; any other
// request with the whole answer; on Responses (SSE and WebSocket) and Chat.
func TestAnswerContinuesAPrefill(t *testing.T) {
	s := NewServer(Options{Name: "A"})
	defer s.Close()
	c := newClient(t)
	prefill := `{"model":"m","stream":true,"input":[{"role":"user","content":"hi"},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"one two"}]}]}`
	for _, tt := range []struct{ body, want string }{
		{`{"model":"m","stream":true,"input":"hi"}`, answerText},
		{prefill, " three four five six"},
		{strings.Replace(prefill, "one two", "uno", 1), answerText}, // not a prefix: the whole answer
	} {
		s.Enqueue(Answer(answerText, 2))
		_, b, err := c.post(s.URL+"/responses", tt.body)
		if err != nil {
			t.Fatal(err)
		}
		evs := decodeEvents(t, parseSSE(t, b))
		if got := deltasOf(evs); got != tt.want || evs[len(evs)-1]["type"] != "response.completed" {
			t.Fatalf("%s: got %q ending %v", tt.body, got, evs[len(evs)-1]["type"])
		}
		if u := path(evs[len(evs)-1], "response", "usage", "output_tokens"); num(u) != 2 {
			t.Fatalf("usage %v", u)
		}
	}
	s.Enqueue(Answer(answerText, 3))
	_, b, _ := c.post(s.URL+"/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},`+
		`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"one two three"}]}`)
	var chunks []map[string]any
	for _, blk := range parseSSE(t, b) {
		if blk.Data != "[DONE]" {
			chunks = append(chunks, mustJSON(t, []byte(blk.Data)))
		}
	}
	if got := chatTextOf(chunks); got != " four five six" || num(path(chunks[len(chunks)-1], "usage", "completion_tokens")) != 3 {
		t.Fatalf("chat prefill answered %q", got)
	}
	ws := dialWS(t, s, nil)
	s.Enqueue(Answer(answerText, 2))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	frame := strings.Replace(strings.Replace(prefill, `"stream":true`, `"type":"response.create"`, 1), "one two", "one two three four", 1)
	if err := ws.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		t.Fatal(err)
	}
	evs, err := readWS(t, ws)
	if err != nil || deltasOf(evs) != " five six" {
		t.Fatalf("websocket prefill answered %q (%v)", deltasOf(evs), err)
	}
}

// TestAnswerStopsAfterDeltas: cut, stalled and failed after n deltas.
func TestAnswerStopsAfterDeltas(t *testing.T) {
	s := NewServer(Options{Name: "A"})
	defer s.Close()
	c := newClient(t)
	body := `{"model":"m","stream":true,"input":"hi"}`

	s.Enqueue(Answer(answerText, 6).CutAfterDeltas(2))
	_, b, err := c.post(s.URL+"/responses", body)
	evs := decodeEvents(t, parseSSE(t, b))
	if err == nil || deltasOf(evs) != "one two" || len(evs) != 6 {
		t.Fatalf("cut: %d events %q, read error %v", len(evs), deltasOf(evs), err)
	}

	s.Enqueue(Answer(answerText, 6).StallAfterDeltas(3))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, b, err = c.do(ctx, http.MethodPost, s.URL+"/responses", body)
	if err == nil || deltasOf(decodeEvents(t, parseSSE(t, b))) != "one two three" {
		t.Fatalf("stall: %q, %v", b, err)
	}

	s.Enqueue(Answer(answerText, 6).FailAfterDeltas(2, "server_error"))
	_, b, err = c.post(s.URL+"/responses", body)
	evs = decodeEvents(t, parseSSE(t, b))
	last := evs[len(evs)-1]
	if err != nil || deltasOf(evs) != "one two" || last["type"] != "response.failed" || num(last["sequence_number"]) != len(evs)-1 ||
		str(path(last, "response", "error", "code")) != "server_error" || num(path(last, "response", "usage", "output_tokens")) != 2 {
		t.Fatalf("fail: %v", last)
	}

	s.Enqueue(Answer(answerText, 6).FailAfterDeltas(2, "server_error"))
	_, b, _ = c.post(s.URL+"/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	blocks := parseSSE(t, b)
	if len(blocks) != 5 || !strings.Contains(blocks[3].Data, `"code":"server_error"`) || blocks[4].Data != "[DONE]" {
		t.Fatalf("chat fail: %v", blocks)
	}
}

// TestRefusePrefill: an upstream that refuses a trailing assistant message
// answers 400 (an error frame on a WebSocket) without consuming a script.
func TestRefusePrefill(t *testing.T) {
	s := NewServer(Options{Name: "A", RefusePrefill: true})
	defer s.Close()
	c := newClient(t)
	s.Enqueue(Answer(answerText, 2))
	resp, b, _ := c.post(s.URL+"/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"one"}]}`)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "prefill") || s.Pending() != 1 {
		t.Fatalf("%d %s (pending %d)", resp.StatusCode, b, s.Pending())
	}
	ws := dialWS(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	frame := `{"type":"response.create","model":"m","input":[{"role":"user","content":"hi"},{"role":"assistant","content":"one"}]}`
	if err := ws.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		t.Fatal(err)
	}
	evs, err := readWS(t, ws)
	if err != nil || len(evs) != 1 || evs[0]["type"] != "error" || num(evs[0]["status"]) != 400 || s.Pending() != 1 {
		t.Fatalf("websocket: %v %v", evs, err)
	}
	resp, b, _ = c.post(s.URL+"/responses", `{"model":"m","stream":true,"input":"hi"}`) // no prefill: served
	if resp.StatusCode != http.StatusOK || deltasOf(decodeEvents(t, parseSSE(t, b))) != answerText {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

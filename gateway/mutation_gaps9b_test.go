package gateway_test

// Resumable-stream and stream-hook rules that mutation testing showed no
// other test pinned down: the bound on a log's input items, the operator's
// log when deleting a durable log fails, a resumer keeping a detached
// stream alive past its grace, a resume of a stored log that has nothing
// after starting_after, and the part indexes a stream hook is told.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// TestGaps9bInputOfExactlyTheLogBoundIsKept: streams.resume_max_bytes
// bounds the input items a response keeps for input_items inclusively: an
// input exactly that long is listed, one byte longer is not.
func TestGaps9bInputOfExactlyTheLogBoundIsKept(t *testing.T) {
	input := func(pad int) string {
		return `[{"type":"message","role":"user","content":"` + strings.Repeat("a", pad) + `"}]`
	}
	const bound = 4096
	pad := bound - len(input(0))
	for _, tt := range []struct {
		input string
		kept  bool
	}{
		{input(pad), true},
		{input(pad + 1), false},
	} {
		opts := resumeOpts()
		opts.Resume.MaxBytes = bound
		h := newHarness(t, harnessConfig{opts: opts})
		id := h.createResponse(`{"model":"gpt-fake-1","input":` + tt.input + `}`)
		status, body := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items", "sk-client-secret")
		if status != http.StatusOK {
			t.Fatalf("input_items of a %d-byte input: %d %s", len(tt.input), status, body)
		}
		n := gjson.GetBytes(body, "data.#").Int()
		if kept := n == 1 && len(gjson.GetBytes(body, "data.0.content.0.text").Str) == len(tt.input)-len(input(0)); kept != tt.kept {
			t.Fatalf("a %d-byte input with a %d-byte bound: %d items listed, want kept %v\n%.300s", len(tt.input), bound, n, tt.kept, body)
		}
	}
}

// g9bFailingDelete is a stream log store whose deletes all fail.
type g9bFailingDelete struct{ store.StreamLogStore }

func (g9bFailingDelete) DeleteStreamLog(context.Context, string) error {
	return errors.New("disk full")
}

// TestGaps9bDurableLogDeleteFailureIsLoggedOnlyWhenItFails: DELETE of a
// response with durable streams tells the operator "deleting a stream log
// failed" when the store could not delete its log, and never when it
// could. The delete is done before the client is answered.
func TestGaps9bDurableLogDeleteFailureIsLoggedOnlyWhenItFails(t *testing.T) {
	for _, failing := range []bool{false, true} {
		var st store.StreamLogStore = openStore(t, t.TempDir())
		if failing {
			st = g9bFailingDelete{st}
		}
		opts := resumeOpts()
		opts.Resume.Store = st
		h := newHarness(t, harnessConfig{opts: opts})
		id := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
		status, body := h.call(http.MethodDelete, "/v1/responses/"+id, "sk-client-secret")
		if status != http.StatusOK || gjson.GetBytes(body, "deleted").Type != gjson.True {
			t.Fatalf("store failing %v: DELETE %d %s", failing, status, body)
		}
		if logged := strings.Contains(h.logs.String(), "deleting a stream log failed"); logged != failing {
			t.Fatalf("store failing %v: \"deleting a stream log failed\" logged %v\n%s", failing, logged, grepLines(h.logs.String(), "stream log"))
		}
	}
}

// TestGaps9bResumerKeepsADetachedStreamPastItsGrace: a stream whose client
// left is given up after the detach grace only when nobody follows it; a
// resumer attached within the grace gets the stream to its completed end
// even though it lasts seconds longer than the grace.
func TestGaps9bResumerKeepsADetachedStreamPastItsGrace(t *testing.T) {
	opts := resumeOpts()
	opts.Resume.DetachGrace = 2 * time.Second // the resume below attaches well within it, even under -race
	h := newHarness(t, harnessConfig{opts: opts})
	slow := upstreamtest.Answer(resumeText, 12)
	slow.Gap = 300 * time.Millisecond // about 19 frames: the stream runs ~6 s, past the grace
	h.ups["A"].Enqueue(slow)
	first := h.readSome("sk-client-secret", `{"model":"gpt-fake-1","input":"hi","stream":true}`, 3)
	id := gjson.GetBytes(first[0], "response.id").Str
	if o := checkResponsesEvents(t, h.resumeAfter("sk-client-secret", id, first)); o.text != resumeText || o.terminal != "response.completed" {
		t.Fatalf("a followed detached stream ended %s with %q; want it completed past its grace", o.terminal, o.text)
	}
}

// TestGaps9bResumeOfAStoredLogWithNothingAfterStartingAfter: with durable
// streams, resuming a log this gateway does not hold (its writer stopped
// before the end) from its last event answers at once with the spec's
// error event numbered after it, not a stream that never ends.
func TestGaps9bResumeOfAStoredLogWithNothingAfterStartingAfter(t *testing.T) {
	st := openStore(t, t.TempDir())
	opts := resumeOpts()
	opts.Resume.Store = st
	h := newHarness(t, harnessConfig{opts: opts})
	id := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	ctx := context.Background()
	if err := st.PutStreamLog(ctx, store.StreamLog{ResponseID: "resp_g9b_stopped", Owner: ownerOf(t, st, id),
		Status: "in_progress", ExpiresAt: time.Now().Add(time.Hour), Response: []byte(`{"id":"resp_g9b_stopped","status":"in_progress"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendStreamEvents(ctx, "resp_g9b_stopped", 0, []store.StreamEvent{
		{Name: "response.created", Data: []byte(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_g9b_stopped"}}`)},
		{Seq: 1, Name: "response.in_progress", Data: []byte(`{"type":"response.in_progress","sequence_number":1,"response":{"id":"resp_g9b_stopped"}}`)}}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		status int
		evs    [][]byte
		body   string
	}
	got := make(chan answer, 1)
	go func() {
		status, evs, body := h.resume("sk-client-secret", "resp_g9b_stopped", 1)
		got <- answer{status, evs, body}
	}()
	select {
	case a := <-got:
		if a.status != http.StatusOK || len(a.evs) != 1 || gjson.GetBytes(a.evs[0], "type").Str != "error" ||
			gjson.GetBytes(a.evs[0], "sequence_number").Int() != 2 {
			t.Fatalf("resume after the last stored event: %d %q %s", a.status, a.evs, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a resume after the last event of a stopped log got no answer in 10 s")
	}
}

// g9bIndexPolicy is a stream hook that passes every event and records the
// output and content indexes it is told for each hooked event type.
type g9bIndexPolicy struct {
	gateway.BuiltinPolicy
	mu   sync.Mutex
	seen map[string][][2]int
}

func (*g9bIndexPolicy) StreamHookActive() bool { return true }

func (p *g9bIndexPolicy) StreamEvent(_ context.Context, in hostabi.StreamEventInput) hostabi.StreamEventOutput {
	p.mu.Lock()
	defer p.mu.Unlock()
	// The input's strings may view the upstream reader's buffer, valid only
	// during the call: a policy that keeps one copies it.
	typ := strings.Clone(in.Type)
	p.seen[typ] = append(p.seen[typ], [2]int{in.OutputIndex, in.ContentIndex})
	return hostabi.StreamEventOutput{}
}

// TestGaps9bStreamHookIsToldThePartIndexes: the stream_event hook gets an
// event's output_index and content_index (summary_index for a summary) as
// the upstream numbered them, and -1 for an index the event lacks.
func TestGaps9bStreamHookIsToldThePartIndexes(t *testing.T) {
	p := &g9bIndexPolicy{seen: map[string][][2]int{}}
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: p}})
	at := `"item_id":"msg_a","output_index":1`
	part := `{"type":"output_text","annotations":[],"text":"Hello world"}`
	item := `{"id":"msg_a","type":"message","status":"completed","content":[` + part + `],"role":"assistant"}`
	evs := []string{`{"type":"response.created","response":` + g6Resp("resp_a", "in_progress", "[]") + `}`,
		`{"type":"response.output_item.added","output_index":1,"item":{"id":"msg_a","type":"message","status":"in_progress","content":[],"role":"assistant"}}`,
		`{"type":"response.content_part.added",` + at + `,"content_index":2,"part":{"type":"output_text","annotations":[],"text":""}}`,
		`{"type":"response.output_text.delta",` + at + `,"content_index":2,"delta":"Hello"}`,
		`{"type":"response.reasoning_summary_text.delta",` + at + `,"summary_index":3,"delta":" odd"}`,
		`{"type":"response.refusal.delta","item_id":"msg_a","delta":" none"}`,
		`{"type":"response.output_text.done",` + at + `,"content_index":2,"text":"Hello world"}`,
		`{"type":"response.content_part.done",` + at + `,"content_index":2,"part":` + part + `}`,
		`{"type":"response.output_item.done","output_index":1,"item":` + item + `}`,
		`{"type":"response.completed","response":` + g6Resp("resp_a", "completed", "["+item+"]") + `}`}
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: g6Frames(evs...)})
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for typ, want := range map[string][2]int{
		"response.output_text.delta":            {1, 2},
		"response.reasoning_summary_text.delta": {1, 3},
		"response.refusal.delta":                {-1, -1},
		"response.output_text.done":             {1, 2},
	} {
		if got := p.seen[typ]; len(got) != 1 || got[0] != want {
			t.Errorf("%s: the hook was told (output_index, content_index) %v, want %v", typ, got, want)
		}
	}
}

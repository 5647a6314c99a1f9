package gateway_test

// Rules that mutation testing showed no other test pinned down: odd part
// indexes from an upstream, the status of a continued stream's terminal
// event, the replay count a policy is told after a second continuation, a
// restart redoing reasoning the client saw complete, and the Chat [DONE]
// reaching the client before the request's work is over.
//
// Mutant left untested, as no input can tell it apart:
//   - scrub.go escapeEnd (j+1 < len(b) -> j-1 < len(b)): both callers reach
//     it only through escapeStart, which looks at a backslash before an
//     index inside b (the match's start, or its end when end < len(b)), so
//     the backslash is never b's last byte and b[j+1] always exists.

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestNegativeContentIndexIsSkipped: an upstream delta that names a
// negative content_index or summary_index (no part the client was shown)
// is skipped as an unparseable event (README, the terminal-event rule), and
// the stream completes with the text of the real part, which the client's
// text agrees with.
func TestNegativeContentIndexIsSkipped(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	at := `"item_id":"msg_a","output_index":0`
	evs := []string{`{"type":"response.created","response":` + g6Resp("resp_a", "in_progress", "[]") + `}`}
	evs = append(evs, g6Message("msg_a", 0, []string{"Hello"}, false)...)
	evs = append(evs,
		`{"type":"response.output_text.delta",`+at+`,"content_index":-1,"delta":" stray"}`,
		`{"type":"response.reasoning_summary_text.delta",`+at+`,"summary_index":-1,"delta":" odd"}`,
		`{"type":"response.output_text.delta",`+at+`,"content_index":0,"delta":" world"}`)
	part := `{"type":"output_text","annotations":[],"text":"Hello world"}`
	item := `{"id":"msg_a","type":"message","status":"completed","content":[` + part + `],"role":"assistant"}`
	evs = append(evs,
		`{"type":"response.output_text.done",`+at+`,"content_index":0,"text":"Hello world"}`,
		`{"type":"response.content_part.done",`+at+`,"content_index":0,"part":`+part+`}`,
		`{"type":"response.output_item.done","output_index":0,"item":`+item+`}`,
		`{"type":"response.completed","response":`+g6Resp("resp_a", "completed", "["+item+"]")+`}`)
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: g6Frames(evs...)})
	s := g6Post(t, h, `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if s.terminal.typ != "response.completed" {
		t.Fatalf("terminal %s %s: %s", s.terminal.typ, s.code, s.terminal.data)
	}
	if s.text != "Hello world" {
		t.Fatalf("client got deltas %q, want the stray ones skipped", s.text)
	}
	for _, ev := range s.evs {
		if strings.Contains(string(ev.data), " odd") {
			t.Fatalf("relayed %s", ev.data)
		}
	}
}

// TestContinuedTerminalWithoutStatus: when the target that continued a
// stream ends with a terminal response that has no status, the client's
// terminal event still says one, from the event's type.
func TestContinuedTerminalWithoutStatus(t *testing.T) {
	h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	evs := []string{`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`}
	evs = append(evs, g6Message("msg_b", 0, []string{"The quick", " brown fox", " jumps over the lazy dog"}, true)...)
	evs = append(evs, `{"type":"response.completed","response":{"id":"resp_b","object":"response","created_at":1767225600,"model":"gpt-fake-1","output":[]}}`)
	h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(evs...)})
	s := g6Post(t, h, `{"model":"m","input":"hi","stream":true}`)
	if s.terminal.typ != "response.completed" || s.text != fullAnswer {
		t.Fatalf("client got %q ending %s: %s", s.text, s.terminal.typ, s.terminal.data)
	}
	if st := gjson.GetBytes(s.terminal.data, "response.status"); st.Str != "completed" {
		t.Fatalf("terminal response status %s, want \"completed\": %s", st.Raw, s.terminal.data)
	}
}

// TestSecondContinuationCountsTheFirst: a stream continued once whose
// continuation fails after adding content is put to the replay policy
// again, and the policy is told one replay was already made (the first
// continuation), so a policy can cap how often a stream is continued.
func TestSecondContinuationCountsTheFirst(t *testing.T) {
	p := &overridePolicy{override: func(hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) { return 0, false }}
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}, {Name: "C"}},
		opts: gateway.Options{Policy: p, Routes: []gateway.Route{{Models: []string{"m"}, Stall: 300 * time.Millisecond,
			Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}, {Upstream: "C"}}}}},
	})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3)) // "The quick brown"
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 6).CutAfterDeltas(2)) // " fox" " jumps"
	h.ups["C"].Enqueue(upstreamtest.Answer(fullAnswer, 2))
	s := g6Post(t, h, `{"model":"m","input":"hi","stream":true}`)
	if s.terminal.typ != "response.completed" || s.text != fullAnswer {
		t.Fatalf("client got %q ending %s %s", s.text, s.terminal.typ, s.code)
	}
	var counts []int
	for _, in := range p.asked() {
		if in.Phase == hostabi.PhaseAfterContent {
			counts = append(counts, in.ReplayCount)
		}
	}
	if len(counts) != 2 || counts[0] != 0 || counts[1] != 1 {
		t.Fatalf("after-content replay counts %v, want [0 1]", counts)
	}
}

// TestRestartRedoingDoneReasoningClosesItOnce: a restart that redoes a
// reasoning item the client already saw done adds nothing for it: every
// item the client was shown is done exactly once, the reasoning too. And a
// reasoning item the client saw open is closed from what it was shown when
// the restart ends its own, before the message goes on.
func TestRestartRedoingDoneReasoningClosesItOnce(t *testing.T) {
	reasoning := func(id string, done bool) []string {
		item := `{"id":"` + id + `","type":"reasoning","summary":[]}`
		evs := []string{`{"type":"response.output_item.added","output_index":0,"item":` + item + `}`}
		if done {
			evs = append(evs, `{"type":"response.output_item.done","output_index":0,"item":`+item+`}`)
		}
		return evs
	}
	for _, pDone := range []bool{true, false} {
		h := contHarness(t, gateway.ContinuationRestart, harnessConfig{})
		p := []string{`{"type":"response.created","response":` + g6Resp("resp_p", "in_progress", "[]") + `}`}
		p = append(p, reasoning("rs_p", pDone)...)
		p = append(p, g6Message("msg_p", 1, []string{"The", " quick", " brown"}, false)...)
		h.ups["P"].Enqueue(upstreamtest.Script{Frames: g6Frames(p...), End: upstreamtest.EndCut})
		b := []string{`{"type":"response.created","response":` + g6Resp("resp_b", "in_progress", "[]") + `}`}
		b = append(b, reasoning("rs_b", true)...)
		b = append(b, g6Message("msg_b", 1, []string{"The quick", " brown fox", " jumps over the lazy dog"}, true)...)
		b = append(b, `{"type":"response.completed","response":`+g6Resp("resp_b", "completed", "[]")+`}`)
		h.ups["B"].Enqueue(upstreamtest.Script{Frames: g6Frames(b...)})
		s := g6Post(t, h, `{"model":"m","input":"hi","stream":true}`)
		if s.terminal.typ != "response.completed" || s.text != fullAnswer {
			t.Fatalf("reasoning done %v: client got %q ending %s %s", pDone, s.text, s.terminal.typ, s.code)
		}
		var done []string // the ids of output_item.done events, in order
		firstB := -1      // the first event of the message after the restart
		for i, ev := range s.evs {
			switch ev.typ {
			case "response.output_item.done":
				done = append(done, gjson.GetBytes(ev.data, "item.id").Str)
			case "response.output_text.delta":
				if firstB < 0 && strings.Contains(gjson.GetBytes(ev.data, "delta").Str, "fox") {
					firstB = i
				}
			}
		}
		if len(done) != 2 || done[0] != "rs_p" || done[1] != "msg_p" {
			t.Fatalf("reasoning done %v: items done %v, want rs_p then msg_p, once each", pDone, done)
		}
		if !pDone {
			for i, ev := range s.evs {
				if ev.typ == "response.output_item.done" && gjson.GetBytes(ev.data, "item.id").Str == "rs_p" && i > firstB {
					t.Fatalf("the open reasoning was closed at event %d, after the restart's new text at %d", i, firstB)
				}
			}
		}
	}
}

// g8cHeldLog is a log writer that holds the access log's line of a request
// until release is closed: the request's handler cannot return before then.
type g8cHeldLog struct {
	mu      sync.Mutex
	buf     strings.Builder
	release chan struct{}
}

func (l *g8cHeldLog) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "access: request") {
		<-l.release
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// TestChatDoneReachesTheClientBeforeTheRequestEnds: a Chat stream's
// [DONE] is flushed to the client when it is written, not left in a buffer
// until the handler returns: the client has it while the request's access
// log line is still being written.
func TestChatDoneReachesTheClientBeforeTheRequestEnds(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	logs := &g8cHeldLog{release: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(logs.release)
		}
	}
	defer release()
	logger := hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})
	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: up.URL}}, upstream.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	pool.ProbeAll(context.Background())
	// An upstream that goes silent after the finish chunk, without [DONE]:
	// the finish chunk went out when the pump blocked on the upstream, and
	// at the idle timeout the gateway writes [DONE] itself, the last write
	// of the stream.
	frames := upstreamtest.ChatStream("chatcmpl-a", "gpt-fake-1", "Hello from A", 3)
	up.Enqueue(upstreamtest.Script{ChatFrames: frames[:len(frames)-1], End: upstreamtest.EndHang})
	gw, err := gateway.New(gateway.Options{Pool: pool, Logger: logger, IdleTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	base := serveGateway(t, gw)
	t.Cleanup(release) // runs first: the held log line lets the handler return

	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sawDone := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "data: [DONE]" {
				sawDone <- true
				return
			}
		}
		sawDone <- false
	}()
	// The access line is held, so the handler is still running: only a
	// flushed [DONE] can reach the client now. The bound only keeps a
	// failing run from hanging.
	select {
	case ok := <-sawDone:
		if !ok {
			t.Fatal("the stream ended without [DONE]")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("[DONE] did not reach the client while the request was still running")
	}
}

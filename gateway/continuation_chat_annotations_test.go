package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestContinuedChatStreamAnnotations is TestContinuedStreamKeepsAnnotations
// for a Chat client: a Chat upstream's answer cites a source (a chunk's
// delta.annotations) and is cut; a second Chat target continues it, by a
// prefill or a restart, with or without a citation of its own. The
// annotations the client collects from every chunk are each citation once —
// a restart's redo of the one the client has is not sent again — with
// indexes that count from the start of the client's message: a prefill's,
// given relative to its own text, are moved past the client's text, in
// characters (the client's text has a two-byte "é": a byte count would be
// one more). README "Continuation".
func TestContinuedChatStreamAnnotations(t *testing.T) {
	first, more, citeA, citeTwoOwn, citeTwoWhole := citedFirst, citedMore, citedA, citedTwoOwn, citedTwoWhole
	chunk, text, annotations, finish := citedChunk, citedText, citedAnnotations, citedFinish()

	cases := []struct {
		name, mode string
		backup     []upstreamtest.Frame
		want       []string // the message's annotations, in order
	}{
		{"prefill", gateway.ContinuationAuto,
			[]upstreamtest.Frame{chunk(`{"role":"assistant","content":"` + more + `"}`), finish, chatDone}, []string{citeA}},
		{"prefill with its own citation", gateway.ContinuationAuto,
			[]upstreamtest.Frame{chunk(`{"role":"assistant","content":"` + more + `"}`), annotations(citeTwoOwn), finish, chatDone},
			[]string{citeA, citeTwoWhole}},
		{"restart", gateway.ContinuationRestart,
			[]upstreamtest.Frame{chunk(`{"role":"assistant","content":"` + first + `"}`), annotations(citeA), text(more), finish, chatDone},
			[]string{citeA}},
		{"restart with its own citation", gateway.ContinuationRestart,
			[]upstreamtest.Frame{chunk(`{"role":"assistant","content":"` + first + `"}`), annotations(citeA), text(more), annotations(citeTwoWhole), finish, chatDone},
			[]string{citeA, citeTwoWhole}},
		{"restart with its redo and its own citation in one chunk", gateway.ContinuationRestart,
			[]upstreamtest.Frame{chunk(`{"role":"assistant","content":"` + first + `"}`), text(more), annotations(citeA + "," + citeTwoWhole), finish, chatDone},
			[]string{citeA, citeTwoWhole}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := "[" + strings.Join(c.want, ",") + "]"
			h := citedCutHarness(t, c.mode, c.backup)

			resp, evs := h.streamEvents("/v1/chat/completions",
				`{"model":"m","stream":true,"messages":[{"role":"user","content":"search"}]}`)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if role, _ := lastMessage(h.ups["B"].Requests()[0]); (role == "assistant") != (c.mode == gateway.ContinuationAuto) {
				t.Fatalf("the continuation's last message is the %q's: not the %s wanted", role, c.name)
			}
			got, finishReason, done := "", "", false
			var cited []string
			for _, ev := range evs {
				if string(ev.Data) == "[DONE]" {
					done = true
					continue
				}
				choice := gjson.GetBytes(ev.Data, "choices.0")
				got += choice.Get("delta.content").Str
				choice.Get("delta.annotations").ForEach(func(_, a gjson.Result) bool {
					cited = append(cited, a.Raw)
					return true
				})
				if r := choice.Get("finish_reason").Str; r != "" {
					finishReason = r
				}
			}
			if !done || finishReason != "stop" {
				t.Fatalf("stream ended with finish_reason %q, [DONE] %v", finishReason, done)
			}
			if got != first+more {
				t.Errorf("client text %q, want %q", got, first+more)
			}
			if a := "[" + strings.Join(cited, ",") + "]"; a != want {
				t.Errorf("the client's delta.annotations carried %s, want %s", a, want)
			}
		})
	}
}

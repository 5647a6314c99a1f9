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
	b := citedBackups()
	chunk, text, annotations, finish := citedChunk, citedText, citedAnnotations, citedFinish()
	cases := []struct {
		name, mode string
		backup     []upstreamtest.Frame
		want       []string // the message's annotations, in order
	}{
		{"prefill", gateway.ContinuationAuto, b.prefill, []string{citedA}},
		{"prefill with its own citation", gateway.ContinuationAuto, b.prefillOwn, []string{citedA, citedTwoWhole}},
		{"restart", gateway.ContinuationRestart, b.restart, []string{citedA}},
		{"restart with its own citation", gateway.ContinuationRestart, b.restartOwn, []string{citedA, citedTwoWhole}},
		{"restart with its redo and its own citation in one chunk", gateway.ContinuationRestart,
			[]upstreamtest.Frame{chunk(`{"role":"assistant","content":"` + citedFirst + `"}`), text(citedMore), annotations(citedA + "," + citedTwoWhole), finish, chatDone},
			[]string{citedA, citedTwoWhole}},
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
			if got != citedFirst+citedMore {
				t.Errorf("client text %q, want %q", got, citedFirst+citedMore)
			}
			if a := "[" + strings.Join(cited, ",") + "]"; a != want {
				t.Errorf("the client's delta.annotations carried %s, want %s", a, want)
			}
		})
	}
}

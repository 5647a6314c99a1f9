package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestContinuedStreamKeepsAnnotations: a Chat upstream's answer cites a
// source (a url_citation the client gets as annotation.added 0) and is cut;
// a second Chat target continues it, by a prefill or a restart, with or
// without a citation of its own. Every annotation the client was sent stays
// in its text part — in content_part.done, output_item.done, the terminal
// Response and GET — followed by the continuation's own, whose
// annotation.added continues the numbering (1) and whose indexes count from
// the start of the client's part: a prefill's, given relative to its own
// text, are moved past the client's text before it, in characters (the
// client's text has a two-byte "é": a byte count would be one more).
// README "Continuation".
func TestContinuedStreamKeepsAnnotations(t *testing.T) {
	const (
		wantA   = `{"type":"url_citation","url":"https://example.com","title":"Ex","start_index":4,"end_index":11}`
		wantTwo = `{"type":"url_citation","url":"https://two.example","title":"Two","start_index":21,"end_index":24}`
	)
	b := citedBackups()
	cases := []struct {
		name, mode string
		backup     []upstreamtest.Frame
		want       []string // the part's annotations, in order
	}{
		{"prefill", gateway.ContinuationAuto, b.prefill, []string{wantA}},
		{"prefill with its own citation", gateway.ContinuationAuto, b.prefillOwn, []string{wantA, wantTwo}},
		{"restart", gateway.ContinuationRestart, b.restart, []string{wantA}},
		{"restart with its own citation", gateway.ContinuationRestart, b.restartOwn, []string{wantA, wantTwo}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := "[" + strings.Join(c.want, ",") + "]"
			h := citedCutHarness(t, c.mode, c.backup)

			resp, evs := h.responsesStream(`{"model":"m","input":"search","stream":true}`)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if role, _ := lastMessage(h.ups["B"].Requests()[0]); (role == "assistant") != (c.mode == gateway.ContinuationAuto) {
				t.Fatalf("the continuation's last message is the %q's: not the %s wanted", role, c.name)
			}
			last := assertOneTerminal(t, evs)
			if last.typ != "response.completed" {
				t.Fatalf("terminal %s: %s", last.typ, last.data)
			}
			var added []string
			got := ""
			for _, ev := range evs {
				r := gjson.ParseBytes(ev.data)
				switch ev.typ {
				case "response.output_text.delta":
					got += r.Get("delta").Str
				case "response.output_text.annotation.added":
					if i := r.Get("annotation_index").Int(); i != int64(len(added)) || r.Get("content_index").Int() != 0 || r.Get("output_index").Int() != 0 {
						t.Errorf("annotation event %d at annotation_index %d (content_index %s, output_index %s): %s",
							len(added), i, r.Get("content_index").Raw, r.Get("output_index").Raw, ev.data)
					}
					added = append(added, r.Get("annotation").Raw)
				case "response.content_part.done":
					if a := r.Get("part.annotations").Raw; a != want {
						t.Errorf("content_part.done lists annotations %s, want %s", a, want)
					}
				case "response.output_item.done":
					if a := r.Get("item.content.0.annotations").Raw; a != want {
						t.Errorf("output_item.done lists annotations %s, want %s", a, want)
					}
				}
			}
			if got != citedFirst+citedMore {
				t.Errorf("client text %q, want %q", got, citedFirst+citedMore)
			}
			if a := "[" + strings.Join(added, ",") + "]"; a != want {
				t.Errorf("annotation events carried %s, want %s", a, want)
			}
			terminal := gjson.GetBytes(last.data, "response")
			if a := terminal.Get("output.0.content.0.annotations").Raw; a != want {
				t.Errorf("%s lists annotations %s, want %s", last.typ, a, want)
			}
			body := h.waitFor("/v1/responses/"+terminal.Get("id").Str, func(body []byte) bool {
				return gjson.GetBytes(body, "status").Str == "completed"
			})
			if a := gjson.GetBytes(body, "output.0.content.0.annotations").Raw; a != want {
				t.Errorf("GET lists annotations %s, want %s: %s", a, want, body)
			}
		})
	}
}

// The Chat answer the annotation continuation tests cut: citedFirst with the
// citation citedA; a continuation's own citation of "two" in citedMore is
// citedTwoOwn in its own text (9–12) and citedTwoWhole in the client's
// whole message (21–24).
const (
	citedFirst    = "Sée example." // 12 characters, 13 bytes
	citedMore     = " More at two."
	citedA        = `{"type":"url_citation","url_citation":{"url":"https://example.com","title":"Ex","start_index":4,"end_index":11}}`
	citedTwoOwn   = `{"type":"url_citation","url_citation":{"url":"https://two.example","title":"Two","start_index":9,"end_index":12}}`
	citedTwoWhole = `{"type":"url_citation","url_citation":{"url":"https://two.example","title":"Two","start_index":21,"end_index":24}}`
)

// citedChunk is a Chat chunk of choice 0 with delta.
func citedChunk(delta string) upstreamtest.Frame {
	return chatChunk(`[{"index":0,"delta":` + delta + `,"finish_reason":null}]`)
}

// citedText is a chunk of text s; citedAnnotations one of the annotations a.
func citedText(s string) upstreamtest.Frame { return citedChunk(`{"content":"` + s + `"}`) }

func citedAnnotations(a string) upstreamtest.Frame { return citedChunk(`{"annotations":[` + a + `]}`) }

// citedFinish is choice 0's finish chunk.
// citedBackupFrames are the continuation target's answers the annotation
// continuation tests give after citedCutHarness's cut, over Responses and
// Chat alike: a prefill's rest, with or without a citation of its own, and
// a restart's whole answer redoing the client's citation, with or without
// one of its own.
type citedBackupFrames struct {
	prefill, prefillOwn, restart, restartOwn []upstreamtest.Frame
}

func citedBackups() citedBackupFrames {
	chunk, text, annotations, finish := citedChunk, citedText, citedAnnotations, citedFinish()
	return citedBackupFrames{
		prefill:    []upstreamtest.Frame{chunk(`{"role":"assistant","content":"` + citedMore + `"}`), finish, chatDone},
		prefillOwn: []upstreamtest.Frame{chunk(`{"role":"assistant","content":"` + citedMore + `"}`), annotations(citedTwoOwn), finish, chatDone},
		restart:    []upstreamtest.Frame{chunk(`{"role":"assistant","content":"` + citedFirst + `"}`), annotations(citedA), text(citedMore), finish, chatDone},
		restartOwn: []upstreamtest.Frame{chunk(`{"role":"assistant","content":"` + citedFirst + `"}`), annotations(citedA), text(citedMore),
			annotations(citedTwoWhole), finish, chatDone},
	}
}

func citedFinish() upstreamtest.Frame {
	return chatChunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`)
}

// citedCutHarness is a continuation harness (mode) of two Chat targets: P
// answers citedFirst with citedA and is cut; B, the continuation, answers
// backup.
func citedCutHarness(t *testing.T, mode string, backup []upstreamtest.Frame) *harness {
	t.Helper()
	h := contHarness(t, mode, harnessConfig{protocol: map[string]string{"P": "chat", "B": "chat"}, opts: resumeOpts()})
	h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: []upstreamtest.Frame{
		citedChunk(`{"role":"assistant","content":"` + citedFirst + `"}`), citedAnnotations(citedA),
	}, End: upstreamtest.EndCut})
	h.ups["B"].Enqueue(upstreamtest.Script{ChatFrames: backup})
	return h
}

package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// unfinishedEnding is a way a continuation target B fails to finish a
// stream cut on P while keeping a copy of it; prefill is whether B is
// configured for prefill continuations.
type unfinishedEnding struct {
	name    string
	backup  upstreamtest.Script
	prefill bool
}

// unfinishedContinuationEndings: B fails after adding text, or its restart
// contradicts what the client has.
func unfinishedContinuationEndings() []unfinishedEnding {
	return []unfinishedEnding{
		{"continuation target fails after adding text", upstreamtest.Answer(fullAnswer, 6).FailAfterDeltas(2, "server_error"), true},
		{"restart diverges", upstreamtest.Answer("The quick red fox", 2), false},
	}
}

// streamUnfinishedContinuation streams body through a gateway (with a store
// and resume) that continues on b a stream p cuts after content, b ending
// it as ending says, and returns the gateway, the client's id and the id b
// answered under.
func streamUnfinishedContinuation(t *testing.T, p, b *upstreamtest.Server, ending unfinishedEnding, resume gateway.ResumeOptions, body string) (h *harness, id, bID string) {
	t.Helper()
	h = contHarness(t, gateway.ContinuationAuto, harnessConfig{servers: map[string]*upstreamtest.Server{"P": p, "B": b},
		prefill: map[string]bool{"B": ending.prefill},
		opts:    gateway.Options{Store: openStore(t, t.TempDir()), Resume: resume}})
	p.Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	b.Enqueue(ending.backup)
	_, evs := h.responsesStream(body)
	last := assertOneTerminal(t, evs)
	id = gjson.GetBytes(last.data, "response.id").Str
	if last.typ != "response.failed" || len(b.Requests()) != 1 {
		t.Fatalf("terminal %s, B asked %d times: not a continuation B failed to finish", last.typ, len(b.Requests()))
	}
	bID = b.Requests()[0].ResponseID
	if bID == "" || bID == id {
		t.Fatalf("B answered under %q (client's id %s)", bID, id)
	}
	return h, id, bID
}

// TestDeleteOfAContinuedResponseNobodyFinished: a stream cut after content
// on P and continued on B that B does not finish — B fails after adding
// text, or its restart contradicts what the client has — still leaves a
// copy at B (the whole request, for a prefill the text the client was
// shown, under B's own id). A DELETE of the response reaches it as well as
// P's, whether the gateway still holds the response's log or the DELETE
// goes to the owner (logs off).
func TestDeleteOfAContinuedResponseNobodyFinished(t *testing.T) {
	for _, ending := range unfinishedContinuationEndings() {
		for _, logs := range []struct {
			name   string
			resume gateway.ResumeOptions
		}{
			{"log held", gateway.ResumeOptions{}},
			{"no log", gateway.ResumeOptions{Window: -1}},
		} {
			t.Run(ending.name+", "+logs.name, func(t *testing.T) {
				p, b := deletingUpstream(t, "P", nil), deletingUpstream(t, "B", nil)
				h, id, bID := streamUnfinishedContinuation(t, p, b, ending, logs.resume, `{"model":"m","input":"TOPSECRET-78","stream":true}`)

				status, body := deleteAs(t, h, "sk-client-secret", id)
				wantDeleted(t, id, status, body)
				if got := deletesOf(p); len(got) != 1 || got[0] != "/v1/responses/"+id {
					t.Errorf("P, which owns the response, was sent DELETEs %v; want one of %s", got, id)
				}
				if got := deletesOf(b); len(got) != 1 || got[0] != "/v1/responses/"+bID {
					t.Errorf("B, which was sent the whole request in the continuation, was sent DELETEs %v; want one of %s", got, bID)
				}
			})
		}
	}
}

// TestDeleteOfAContinuedRunStoppedMidContinuation: a background run cut on
// P and stopped while its continuation streams from B — by a cancel, then a
// DELETE, or by the DELETE itself — leaves B's copy reachable: the DELETE
// is sent to B under B's id as well as to P. B named its response before
// it was stopped (its text reached the run), so its id is known.
func TestDeleteOfAContinuedRunStoppedMidContinuation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool
	}{
		{"cancelled, then deleted", true},
		{"deleted while it runs", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, b := deletingUpstream(t, "P", nil), deletingUpstream(t, "B", nil)
			opts := resumeOpts()
			opts.Store = openStore(t, t.TempDir())
			h := contHarnessStall(t, gateway.ContinuationAuto, time.Hour, harnessConfig{servers: map[string]*upstreamtest.Server{"P": p, "B": b}, opts: opts})
			p.Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			b.Enqueue(upstreamtest.Answer(fullAnswer, 6).StallAfterDeltas(2))
			resp := h.post("/v1/responses", `{"model":"m","input":"hi","background":true}`)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			id := gjson.GetBytes(raw, "id").Str
			if resp.StatusCode != http.StatusOK || id == "" {
				t.Fatalf("background create: %d %s", resp.StatusCode, raw)
			}
			eventually(t, "the continuation's request", func() bool { return b.RequestCount() == 1 })
			_, prefill := lastMessage(b.Requests()[0])
			h.waitFor("/v1/responses/"+id, func(body []byte) bool {
				return len(gjson.GetBytes(body, "output.0.content.0.text").Str) > len(prefill) // B's text is there
			})
			if tc.cancel {
				if status, body := h.call(http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-client-secret"); status != http.StatusOK {
					t.Fatalf("cancel: %d %s", status, body)
				}
			}
			status, body := deleteAs(t, h, "sk-client-secret", id)
			wantDeleted(t, id, status, body)
			bID := b.Requests()[0].ResponseID
			if got := deletesOf(p); len(got) != 1 || got[0] != "/v1/responses/"+id {
				t.Errorf("P was sent DELETEs %v; want one of %s", got, id)
			}
			if got := deletesOf(b); bID == "" || len(got) != 1 || got[0] != "/v1/responses/"+bID {
				t.Errorf("B, stopped mid-continuation, was sent DELETEs %v; want one of %q", got, bID)
			}
		})
	}
}

// TestReadingAContinuedResponseWithoutItsLog: once the gateway holds no log
// of a continued response (after streams.resume_window, or with logs
// off), GET, input_items and a resume of it are the 404
// of a response that can no longer be read, saying why, and never the
// owner's copy: that names another id (B's), holds only B's part and B's
// numbering. The owner is not asked. A DELETE still reaches every copy.
func TestReadingAContinuedResponseWithoutItsLog(t *testing.T) {
	type ending struct {
		name   string
		backup upstreamtest.Script
	}
	type logs struct {
		name   string
		window time.Duration
		why    string
	}
	var cases []struct {
		ending
		logs
	}
	for _, e := range []ending{
		{"finished on B", upstreamtest.Answer(fullAnswer, 3)},
		{"nobody finished", upstreamtest.Answer(fullAnswer, 6).FailAfterDeltas(2, "server_error")},
	} {
		for _, l := range []logs{{"log expired", time.Minute, "streams.resume_window, 1m0s"}, {"logs off", -1, "keeps no stream logs"}} {
			cases = append(cases, struct {
				ending
				logs
			}{e, l})
		}
	}
	for _, tc := range cases {
		t.Run(tc.ending.name+", "+tc.logs.name, func(t *testing.T) {
			p, b := deletingUpstream(t, "P", nil), deletingUpstream(t, "B", nil)
			h, id, bID := continuedPastItsLog(t, p, b, tc.window, tc.backup)
			asked := len(p.Requests()) + len(b.Requests())
			for _, path := range []string{"/v1/responses/" + id, "/v1/responses/" + id + "?stream=true", "/v1/responses/" + id + "?stream=true&starting_after=3",
				"/v1/responses/" + id + "/input_items"} {
				resp, body := callRaw(t, h, http.MethodGet, path)
				if strings.Contains(string(body), bID) {
					t.Errorf("GET %s answered with B's id %s: %d %s", path, bID, resp.StatusCode, body)
				}
				msg := gjson.GetBytes(body, "error.message").Str
				if resp.StatusCode != http.StatusNotFound || gjson.GetBytes(body, "error.code").Str != "not_found" ||
					!strings.Contains(msg, "continued on another target") || !strings.Contains(msg, tc.why) {
					t.Errorf("GET %s: %d %s; want the 404 of a continued response that can no longer be read", path, resp.StatusCode, body)
				}
			}
			if n := len(p.Requests()) + len(b.Requests()); n != asked {
				t.Errorf("the upstreams were asked %d more times; want none", n-asked)
			}
			status, body := deleteAs(t, h, "sk-client-secret", id)
			wantDeleted(t, id, status, body)
			if got := deletesOf(b); len(got) != 1 || got[0] != "/v1/responses/"+bID {
				t.Errorf("B was sent DELETEs %v; want one of %s", got, bID)
			}
		})
	}
}

package gateway_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestDeleteOfAContinuedResponseItsFirstTargetOwns: a stream cut on P and
// continued on B that B does not finish keeps P as its owner, under the
// client's id, and lists B's copy. Once the gateway holds no log of it, a
// DELETE goes to B, then to P, and P's answer is read by the rules of a
// continued response although P knows the client's id: P's 404 (its copy
// gone already) is the deletion of the client's id, the response is
// forgotten (a second DELETE reaches nobody), and any other failure is the
// gateway's own error naming the client's id, the response kept for a
// retry.
func TestDeleteOfAContinuedResponseItsFirstTargetOwns(t *testing.T) {
	for _, ending := range []struct {
		name    string
		backup  upstreamtest.Script
		prefill bool
	}{
		{"continuation target fails after adding text", upstreamtest.Answer(fullAnswer, 6).FailAfterDeltas(2, "server_error"), true},
		{"restart diverges", upstreamtest.Answer("The quick red fox", 2), false},
	} {
		for _, pAnswers := range []int32{http.StatusNotFound, http.StatusInternalServerError} {
			t.Run(ending.name+", P answers "+http.StatusText(int(pAnswers)), func(t *testing.T) {
				var pRefuses atomic.Int32
				p, b := deletingUpstream(t, "P", &pRefuses), deletingUpstream(t, "B", nil)
				h := contHarness(t, gateway.ContinuationAuto, harnessConfig{servers: map[string]*upstreamtest.Server{"P": p, "B": b},
					prefill: map[string]bool{"B": ending.prefill},
					opts:    gateway.Options{Store: openStore(t, t.TempDir()), Resume: gateway.ResumeOptions{Window: -1}}})
				p.Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
				b.Enqueue(ending.backup)
				_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
				last := assertOneTerminal(t, evs)
				id := gjson.GetBytes(last.data, "response.id").Str
				if last.typ != "response.failed" || len(b.Requests()) != 1 {
					t.Fatalf("terminal %s, B asked %d times: not a continuation B failed to finish", last.typ, len(b.Requests()))
				}
				bID := b.Requests()[0].ResponseID
				if bID == "" || bID == id {
					t.Fatalf("B answered under %q (client's id %s)", bID, id)
				}

				pRefuses.Store(pAnswers)
				status, body := deleteAs(t, h, "sk-client-secret", id)
				deletes := 1
				if pAnswers != http.StatusNotFound {
					// P failed: the gateway's own error naming the client's
					// id, not P's body; the response stays, and the retry,
					// once P deletes its copy, deletes it.
					if status != http.StatusBadGateway || codeOf(body) != "upstream_unavailable" ||
						!strings.Contains(gjson.GetBytes(body, "error.message").Str, "'"+id+"'") {
						t.Fatalf("DELETE with P failing: %d %s; want the gateway's 502 naming %s", status, body, id)
					}
					pRefuses.Store(0)
					status, body = deleteAs(t, h, "sk-client-secret", id)
					deletes = 2
				}
				wantDeleted(t, id, status, body)
				if got := deletesOf(p); len(got) != deletes || got[deletes-1] != "/v1/responses/"+id {
					t.Errorf("P, which owns the response, was sent DELETEs %v; want %d of %s", got, deletes, id)
				}
				if got := deletesOf(b); len(got) != deletes || got[deletes-1] != "/v1/responses/"+bID {
					t.Errorf("B, which keeps a copy, was sent DELETEs %v; want %d of %s", got, deletes, bID)
				}

				// Forgotten: a second DELETE is the 404 of an unknown id and
				// reaches no upstream.
				status, body = deleteAs(t, h, "sk-client-secret", id)
				if status != http.StatusNotFound {
					t.Errorf("second DELETE of %s: %d %s; want 404", id, status, body)
				}
				if np, nb := len(deletesOf(p)), len(deletesOf(b)); np != deletes || nb != deletes {
					t.Errorf("the second DELETE reached the upstreams (P %d, B %d DELETEs): the response was not forgotten", np, nb)
				}
			})
		}
	}
}

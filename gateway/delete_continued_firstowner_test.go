package gateway_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
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
	for _, ending := range unfinishedContinuationEndings() {
		for _, pAnswers := range []int32{http.StatusNotFound, http.StatusInternalServerError} {
			t.Run(ending.name+", P answers "+http.StatusText(int(pAnswers)), func(t *testing.T) {
				var pRefuses atomic.Int32
				p, b := deletingUpstream(t, "P", &pRefuses), deletingUpstream(t, "B", nil)
				h, id, bID := streamUnfinishedContinuation(t, p, b, ending, gateway.ResumeOptions{Window: -1}, `{"model":"m","input":"hi","stream":true}`)

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

package gateway_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestDeleteOfAContinuedResponseTheOwnerRefuses: once the gateway holds no
// log of a response cut on P and continued on B (it expired, or logs are
// off), its DELETE goes to B under B's own id, which the client never saw.
// B's answer is never passed on with that id: a 404 (B's copy is gone
// already) is the deletion object for the client's id, as inside
// streams.resume_window, and the gateway forgets the response; a 500 is the
// gateway's 502 naming the client's id, and the response is kept, so a
// retry once B answers again deletes it.
func TestDeleteOfAContinuedResponseTheOwnerRefuses(t *testing.T) {
	for _, logs := range []struct {
		name   string
		window time.Duration
	}{{"log expired", time.Minute}, {"logs off", -1}} {
		for _, refusal := range []int32{http.StatusNotFound, http.StatusInternalServerError} {
			t.Run(logs.name+", owner answers "+http.StatusText(int(refusal)), func(t *testing.T) {
				var bRefuses atomic.Int32
				p, b := deletingUpstream(t, "P", nil), deletingUpstream(t, "B", &bRefuses)
				h, id, bID := continuedPastItsLog(t, p, b, logs.window, upstreamtest.Answer(fullAnswer, 3))

				bRefuses.Store(refusal)
				status, body := deleteAs(t, h, "sk-client-secret", id)
				if strings.Contains(string(body), bID) {
					t.Errorf("DELETE answered with B's id %s: %d %s", bID, status, body)
				}
				if got := deletesOf(b); len(got) != 1 || got[0] != "/v1/responses/"+bID {
					t.Fatalf("B was sent DELETEs %v; want one of %s", got, bID)
				}
				if refusal == http.StatusNotFound {
					wantDeleted(t, id, status, body)
					if code := h.getJSON("/admin/continuity/"+id, nil); code != http.StatusNotFound {
						t.Errorf("GET /admin/continuity/%s after the DELETE: %d; want 404, the response forgotten", id, code)
					}
					return
				}
				if status != http.StatusBadGateway || gjson.GetBytes(body, "error.code").Str != "upstream_unavailable" ||
					!strings.Contains(gjson.GetBytes(body, "error.message").Str, id) {
					t.Fatalf("DELETE with B failing: %d %s; want the gateway's 502 upstream_unavailable naming %s", status, body, id)
				}
				if code := h.getJSON("/admin/continuity/"+id, nil); code != http.StatusOK {
					t.Fatalf("GET /admin/continuity/%s after the failed DELETE: %d; want 200, the response kept for a retry", id, code)
				}
				bRefuses.Store(0)
				status, body = deleteAs(t, h, "sk-client-secret", id)
				wantDeleted(t, id, status, body)
				if got := deletesOf(b); len(got) != 2 || got[1] != "/v1/responses/"+bID {
					t.Errorf("B was sent DELETEs %v; want two of %s", got, bID)
				}
			})
		}
	}
}

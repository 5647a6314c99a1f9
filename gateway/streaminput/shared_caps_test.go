package streaminput_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
)

// A session deleted through another replica stops counting against the
// caps of the replica that created it (README: a session counts until it
// is deleted, closed or expires; any replica takes its DELETE), without a
// request for it reaching the creating replica again.
func TestSharedDeleteElsewhereFreesCaps(t *testing.T) {
	big := respTemplateWithInput(strings.Repeat("x", 10000))
	for _, tc := range []struct {
		name     string
		opts     streaminput.Options
		template string
		sessions int // created on replica 1 to reach the cap
	}{
		{"per key", streaminput.Options{}, respTemplate, streaminput.DefaultMaxSessionsPerKey},
		{"sessions held", streaminput.Options{MaxSessions: 2}, respTemplate, 2},
		{"bytes held", streaminput.Options{MaxTotalBytes: 15000}, big, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := replicasOpts(t, 2, redistest.Start(t), gateway.ResumeOptions{}, tc.opts)
			r1, r2 := r[0], r[1]
			body := sessionBody(streaminput.EndpointResponses, "on_end_only", tc.template)
			var ids []string
			for range tc.sessions {
				ids = append(ids, r1.create(body))
			}
			if code, b := r1.do(http.MethodPost, streaminput.PathPrefix, body); code/100 == 2 {
				t.Fatalf("a session over the cap was created: %d %s", code, b)
			}
			if code, b := r2.do(http.MethodDelete, streaminput.PathPrefix+"/"+ids[0], ""); code != http.StatusOK {
				t.Fatalf("delete on replica 2: %d %s", code, b)
			}
			// Nothing has touched ids[0] on replica 1 since: it learns of
			// the delete from the store when the cap would refuse.
			if code, b := r1.do(http.MethodPost, streaminput.PathPrefix, body); code != http.StatusOK {
				t.Fatalf("create on replica 1 after a delete on replica 2: %d %s", code, b)
			}
			if code, b := r1.do(http.MethodPost, streaminput.PathPrefix, body); code/100 == 2 {
				t.Fatalf("the cap no longer holds on replica 1: %d %s", code, b)
			}
		})
	}
}

// A chunk refused for the bytes all sessions hold, because a session
// deleted through another replica still counted its bytes here, is
// accepted when sent again (the refusal is a 503 to retry).
func TestSharedDeleteElsewhereFreesChunkBytes(t *testing.T) {
	r1, next, _ := bytesHeldThenDeletedElsewhere(t)
	eventually(t, 10*time.Second, "the chunk accepted on replica 1", func() bool {
		code, _, e := r1.chunk(next, textChunk(0, strings.Repeat("b", 10000), false))
		if code/100 != 2 && code != http.StatusServiceUnavailable {
			t.Fatalf("chunk on replica 1: %d %+v", code, e)
		}
		return code/100 == 2
	})
}

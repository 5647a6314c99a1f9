package streaminput_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
)

// TestSharedStatusTellsWhatTheUpstreamSawOnEveryReplica: GET …/{id} reports
// the same upstream_saw and late_chunks on the replica that sent the
// upstream request and on the other one (README "Several replicas
// (Redis)"), and they agree with the answer's X-Streaming-Input-* headers:
// the upstream saw chunk 0 only, and the three chunks that came after it,
// on either replica, are late. A third replica that never held the session
// answers the same from the record alone, and knows the answer's state.
func TestSharedStatusTellsWhatTheUpstreamSawOnEveryReplica(t *testing.T) {
	r := replicas(t, 3, redistest.Start(t))
	r1, r2, r3 := r[0], r[1], r[2]

	id := r1.create(sessionBody(streaminput.EndpointResponses, "on_first_chunk", respTemplate))
	if a := r1.mustChunk(id, textChunk(0, "c0", false)); !a.Started {
		t.Fatalf("chunk 0 did not start the request: %+v", a)
	}
	r2.mustChunk(id, textChunk(1, "c1", false))
	r2.mustChunk(id, textChunk(2, "c2", false))
	r1.mustChunk(id, textChunk(3, "c3", false))
	if code, b := r2.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", ""); code != http.StatusOK {
		t.Fatalf("finish on replica 2: %d %s", code, b)
	}
	if got := inputOf(t, r1.upstreamRequest(0).Body); !strings.HasSuffix(got, "Q: c0") {
		t.Fatalf("the upstream got input %q", got)
	}
	resp, evs, _ := r1.result(id, "")
	completedText(t, evs)
	if h := resp.Header; h.Get("X-Streaming-Input-Chunks") != "1" || h.Get("X-Streaming-Input-Bytes") != "2" || h.Get("X-Streaming-Input-Complete") != "false" {
		t.Fatalf("the answer's headers: chunks %q bytes %q complete %q", h.Get("X-Streaming-Input-Chunks"),
			h.Get("X-Streaming-Input-Bytes"), h.Get("X-Streaming-Input-Complete"))
	}

	var startedAt int64
	for i, e := range []*env{r3, r2, r1} {
		replica := 3 - i
		code, st := e.status(id)
		if code != http.StatusOK || !st.Started || st.UpstreamSaw == nil {
			t.Fatalf("status on replica %d: %d %+v", replica, code, st)
		}
		if saw := *st.UpstreamSaw; saw.Chunks != 1 || saw.Bytes != 2 || saw.Complete || saw.StartedAt == 0 {
			t.Fatalf("upstream_saw on replica %d: %+v, want 1 chunk, 2 bytes, not complete, with its start", replica, saw)
		}
		if startedAt == 0 {
			startedAt = st.UpstreamSaw.StartedAt
		}
		if st.UpstreamSaw.StartedAt != startedAt {
			t.Fatalf("upstream_saw.started_at on replica %d: %d, the other says %d", replica, st.UpstreamSaw.StartedAt, startedAt)
		}
		if st.Result == nil || st.Result.HTTPStatus != http.StatusOK {
			t.Fatalf("result on replica %d: %+v, want the answer's 200", replica, st.Result)
		}
		if st.LateChunks != 3 {
			t.Fatalf("late_chunks on replica %d: %d, want 3", replica, st.LateChunks)
		}
	}
}

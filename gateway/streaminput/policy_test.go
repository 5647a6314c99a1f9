package streaminput_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// TestStartPolicies proves when each policy starts the upstream request:
// three chunks are posted gap apart, and the fake upstream's receipt time
// must fall between the right chunk posts, with a body holding exactly the
// chunks received by then.
func TestStartPolicies(t *testing.T) {
	const gap = 250 * time.Millisecond
	chunks := []string{"first ten.", "second 10.", "the last!"}
	cases := []struct {
		policy    string
		startsAt  int // the chunk whose acknowledgement starts the request
		wantInput string
		late      int
	}{
		{"on_first_chunk", 0, "Q: first ten.", 2},
		{"on_min_length:15", 1, "Q: first ten.second 10.", 1},
		{"on_end_only", 2, "Q: first ten.second 10.the last!", 0},
	}
	for _, c := range cases {
		t.Run(c.policy, func(t *testing.T) {
			e := newEnv(t, envConfig{})
			id := e.create(sessionBody(streaminput.EndpointResponses, c.policy, respTemplate))
			sent := make([]time.Time, len(chunks))
			acked := make([]time.Time, len(chunks))
			for i, text := range chunks {
				if i > 0 {
					time.Sleep(gap)
				}
				sent[i] = time.Now()
				a := e.mustChunk(id, textChunk(i, text, i == len(chunks)-1))
				acked[i] = time.Now()
				if a.Started != (i >= c.startsAt) {
					t.Fatalf("chunk %d: started=%v", i, a.Started)
				}
			}
			req := e.upstreamRequest(0)
			if req.ReceivedAt.Before(sent[c.startsAt]) {
				t.Fatalf("the upstream request arrived %v before chunk %d was sent", sent[c.startsAt].Sub(req.ReceivedAt), c.startsAt)
			}
			if next := c.startsAt + 1; next < len(chunks) && !req.ReceivedAt.Before(sent[next]) {
				t.Fatalf("the upstream request arrived %v after chunk %d was sent: it did not start early", req.ReceivedAt.Sub(sent[next]), next)
			}
			t.Logf("%s: upstream request %v after chunk %d was acknowledged", c.policy, req.ReceivedAt.Sub(acked[c.startsAt]).Round(time.Microsecond), c.startsAt)
			if got := inputOf(t, req.Body); got != c.wantInput {
				t.Fatalf("upstream input %q, want %q", got, c.wantInput)
			}
			// The status and the result say what the upstream saw; later
			// chunks were kept for audit only.
			_, st := e.status(id)
			if st.UpstreamSaw == nil || st.UpstreamSaw.Chunks != uint64(c.startsAt+1) || st.LateChunks != c.late || st.State != "finished" ||
				st.UpstreamSaw.Complete != (c.startsAt == len(chunks)-1) || st.ReceivedChunks != len(chunks) {
				t.Fatalf("status: %+v saw %+v", st, st.UpstreamSaw)
			}
			resp, evs, _ := e.result(id, "")
			if resp.Header.Get("X-Streaming-Input-Chunks") != strconv.Itoa(c.startsAt+1) || eventType(evs[len(evs)-1]) != "response.completed" {
				t.Fatalf("result: %v %v", resp.Header, eventTypes(evs))
			}
			if e.up.RequestCount() != 1 {
				t.Fatalf("%d upstream requests", e.up.RequestCount())
			}
		})
	}
}

// TestFinishStartsEarlyPolicies: finish starts a session whose policy never held.
func TestFinishStartsOnMinLength(t *testing.T) {
	e := newEnv(t, envConfig{})
	id := e.create(sessionBody(streaminput.EndpointResponses, "on_min_length:1000", respTemplate))
	if a := e.mustChunk(id, textChunk(0, "short", false)); a.Started {
		t.Fatal("started below the minimum length")
	}
	code, b := e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", "")
	if code != http.StatusOK || !strings.Contains(string(b), `"started":true`) {
		t.Fatalf("finish: %d %s", code, b)
	}
	if got := inputOf(t, e.upstreamRequest(0).Body); got != "Q: short" {
		t.Fatalf("upstream input %q", got)
	}
}

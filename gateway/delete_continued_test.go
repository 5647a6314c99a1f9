package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// deletingUpstream is a fake Responses upstream (StrictPrevious) that
// honours DELETE /v1/responses/{id} as OpenAI's API does: the fake records
// the request, forgets the id (a later previous_response_id naming it gets
// previous_response_not_found) and answers the deletion object. While
// refuse holds a status, it answers a DELETE with it instead and keeps the
// response: 404 is OpenAI's answer for an id it does not keep (naming
// that id), any other a server_error naming it.
func deletingUpstream(t *testing.T, name string, refuse *atomic.Int32) *upstreamtest.Server {
	t.Helper()
	up := upstreamtest.NewHandler(upstreamtest.Options{Name: name, StrictPrevious: true})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/v1/responses/")
		if r.Method != http.MethodDelete || !ok {
			up.ServeHTTP(w, r)
			return
		}
		up.ServeHTTP(httptest.NewRecorder(), r) // recorded (the fake itself has no DELETE)
		w.Header().Set("Content-Type", "application/json")
		status := 0
		if refuse != nil {
			status = int(refuse.Load())
		}
		switch status {
		case 0:
			up.ForgetResponses(id)
			_, _ = io.WriteString(w, `{"id":"`+id+`","object":"response","deleted":true}`)
		case http.StatusNotFound:
			w.WriteHeader(status)
			_, _ = w.Write(upstreamtest.ErrorBody("Response with id '"+id+"' not found.", "invalid_request_error", "", ""))
		default:
			w.WriteHeader(status)
			_, _ = w.Write(upstreamtest.ErrorBody("The server had an error while processing response "+id+".", "server_error", "", ""))
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(up.Close)
	up.URL = srv.URL + "/v1"
	return up
}

// deletesOf lists the paths of the DELETEs up received.
func deletesOf(up *upstreamtest.Server) []string {
	var out []string
	for _, r := range up.Requests() {
		if r.Method == http.MethodDelete {
			out = append(out, r.Path)
		}
	}
	return out
}

// TestDeleteOfAContinuedResponseReachesEveryCopy: a stream cut after
// content on P and continued on B leaves a copy at both (P's under the
// client-visible id, B's under its own). DELETE of the response asks each
// to delete its copy under the id it knows, answers OpenAI's deletion
// object for the client's id, and afterwards a follow-up naming it gets
// previous_response_not_found and a GET a 404, as for any deleted
// response — whether the gateway still holds the response's log or the
// DELETE goes to the owner (logs off).
func TestDeleteOfAContinuedResponseReachesEveryCopy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resume gateway.ResumeOptions
	}{
		{"log held", gateway.ResumeOptions{}},
		{"no log", gateway.ResumeOptions{Window: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, b := deletingUpstream(t, "P", nil), deletingUpstream(t, "B", nil)
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{servers: map[string]*upstreamtest.Server{"P": p, "B": b},
				opts: gateway.Options{Store: openStore(t, t.TempDir()), Resume: tc.resume}})
			p.Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			b.Enqueue(upstreamtest.Answer(fullAnswer, 3))
			_, evs := h.responsesStream(`{"model":"m","input":"TOPSECRET-77","stream":true}`)
			last := assertOneTerminal(t, evs)
			id := gjson.GetBytes(last.data, "response.id").Str
			pID, bID := p.Requests()[0].ResponseID, b.Requests()[0].ResponseID
			if last.typ != "response.completed" || id != pID || bID == "" || bID == id {
				t.Fatalf("terminal %s for %s (P %s, B %s): not a continued response", last.typ, id, pID, bID)
			}

			status, body := deleteAs(t, h, "sk-client-secret", id)
			wantDeleted(t, id, status, body)
			if got := deletesOf(p); len(got) != 1 || got[0] != "/v1/responses/"+pID {
				t.Errorf("P, which the stream was cut on, was sent DELETEs %v; want one of %s", got, pID)
			}
			if got := deletesOf(b); len(got) != 1 || got[0] != "/v1/responses/"+bID {
				t.Errorf("B, which finished the response, was sent DELETEs %v; want one of %s", got, bID)
			}

			// What a follow-up of a response deleted whole gets here: one P
			// answered alone.
			p.Enqueue(upstreamtest.Answer(fullAnswer, 3))
			_, evs = h.responsesStream(`{"model":"m","input":"plain","stream":true}`)
			plain := gjson.GetBytes(assertOneTerminal(t, evs).data, "response.id").Str
			status, body = deleteAs(t, h, "sk-client-secret", plain)
			wantDeleted(t, plain, status, body)
			wantStatus, wantCode := followUpOutcome(h, plain)
			if wantStatus/100 == 2 {
				t.Fatalf("follow-up of the deleted %s: %d", plain, wantStatus)
			}
			if status, code := followUpOutcome(h, id); status != wantStatus || code != wantCode {
				t.Errorf("follow-up of the deleted continued %s: %d %s; want %d %s, as for any deleted response", id, status, code, wantStatus, wantCode)
			}
			if status, body := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret"); status != http.StatusNotFound {
				t.Errorf("GET of the deleted %s: %d %s; want 404", id, status, body)
			}
		})
	}
}

// followUpOutcome posts a follow-up naming prev and returns its status and error
// code.
func followUpOutcome(h *harness, prev string) (int, string) {
	h.t.Helper()
	resp := h.post("/v1/responses", `{"model":"m","input":"and then?","previous_response_id":"`+prev+`"}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, gjson.GetBytes(b, "error.code").Str
}

// TestDeleteOfAContinuedResponseWhenACopyStays: the DELETE of a continued
// response whose earlier copy (on P, which the stream was cut on) cannot be
// deleted follows the rule of a failed DELETE at the owner, for that copy:
// with the response's log held, the gateway's own copy goes, the failure is
// logged and the answer is still the deletion object; without it (the
// DELETE is passed on to the owner), the client gets P's error, nothing is
// deleted, and a retry once P answers again deletes every copy.
func TestDeleteOfAContinuedResponseWhenACopyStays(t *testing.T) {
	for _, tc := range []struct {
		name   string
		resume gateway.ResumeOptions
	}{
		{"log held", gateway.ResumeOptions{}},
		{"no log", gateway.ResumeOptions{Window: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pRefuses atomic.Int32
			pRefuses.Store(http.StatusInternalServerError)
			p, b := deletingUpstream(t, "P", &pRefuses), deletingUpstream(t, "B", nil)
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{servers: map[string]*upstreamtest.Server{"P": p, "B": b},
				opts: gateway.Options{Store: openStore(t, t.TempDir()), Resume: tc.resume}})
			p.Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			b.Enqueue(upstreamtest.Answer(fullAnswer, 3))
			_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
			id := gjson.GetBytes(assertOneTerminal(t, evs).data, "response.id").Str
			bID := b.Requests()[0].ResponseID

			status, body := deleteAs(t, h, "sk-client-secret", id)
			if tc.resume.Window == 0 {
				wantDeleted(t, id, status, body)
				if !strings.Contains(grepLines(h.logs.String(), "deleting a response at its owner failed"), "upstream=P") {
					t.Errorf("the copy P kept is not logged as not deleted:\n%s", grepLines(h.logs.String(), "delet"))
				}
				if got := deletesOf(b); len(got) != 1 || got[0] != "/v1/responses/"+bID {
					t.Errorf("B was sent DELETEs %v; want one of %s", got, bID)
				}
				return
			}
			if status != http.StatusBadGateway || gjson.GetBytes(body, "error.code").Str != "upstream_unavailable" ||
				!strings.Contains(gjson.GetBytes(body, "error.message").Str, "'"+id+"'") {
				t.Fatalf("DELETE with P failing: %d %s; want the gateway's 502 naming %s", status, body, id)
			}
			if got := deletesOf(b); len(got) != 0 {
				t.Fatalf("B was sent DELETEs %v before P's copy was deleted", got)
			}
			pRefuses.Store(0)
			status, body = deleteAs(t, h, "sk-client-secret", id)
			wantDeleted(t, id, status, body)
			if got := deletesOf(p); len(got) != 2 || got[1] != "/v1/responses/"+id {
				t.Errorf("P was sent DELETEs %v; want two of %s", got, id)
			}
			if got := deletesOf(b); len(got) != 1 || got[0] != "/v1/responses/"+bID {
				t.Errorf("B was sent DELETEs %v; want one of %s", got, bID)
			}
		})
	}
}

// continuedPastItsLog streams a response P cuts and B continues with
// backup, through a harness whose resume log lasts window (-1: no logs),
// then moves the gateway's clock past that log: calls about the response
// then go to its upstreams. It returns the harness, the client's id and B's.
func continuedPastItsLog(t *testing.T, p, b *upstreamtest.Server, window time.Duration, backup upstreamtest.Script) (h *harness, id, bID string) {
	t.Helper()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	h = contHarness(t, gateway.ContinuationAuto, harnessConfig{servers: map[string]*upstreamtest.Server{"P": p, "B": b},
		opts: gateway.Options{Store: openStore(t, t.TempDir()), Now: clock, Resume: gateway.ResumeOptions{Window: window}}})
	p.Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	b.Enqueue(backup)
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	id = gjson.GetBytes(assertOneTerminal(t, evs).data, "response.id").Str
	mu.Lock()
	now = now.Add(time.Minute + time.Second) // the log expired
	mu.Unlock()
	bID = b.Requests()[0].ResponseID
	if id == "" || bID == "" || bID == id {
		t.Fatalf("ids %q (client) and %q (B): not a continued response", id, bID)
	}
	return h, id, bID
}

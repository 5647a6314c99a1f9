package gateway_test

// Rules that mutation testing showed no other test pinned down: the session
// headers that scope an anchor, the message of an upstream error event that
// lacks a code or a message, the same-target facts a replay policy is told,
// stream-log read failures in the log, the easy input message's type in
// input_items, and the query of a resource call passed on to the owner.
//
// Mutant left untested, as no input can tell it apart:
//   - continuation.go startKeepAliveLocked (d <= 0 -> d < 0): New replaces a
//     KeepAlive <= 0 with the default (15s) and nothing changes it later, so
//     d is never 0 there.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// TestSessionHeadersScopeTheAnchor: each header a client names its session
// with (session_id as Codex sends it, Session-Id, X-Codex-Session-Id,
// X-Codex-Conversation-Id) records the response's anchor under that
// session, not under the client's key, so another credential in the same
// session finds the owner.
func TestSessionHeadersScopeTheAnchor(t *testing.T) {
	for _, hdr := range []string{"session_id", "Session-Id", "X-Codex-Session-Id", "X-Codex-Conversation-Id"} {
		t.Run(hdr, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			h := continuityHarness(t, st, gateway.Options{})
			_, id := h.turn("", map[string]string{hdr: "sess-" + hdr})
			var a struct {
				ScopeKind string `json:"scope_kind"`
				ScopeID   string `json:"scope_id"`
			}
			if code := h.getJSON("/admin/continuity/"+id, &a); code != http.StatusOK {
				t.Fatalf("no anchor for %q: %d", id, code)
			}
			if a.ScopeKind != "session" || a.ScopeID != gateway.LogID("sess-"+hdr) {
				t.Fatalf("anchor scoped %q %q, want the session %q", a.ScopeKind, a.ScopeID, gateway.LogID("sess-"+hdr))
			}
		})
	}
}

// TestUpstreamErrorEventWithOneField: an error event after content that no
// target continues ends the client's stream with response.failed. One with
// a message and no code keeps that message (under the gateway's
// upstream_error); one with a code and no message keeps the code and is
// told so in words, not with an empty message. Neither is given the raw
// event as its message.
func TestUpstreamErrorEventWithOneField(t *testing.T) {
	for _, c := range []struct{ ev, code, suffix string }{
		{`{"type":"error","sequence_number":6,"message":"the model crashed"}`, "upstream_error", ": the model crashed"},
		{`{"type":"error","sequence_number":6,"code":"server_error"}`, "server_error", `with the code "server_error" and no message`},
	} {
		h := newHarness(t, harnessConfig{})
		h.ups["A"].Enqueue(errorAfterDeltas(c.ev, `{}`))
		_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
		last := assertOneTerminal(t, evs)
		msg := gjson.GetBytes(last.data, "response.error.message").Str
		if last.typ != "response.failed" || last.code != c.code || !strings.HasSuffix(msg, c.suffix) ||
			strings.Contains(msg, "sequence_number") {
			t.Fatalf("upstream event %s: terminal %s; want code %q and the event's message, not the event", c.ev, last.data, c.code)
		}
	}
}

// TestSameUpstreamReplaysAreCounted: a stream that fails before content
// and is replayed on the same target by the policy tells the policy, at the
// next failure, how many same-target tries were made (same_target_retries)
// and how many replays, and the log numbers each replay from 1.
func TestSameUpstreamReplaysAreCounted(t *testing.T) {
	p := &overridePolicy{override: func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) {
		return hostabi.ReplaySameUpstream, in.Phase == hostabi.PhaseBeforeContent && in.Upstream == "P"
	}}
	h := policyRouteHarness(t, p)
	fail := upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusInternalServerError,
		upstreamtest.ErrorBody("The server had an error.", "server_error", "server_error", "")).AfterCreated()
	h.ups["P"].Enqueue(fail, fail)
	o := routeSurfaces[0].do(t, h, "fast")
	if o.status != 0 || o.text != "Hello from P" {
		t.Fatalf("client saw %+v; want P's answer after two replays", o)
	}
	ins := p.asked()
	if len(ins) != 2 || ins[0].SameTargetRetries != 0 || ins[0].ReplayCount != 0 ||
		ins[1].SameTargetRetries != 1 || ins[1].ReplayCount != 1 {
		t.Fatalf("asked %+v; want same-target tries and replays 0, then 1", ins)
	}
	logs := h.logs.String()
	for _, n := range []string{"replay=1", "replay=2"} {
		if !strings.Contains(logs, "replaying on the same upstream") || !strings.Contains(logs, n) {
			t.Fatalf("no %q replay line in the log:\n%s", n, logs)
		}
	}
	if strings.Contains(logs, "replay=0") || strings.Contains(logs, "replay=-") {
		t.Fatalf("a replay numbered from 0 or below:\n%s", logs)
	}
}

// brokenLogStore is a stream-log store that cannot read one response's log.
type brokenLogStore struct {
	store.StreamLogStore
	broken string
}

func (b brokenLogStore) GetStreamLog(ctx context.Context, id string) (store.StreamLog, error) {
	if id == b.broken {
		return store.StreamLog{}, errors.New("disk on fire")
	}
	return b.StreamLogStore.GetStreamLog(ctx, id)
}

// TestStreamLogReadFailureIsLogged: a GET whose stream log the durable
// store fails to read is logged as a warning and answered with the 503 of
// a store that cannot be read (README "Scale-out with Redis"), not a 404
// saying the response is unknown; a log that exists but belongs to
// another key is simply not found, with no warning.
func TestStreamLogReadFailureIsLogged(t *testing.T) {
	st := openStore(t, t.TempDir())
	if err := st.PutStreamLog(context.Background(), store.StreamLog{ResponseID: "resp_someone_else", Owner: "another-key-hash",
		Status: "completed", Ended: true, ExpiresAt: time.Now().Add(time.Hour),
		Response: []byte(`{"id":"resp_someone_else","object":"response","status":"completed"}`)}); err != nil {
		t.Fatal(err)
	}
	opts := resumeOpts()
	opts.Resume.Store = brokenLogStore{StreamLogStore: st, broken: "resp_broken"}
	h := newHarness(t, harnessConfig{opts: opts})

	if status, body := h.call(http.MethodGet, "/v1/responses/resp_someone_else", "sk-client-secret"); status != http.StatusNotFound {
		t.Fatalf("GET of another key's log: %d %s", status, body)
	}
	if logs := h.logs.String(); strings.Contains(logs, "reading a stream log failed") {
		t.Fatalf("another key's log reported as a read failure:\n%s", logs)
	}
	if status, body := h.call(http.MethodGet, "/v1/responses/resp_broken", "sk-client-secret"); status != http.StatusServiceUnavailable ||
		gjson.GetBytes(body, "error.code").Str != "upstream_unavailable" {
		t.Fatalf("GET of an unreadable log: %d %s", status, body)
	}
	if logs := h.logs.String(); !strings.Contains(logs, "reading a stream log failed") || !strings.Contains(logs, "disk on fire") {
		t.Fatalf("the store's read failure is not in the log:\n%s", logs)
	}
}

// TestInputItemsGiveEasyMessagesTheirType: an input message sent without a
// type ({"role":…,"content":…}) is listed by input_items as the spec's
// item, with "type":"message".
func TestInputItemsGiveEasyMessagesTheirType(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	id := h.createResponse(`{"model":"gpt-fake-1","input":[{"role":"user","content":"what is the weather?"}]}`)
	status, body := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items", "sk-client-secret")
	if it := gjson.GetBytes(body, "data.0"); status != http.StatusOK || it.Get("type").Str != "message" || it.Get("role").Str != "user" {
		t.Fatalf("input_items: %d %s", status, body)
	}
}

// TestOwnerGetsTheResourceQuery: a GET of a response this gateway holds no
// log of is passed on to the upstream that owns it with the client's query
// (include, stream, starting_after…) intact.
func TestOwnerGetsTheResourceQuery(t *testing.T) {
	up := upstreamtest.NewHandler(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	var mu sync.Mutex
	var queries []string
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/responses/") {
			mu.Lock()
			queries = append(queries, r.URL.RawQuery)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"`+strings.TrimPrefix(r.URL.Path, "/v1/responses/")+`","object":"response","status":"completed"}`)
			return
		}
		up.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	up.URL = front.URL + "/v1"

	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up},
		opts: gateway.Options{Store: st, Resume: gateway.ResumeOptions{Window: -1}}})
	id := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	const q = "include%5B%5D=message.output_text.logprobs&include_obfuscation=false"
	status, body := h.call(http.MethodGet, "/v1/responses/"+id+"?"+q, "sk-client-secret")
	if status != http.StatusOK || gjson.GetBytes(body, "id").Str != id {
		t.Fatalf("GET through the owner: %d %s", status, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(queries) != 1 || queries[0] != q {
		t.Fatalf("the owner got queries %q, want [%q]", queries, q)
	}
}

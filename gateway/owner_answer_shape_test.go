package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// ownerReply is what a fake owner answers a resource call.
type ownerReply struct {
	status int
	body   string
}

// wantOpenAIError fails the test unless body is an OpenAI error object with
// code, its code and param each a string or null (README "Endpoints").
func wantOpenAIError(t *testing.T, what string, body []byte, code string) gjson.Result {
	t.Helper()
	e := gjson.GetBytes(body, "error")
	stringOrNull := func(r gjson.Result) bool { return r.Type == gjson.String || (r.Exists() && r.Type == gjson.Null) }
	if e.Get("message").Type != gjson.String || e.Get("type").Type != gjson.String ||
		!stringOrNull(e.Get("code")) || !stringOrNull(e.Get("param")) || e.Get("code").Str != code {
		t.Errorf("%s: not an OpenAI error with code %q: %s", what, code, body)
	}
	return e
}

// replyingOwner starts an owner that answers every resource call with the
// reply it is given, the gateway in front of it and a response created
// through it, whose log the gateway does not hold (ownerHarness). askOwner
// makes one resource call with the owner set to answer rep, fails the test
// unless the call reached the owner, and returns the gateway's answer.
func replyingOwner(t *testing.T) (id string, askOwner func(what string, rep ownerReply, method, path string) (*http.Response, []byte)) {
	var reply atomic.Pointer[ownerReply]
	up, calls := ownerFront(t, func(w http.ResponseWriter, _ *http.Request) {
		rep := reply.Load()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
	})
	h := ownerHarness(t, up, gateway.Options{})
	id = h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)
	return id, func(what string, rep ownerReply, method, path string) (*http.Response, []byte) {
		t.Helper()
		reply.Store(&rep)
		before := calls.Load()
		resp, body := callRaw(t, h, method, path)
		if calls.Load() == before {
			t.Fatalf("%s: the owner was not asked: %d %s", what, resp.StatusCode, body)
		}
		return resp, body
	}
}

// TestOwnerErrorsInAnotherShapeAreNotRelayed: once the gateway holds no log
// of a response, its resource calls go to the owner; an owner's error body
// that is not OpenAI-shaped (llama.cpp's integer code without a param, a
// status sent as the code) is never passed on as it came, on any resource
// call, by the rule the POST path applies: it is the gateway's
// upstream_error with the owner's message, a 4xx keeping its status, a 5xx
// a 502. An OpenAI error is still passed on byte for byte.
func TestOwnerErrorsInAnotherShapeAreNotRelayed(t *testing.T) {
	id, askOwner := replyingOwner(t)
	openAI := `{"error":{"message":"bad thing","type":"invalid_request_error","param":null,"code":"some_code"}}`

	for _, rep := range []struct {
		name   string
		reply  ownerReply
		status int
		code   string // "": the owner's body, passed on as it came
	}{
		{"llama.cpp 400", ownerReply{400, string(llamaError(400, "invalid_request_error", "bad thing"))}, 400, "upstream_error"},
		{"llama.cpp 500", ownerReply{500, string(llamaError(500, "server_error", "bad thing"))}, 502, "upstream_error"},
		{"status as the code", ownerReply{400, `{"error":{"message":"bad thing","type":"invalid_request_error","param":null,"code":"400"}}`}, 400, "upstream_error"},
		{"no param", ownerReply{400, `{"error":{"message":"bad thing","type":"invalid_request_error","code":"some_code"}}`}, 400, "some_code"},
		{"OpenAI-shaped", ownerReply{400, openAI}, 400, ""},
	} {
		for _, call := range []struct{ method, path string }{
			{http.MethodGet, "/v1/responses/" + id},
			{http.MethodGet, "/v1/responses/" + id + "/input_items"},
			{http.MethodPost, "/v1/responses/" + id + "/cancel"},
			{http.MethodGet, "/v1/responses/" + id + "?stream=true"},
			{http.MethodDelete, "/v1/responses/" + id},
		} {
			what := rep.name + ": " + call.method + " " + strings.Replace(call.path, id, "{id}", 1)
			resp, body := askOwner(what, rep.reply, call.method, call.path)
			if resp.StatusCode != rep.status {
				t.Errorf("%s: HTTP %d, want %d: %s", what, resp.StatusCode, rep.status, body)
			}
			if rep.code == "" {
				if string(body) != rep.reply.body {
					t.Errorf("%s: the owner's OpenAI error was not passed on as it came: %s", what, body)
				}
				continue
			}
			if e := wantOpenAIError(t, what, body, rep.code); !strings.Contains(e.Get("message").Str, "bad thing") {
				t.Errorf("%s: the owner's message is lost: %s", what, body)
			}
		}
	}
}

// TestOwnerAnswersOfAnotherKindAreNotRelayed: an owner's 2xx answer to a
// resource call is passed on only when it is the kind of object the call
// answers (OpenAI's API reference): a list for input_items, a Response with
// its id for GET and cancel, a deletion for DELETE. Any other is the
// gateway's 502 upstream_error, as for an answer that is not JSON. A
// Response that passes is relayed as the owner wrote it, its missing fields
// not filled in.
func TestOwnerAnswersOfAnotherKindAreNotRelayed(t *testing.T) {
	id, askOwner := replyingOwner(t)
	const (
		partialResponse = `{"id":"resp_P_7","object":"response","status":"completed"}`
		list            = `{"object":"list","data":[],"first_id":null,"last_id":null,"has_more":false}`
		deletion        = `{"id":"resp_P_7","object":"response","deleted":true}`
	)
	get, items := "/v1/responses/"+id, "/v1/responses/"+id+"/input_items"
	cancel := "/v1/responses/" + id + "/cancel"

	for _, tc := range []struct {
		method, path, body string
		ok                 bool // passed on as it came; otherwise the 502
	}{
		{http.MethodGet, get, partialResponse, true},
		{http.MethodGet, get, list, false},
		{http.MethodGet, get, `{"object":"response","status":"completed"}`, false},
		{http.MethodGet, get, `{"id":"resp_P_7","status":"completed"}`, false},
		{http.MethodPost, cancel, partialResponse, true},
		{http.MethodPost, cancel, `{"id":"resp_P_7","object":"list"}`, false},
		{http.MethodGet, items, list, true},
		{http.MethodGet, items, partialResponse, false},
		{http.MethodGet, items, `{"object":"list","data":{}}`, false},
		{http.MethodDelete, get, deletion, true},
		{http.MethodDelete, get, partialResponse, false},
		{http.MethodDelete, get, `{"id":"resp_P_7","object":"response","deleted":"yes"}`, false},
	} {
		what := tc.method + " " + strings.Replace(tc.path, id, "{id}", 1) + " answered " + tc.body
		resp, body := askOwner(what, ownerReply{http.StatusOK, tc.body}, tc.method, tc.path)
		if tc.ok {
			if resp.StatusCode != http.StatusOK || string(body) != tc.body {
				t.Errorf("%s: %d %s; want the owner's answer as it came", what, resp.StatusCode, body)
			}
			continue
		}
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: HTTP %d, want 502: %s", what, resp.StatusCode, body)
		}
		if e := wantOpenAIError(t, what, body, "upstream_error"); !strings.Contains(e.Get("message").Str, `upstream "A" that owns the response`) {
			t.Errorf("%s: the message does not name the owner: %s", what, body)
		}
	}
}

// TestContinuedDeleteRefusalCode: the DELETE of a continued response whose
// owner (B, under its own id) refuses it with a 4xx is the gateway's own
// error naming the client's id, keeping the status; its code is the owner's
// when that is a real code, and upstream_error when the owner sent none
// or only the status (llama.cpp's integer code, "400"): never the status
// as a code.
func TestContinuedDeleteRefusalCode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reply  ownerReply
		status int
		code   string
	}{
		{"llama.cpp integer code", ownerReply{400, string(llamaError(400, "invalid_request_error", "bad thing"))}, 400, "upstream_error"},
		{"status as a string code", ownerReply{400, `{"error":{"message":"no","type":"invalid_request_error","param":null,"code":"400"}}`}, 400, "upstream_error"},
		{"no code", ownerReply{403, `{"error":{"message":"no","type":"invalid_request_error","param":null,"code":null}}`}, 403, "upstream_error"},
		{"a real code", ownerReply{400, `{"error":{"message":"no","type":"invalid_request_error","param":null,"code":"response_locked"}}`}, 400, "response_locked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, b := deletingUpstream(t, "P", nil), refusingDeleteUpstream(t, "B", tc.reply)
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{servers: map[string]*upstreamtest.Server{"P": p, "B": b},
				opts: gateway.Options{Store: openStore(t, t.TempDir()), Resume: gateway.ResumeOptions{Window: -1}}})
			p.Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
			b.Enqueue(upstreamtest.Answer(fullAnswer, 3))
			_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
			id := gjson.GetBytes(assertOneTerminal(t, evs).data, "response.id").Str
			if bID := b.Requests()[0].ResponseID; id == "" || bID == "" || bID == id {
				t.Fatalf("ids %q (client) and %q (B): not a continued response", id, bID)
			}
			status, body := deleteAs(t, h, "sk-client-secret", id)
			if len(deletesOf(b)) != 1 {
				t.Fatalf("B was sent DELETEs %v; want one", deletesOf(b))
			}
			if status != tc.status {
				t.Errorf("DELETE: HTTP %d, want %d: %s", status, tc.status, body)
			}
			if e := wantOpenAIError(t, "DELETE", body, tc.code); !strings.Contains(e.Get("message").Str, id) {
				t.Errorf("DELETE: the error does not name the client's id %s: %s", id, body)
			}
		})
	}
}

// refusingDeleteUpstream is a fake Responses upstream whose DELETEs of
// responses are answered with reply (recorded, as deletingUpstream's are).
func refusingDeleteUpstream(t *testing.T, name string, reply ownerReply) *upstreamtest.Server {
	t.Helper()
	up := upstreamtest.NewHandler(upstreamtest.Options{Name: name, StrictPrevious: true})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodDelete || !strings.HasPrefix(r.URL.Path, "/v1/responses/") {
			up.ServeHTTP(w, r)
			return
		}
		up.ServeHTTP(httptest.NewRecorder(), r) // recorded (the fake itself has no DELETE)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(reply.status)
		_, _ = io.WriteString(w, reply.body)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(up.Close)
	up.URL = srv.URL + "/v1"
	return up
}

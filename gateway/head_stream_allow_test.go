package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// TestAllowAgreesWithHeadOnStreams: where a HEAD is refused because its GET
// is answered by a stream (a resume, ?stream=true, and a streaming-input
// session's result, even one that turns out to be JSON: README "Endpoints"),
// OPTIONS and every 405 of that URL leave HEAD out of Allow, as the HEAD's
// own 405 does (RFC 9110 §10.2.1); elsewhere they list it next to GET. A
// HEAD of …/sessions//result, which names no session's result, is answered
// as its GET is.
func TestAllowAgreesWithHeadOnStreams(t *testing.T) {
	const clientCred = "sk-client-secret" // the response's owner (harness.post)
	h := encodedSlashHarness(t, "")
	mgr, err := streaminput.New(context.Background(), streaminput.Options{Dispatch: h.gw.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range mgr.Routes() {
		h.gw.Handle(rt.Method, rt.Path, rt.Handler)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = mgr.Close(ctx)
	})
	do := func(method, path, body string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+clientCred)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	id := h.createResponse(`{"model":"gpt-fake-1","input":"hi"}`)

	// A session whose answer is one JSON object: its GET …/result is a
	// 200 application/json once the input ends.
	resp, b := do(http.MethodPost, streaminput.PathPrefix, `{"endpoint":"/v1/responses","template":{"model":"gpt-fake-1"},"start_policy":"on_end_only"}`)
	var session struct{ ID string }
	if err := json.Unmarshal(b, &session); err != nil || resp.StatusCode != http.StatusOK || session.ID == "" {
		t.Fatalf("creating a session: %d %s", resp.StatusCode, b)
	}
	if resp, b := do(http.MethodPost, streaminput.PathPrefix+"/"+session.ID+"/chunks", `{"sequence_id":0,"payload":"hi","end_of_input":true}`); resp.StatusCode/100 != 2 {
		t.Fatalf("its chunk: %d %s", resp.StatusCode, b)
	}
	result := streaminput.PathPrefix + "/" + session.ID + "/result"
	if resp, b := do(http.MethodGet, result, ""); resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET %s = %d %q: %s", result, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}

	for _, tt := range []struct {
		method, path, allow string
		status              int
	}{
		{http.MethodHead, result, "GET, OPTIONS", http.StatusMethodNotAllowed},
		{http.MethodOptions, result, "GET, OPTIONS", http.StatusOK},
		{http.MethodPut, result, "GET, OPTIONS", http.StatusMethodNotAllowed},
		{http.MethodHead, "/v1/responses/" + id + "?stream=true", "DELETE, GET, OPTIONS", http.StatusMethodNotAllowed},
		{http.MethodOptions, "/v1/responses/" + id + "?stream=true", "DELETE, GET, OPTIONS", http.StatusOK},
		{http.MethodPut, "/v1/responses/" + id + "?stream=true", "DELETE, GET, OPTIONS", http.StatusMethodNotAllowed},
		// Not streams: HEAD is served there, and listed.
		{http.MethodOptions, "/v1/responses/" + id, "DELETE, GET, HEAD, OPTIONS", http.StatusOK},
		{http.MethodOptions, streaminput.PathPrefix + "/" + session.ID, "DELETE, GET, HEAD, OPTIONS", http.StatusOK},
		{http.MethodPut, streaminput.PathPrefix + "/" + session.ID, "DELETE, GET, HEAD, OPTIONS", http.StatusMethodNotAllowed},
	} {
		resp, _ := do(tt.method, tt.path, "")
		if got := resp.Header.Get("Allow"); resp.StatusCode != tt.status || got != tt.allow {
			t.Errorf("%s %s = %d, Allow %q; want %d, Allow %q", tt.method, tt.path, resp.StatusCode, got, tt.status, tt.allow)
		}
	}

	// No session's result: HEAD answers as GET does, with no body.
	empty := streaminput.PathPrefix + "//result"
	get, _ := do(http.MethodGet, empty, "")
	head, b := do(http.MethodHead, empty, "")
	if get.StatusCode != http.StatusNotFound || head.StatusCode != get.StatusCode || len(b) != 0 {
		t.Errorf("GET %s = %d, HEAD = %d with %d body bytes; want the GET's 404 without a body", empty, get.StatusCode, head.StatusCode, len(b))
	}
}

package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/tidwall/gjson"
)

// TestStoreFalseIsNotKept: with store:false nothing is kept once the answer
// is over (README "Privacy"): the resource API does not find the response,
// streamed or JSON, while the same request with store:true is found.
func TestStoreFalseIsNotKept(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts(), protocol: map[string]string{"A": "chat"}})
	streamedID := func(store string) string {
		_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true,"store":`+store+`}`)
		if len(evs) == 0 || evs[len(evs)-1].Name != "response.completed" {
			t.Fatalf("store:%s stream did not complete: %d events", store, len(evs))
		}
		return gjson.GetBytes(evs[len(evs)-1].Data, "response.id").Str
	}
	jsonID := func(store string) string {
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","store":`+store+`}`)
		defer resp.Body.Close()
		var body struct{ ID string }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("store:%s JSON answer: %d %v", store, resp.StatusCode, err)
		}
		return body.ID
	}
	for _, tt := range []struct {
		name string
		id   func(string) string
	}{{"streamed", streamedID}, {"JSON", jsonID}} {
		if status, body := h.call(http.MethodGet, "/v1/responses/"+tt.id("true"), "sk-client-secret"); status != http.StatusOK {
			t.Errorf("%s, store:true: GET %d %s, want 200", tt.name, status, body)
		}
		if status, body := h.call(http.MethodGet, "/v1/responses/"+tt.id("false"), "sk-client-secret"); status != http.StatusNotFound {
			t.Errorf("%s, store:false: GET %d %s, want 404", tt.name, status, body)
		}
	}
}

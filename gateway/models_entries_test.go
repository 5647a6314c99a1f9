package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// modelIDs is GET path's model ids, in order, with cred (none when "").
func modelIDs(t *testing.T, h *harness, cred string) []string {
	t.Helper()
	resp, b := send(t, h, http.MethodGet, "/v1/models", cred, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("models: %d %s", resp.StatusCode, b)
	}
	var list struct{ Data []struct{ ID string } }
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("models: %v: %s", err, b)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids
}

// TestModelsListedForTheKey: a key with a models list is shown only the
// models it may use, by the rule that refuses the others with
// model_not_allowed (the route's plain names too); a key without one is
// shown every model. GET /v1/models/{model} answers the same way.
func TestModelsListedForTheKey(t *testing.T) {
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "A", Models: []string{"gpt-fake-1", "gpt-fake-2", "other-model"}}},
		opts: gateway.Options{
			Routes: []gateway.Route{{Models: []string{"routed"}, Targets: []gateway.RouteTarget{{Upstream: "A", Model: "gpt-fake-1"}}}},
			Accounts: gateway.AccountsOptions{Required: true, Keys: []store.KeyRecord{
				keyRec("team-a", teamAKey, []string{"gpt-fake-*"}, store.KeyLimits{}),
				keyRec("team-b", teamBKey, nil, store.KeyLimits{}),
			}},
		},
	})
	if got := strings.Join(modelIDs(t, h, teamAKey), ","); got != "gpt-fake-1,gpt-fake-2" {
		t.Errorf("team-a is shown %s, want only the models it may use: gpt-fake-1,gpt-fake-2", got)
	}
	if got := strings.Join(modelIDs(t, h, teamBKey), ","); got != "gpt-fake-1,gpt-fake-2,other-model,routed" {
		t.Errorf("team-b is shown %s, want every model", got)
	}
	if resp, b := send(t, h, http.MethodGet, "/v1/models/other-model", teamAKey, ""); resp.StatusCode != http.StatusNotFound || codeOf(b) != "model_not_found" {
		t.Errorf("team-a retrieving other-model: %d %s, want 404 model_not_found", resp.StatusCode, b)
	}
	if resp, b := send(t, h, http.MethodGet, "/v1/models/other-model", teamBKey, ""); resp.StatusCode != http.StatusOK {
		t.Errorf("team-b retrieving other-model: %d %s", resp.StatusCode, b)
	}
	if resp, b := send(t, h, http.MethodGet, "/v1/models/gpt-fake-1", "", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("retrieving without a key: %d %s, want 401", resp.StatusCode, b)
	}
}

// TestModelsKeepTheUpstreamsEntries: /v1/models shows each model's entry
// as the first upstream that lists it listed it (created, owned_by and its
// own fields, such as vLLM's max_model_len), also when a route serves that
// name, a route's plain name no upstream lists in Sluice's own entry, and GET /v1/models/{model} answers that entry, so
// the OpenAI SDK's models.retrieve works through Sluice; an unknown model
// is OpenAI's 404 model_not_found.
func TestModelsKeepTheUpstreamsEntries(t *testing.T) {
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[`+
			`{"id":"shared","object":"model","created":1700000000,"owned_by":"vllm","root":"/models/shared","max_model_len":32768},`+
			`{"id":"org/sliced","object":"model","created":1700000001,"owned_by":"vllm","max_model_len":8192},`+
			`{"id":"bare"}]}`)
	}))
	t.Cleanup(vllm.Close)
	other := upstreamtest.NewServer(upstreamtest.Options{Name: "B", Models: []string{"shared", "only-b"}})
	t.Cleanup(other.Close)
	pool, err := upstream.NewPool([]upstream.Config{{Name: "vllm", BaseURL: vllm.URL + "/v1"}, {Name: "B", BaseURL: other.URL}},
		upstream.Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	pool.ProbeAll(context.Background())
	gw, err := gateway.New(gateway.Options{Pool: pool, Logger: hclog.NewNullLogger(),
		Routes: []gateway.Route{{Models: []string{"routed"}, Targets: []gateway.RouteTarget{{Upstream: "B", Model: "only-b"}}},
			{Models: []string{"shared"}, Targets: []gateway.RouteTarget{{Upstream: "vllm"}}}}}) // pins a listed name: its entry stays the upstream's
	if err != nil {
		t.Fatal(err)
	}
	url := serveGateway(t, gw)

	get := func(path string) (int, map[string]any, []byte) {
		t.Helper()
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, b)
		}
		return resp.StatusCode, v, b
	}
	want := map[string]string{
		"shared":     `{"id":"shared","object":"model","created":1700000000,"owned_by":"vllm","root":"/models/shared","max_model_len":32768}`,
		"org/sliced": `{"id":"org/sliced","object":"model","created":1700000001,"owned_by":"vllm","max_model_len":8192}`,
		"bare":       `{"id":"bare","object":"model","created":0,"owned_by":"vllm"}`, // OpenAI's Model members it lacked
		"only-b":     `{"id":"only-b","object":"model","created":1686935002,"owned_by":"upstreamtest"}`,
		"routed":     `{"id":"routed","object":"model","created":0,"owned_by":"sluice"}`,
	}
	code, list, raw := get("/v1/models")
	if code != http.StatusOK || list["object"] != "list" {
		t.Fatalf("models: %d %s", code, raw)
	}
	entries, _ := list["data"].([]any)
	var ids []string
	for _, e := range entries {
		m, _ := e.(map[string]any)
		id, _ := m["id"].(string)
		ids = append(ids, id)
		assertJSONEqual(t, "listed "+id, m, want[id])
	}
	if got := strings.Join(ids, ","); got != "bare,only-b,org/sliced,routed,shared" {
		t.Fatalf("models %s", got)
	}
	for id, entry := range want {
		code, got, raw := get("/v1/models/" + id)
		if code != http.StatusOK {
			t.Fatalf("GET /v1/models/%s: %d %s", id, code, raw)
		}
		assertJSONEqual(t, "retrieved "+id, got, entry)
	}

	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("sk-client-secret"), option.WithMaxRetries(0))
	m, err := client.Models.Get(context.Background(), "shared")
	if err != nil {
		t.Fatalf("models.retrieve: %v", err)
	}
	if m.ID != "shared" || m.Created != 1700000000 || m.OwnedBy != "vllm" || !strings.Contains(m.RawJSON(), `"max_model_len":32768`) {
		t.Fatalf("models.retrieve: %s", m.RawJSON())
	}
	_, err = client.Models.Get(context.Background(), "nope")
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
		t.Fatalf("models.retrieve of an unknown model: %v", err)
	}
}

func assertJSONEqual(t *testing.T, what string, got map[string]any, want string) {
	t.Helper()
	var w map[string]any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	g, _ := json.Marshal(got)
	wb, _ := json.Marshal(w)
	if string(g) != string(wb) {
		t.Errorf("%s: %s, want %s", what, g, wb)
	}
}

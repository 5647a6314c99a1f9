package gateway_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

const respBody = `{"model":"gpt-fake-1","input":"hi","stream":true}`

func TestOpenAIClientStreamsResponsesUnchanged(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	// Fixed ids and timestamps so the upstream's bytes are known exactly.
	want := upstreamtest.ResponsesEvents("resp_fixed", "gpt-fake-1", "Hello there, world", 4)
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: upstreamtest.ResponsesStream("resp_fixed", "gpt-fake-1", "Hello there, world", 4)}, upstreamtest.Script{Frames: upstreamtest.ResponsesStream("resp_fixed", "gpt-fake-1", "Hello there, world", 4)})

	client := h.client()
	stream := client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "gpt-fake-1",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	var types []string
	var text string
	var completedID string
	for stream.Next() {
		ev := stream.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text += ev.Delta
		}
		if ev.Type == "response.completed" {
			completedID = ev.Response.ID
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("openai-go stream error: %v", err)
	}
	if len(types) != len(want) {
		t.Fatalf("got %d events %v, want %d", len(types), types, len(want))
	}
	for i, w := range want {
		var v struct{ Type string }
		_ = json.Unmarshal(w, &v)
		if types[i] != v.Type {
			t.Fatalf("event %d = %s, want %s", i, types[i], v.Type)
		}
	}
	if text != "Hello there, world" || completedID != "resp_fixed" {
		t.Fatalf("text %q id %q", text, completedID)
	}

	// Byte-for-byte: the data of every event is what the upstream sent.
	_, evs := h.streamEvents("/v1/responses", respBody)
	if len(evs) != len(want) {
		t.Fatalf("raw: %d events, want %d", len(evs), len(want))
	}
	for i := range want {
		if string(evs[i].Data) != string(want[i]) {
			t.Fatalf("event %d changed:\n got %s\nwant %s", i, evs[i].Data, want[i])
		}
		if evs[i].Name != eventType(evs[i]) {
			t.Fatalf("event %d name %q does not match its type", i, evs[i].Name)
		}
	}
}

func TestOpenAIClientStreamsChat(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	client := h.client()
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-fake-1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	acc := openai.ChatCompletionAccumulator{}
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream error: %v", err)
	}
	if chunks < 3 || len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "Hello from A" || acc.Choices[0].FinishReason != "stop" {
		t.Fatalf("chunks %d, accumulated %+v", chunks, acc.Choices)
	}

	// The raw stream ends with [DONE] after the finish chunk.
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	if len(evs) == 0 || !evs[len(evs)-1].Done {
		t.Fatalf("chat stream does not end with [DONE]: %d events", len(evs))
	}
}

func TestNonStreamingAnswers(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	client := h.client()
	resp, err := client.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "gpt-fake-1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() != "Hello from A" || !strings.HasPrefix(resp.ID, "resp_A_") {
		t.Fatalf("response %q %q", resp.ID, resp.OutputText())
	}
	cc, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model: "gpt-fake-1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if cc.Choices[0].Message.Content != "Hello from A" {
		t.Fatalf("chat %+v", cc.Choices)
	}
}

func TestUnknownFieldsPassThroughAndKeysAreReplaced(t *testing.T) {
	h := newHarness(t, harnessConfig{keys: map[string]string{"A": "sk-upstream-secret"}, upstreams: []upstreamtest.Options{{Name: "A", APIKey: "sk-upstream-secret"}}})
	body := `{"model":"gpt-fake-1","input":"hi","x_future_field":{"nested":[1,2,3]},"store":false,"include":["reasoning.encrypted_content"]}`
	resp := h.post("/v1/responses", body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	reqs := h.ups["A"].Requests()
	if len(reqs) != 1 {
		t.Fatalf("upstream saw %d requests", len(reqs))
	}
	if string(reqs[0].Body) != body {
		t.Fatalf("body changed:\n got %s\nwant %s", reqs[0].Body, body)
	}
	if got := reqs[0].Header.Get("Authorization"); got != "Bearer sk-upstream-secret" {
		t.Fatalf("upstream Authorization = %q", got)
	}
	// The upstream key never shows up anywhere a client or log reader can see.
	resp = h.post("/v1/responses", `{"model":"gpt-fake-1"}`)
	resp.Body.Close()
	for _, where := range []string{h.logs.String(), h.metrics()} {
		if strings.Contains(where, "sk-upstream-secret") || strings.Contains(where, "sk-client-secret") {
			t.Fatal("a key leaked into logs or metrics")
		}
	}
	var ups map[string]any
	h.getJSON("/admin/upstreams", &ups)
	if b, _ := json.Marshal(ups); strings.Contains(string(b), "sk-upstream-secret") {
		t.Fatal("key leaked into /admin/upstreams")
	}
}

func TestClientKeyPassesThroughWhenUpstreamHasNone(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`)
	resp.Body.Close()
	if got := h.ups["A"].Requests()[0].Header.Get("Authorization"); got != "Bearer sk-client-secret" {
		t.Fatalf("Authorization = %q, want the client's", got)
	}
}

func TestBadInput(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{MaxBodyBytes: 1024}})
	tests := []struct {
		name, path, body string
		status           int
		param, code      string
	}{
		{"malformed json", "/v1/responses", `{"model":`, 400, "", "invalid_json"},
		{"not an object", "/v1/responses", `[1,2]`, 400, "", "invalid_type"},
		{"missing model", "/v1/responses", `{"input":"hi"}`, 400, "model", "missing_required_parameter"},
		{"model not a string", "/v1/responses", `{"model":3,"input":"hi"}`, 400, "model", "invalid_type"},
		{"empty model", "/v1/responses", `{"model":" ","input":"hi"}`, 400, "model", "missing_required_parameter"},
		{"input null", "/v1/responses", `{"model":"m","input":null}`, 400, "input", "invalid_type"},
		{"input wrong type", "/v1/responses", `{"model":"m","input":42}`, 400, "input", "invalid_type"},
		{"stream wrong type", "/v1/responses", `{"model":"m","input":"x","stream":"yes"}`, 400, "stream", "invalid_type"},
		{"previous id wrong type", "/v1/responses", `{"model":"m","input":"x","previous_response_id":7}`, 400, "previous_response_id", "invalid_type"},
		{"previous id empty", "/v1/responses", `{"model":"m","input":"x","previous_response_id":""}`, 400, "previous_response_id", "invalid_value"},
		{"background wrong type", "/v1/responses", `{"model":"m","input":"x","background":"yes"}`, 400, "background", "invalid_type"},
		{"store wrong type", "/v1/responses", `{"model":"m","input":"x","store":0}`, 400, "store", "invalid_type"},
		{"chat store wrong type", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}],"store":"no"}`, 400, "store", "invalid_type"},
		{"missing messages", "/v1/chat/completions", `{"model":"m"}`, 400, "messages", "missing_required_parameter"},
		{"messages wrong type", "/v1/chat/completions", `{"model":"m","messages":"hi"}`, 400, "messages", "invalid_type"},
		{"empty messages", "/v1/chat/completions", `{"model":"m","messages":[]}`, 400, "messages", "missing_required_parameter"},
		{"duplicate key", "/v1/responses", `{"model":"m","input":"x","model":"n"}`, 400, "model", "duplicate_key"},
		{"too large", "/v1/responses", `{"model":"m","input":"` + strings.Repeat("x", 2000) + `"}`, 413, "input", "payload_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.post(tt.path, tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			e := readError(t, resp)
			if e.Error.Type != "invalid_request_error" || deref(e.Error.Param) != tt.param || deref(e.Error.Code) != tt.code {
				t.Fatalf("error %+v param=%q code=%q", e.Error, deref(e.Error.Param), deref(e.Error.Code))
			}
		})
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("bad input reached the upstream %d times", n)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	if code := h.getJSON("/v2/nothing", &apiError{}); code != http.StatusNotFound {
		t.Fatalf("unknown route → %d", code)
	}
	resp, _ := http.Get(h.url + "/v1/chat/completions")
	e := readError(t, resp)
	if resp.StatusCode != http.StatusMethodNotAllowed || e.Error.Type != "invalid_request_error" {
		t.Fatalf("GET chat → %d %+v", resp.StatusCode, e)
	}
}

func TestModelsHealthReadyMetrics(t *testing.T) {
	h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{
		{Name: "A", Models: []string{"m-shared", "m-a"}},
		{Name: "B", Models: []string{"m-shared", "m-b"}},
		{Name: "C", Models: []string{"m-c"}},
	}})
	h.ups["C"].SetModelsStatus(http.StatusServiceUnavailable)
	h.pool.ProbeAll(context.Background())
	var list struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	if code := h.getJSON("/v1/models", &list); code != 200 {
		t.Fatalf("models %d", code)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "m-a,m-b,m-shared" {
		t.Fatalf("models %v: want merged, de-duplicated, only healthy upstreams", ids)
	}
	if code := h.getJSON("/healthz", nil); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code := h.getJSON("/readyz", nil); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	for _, name := range []string{"A", "B"} {
		h.ups[name].SetModelsStatus(http.StatusInternalServerError)
	}
	h.pool.ProbeAll(context.Background())
	if code := h.getJSON("/readyz", nil); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with no healthy upstream = %d", code)
	}
	m := h.metrics()
	for _, series := range []string{"sluice_active_streams", "go_goroutines"} {
		if !strings.Contains(m, series) {
			t.Errorf("metrics lack %s", series)
		}
	}
}

func TestSlowLorisHeadersAreCutOff(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{ReadHeader: 200 * time.Millisecond}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	start := time.Now()
	_, err = conn.Read(buf)
	for err == nil {
		_, err = conn.Read(buf)
	}
	if time.Since(start) > 4*time.Second {
		t.Fatalf("connection held for %v with incomplete headers", time.Since(start))
	}
}

func TestCompressedRequestBodies(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{MaxBodyBytes: 4096}})
	body := `{"model":"gpt-fake-1","input":"compressed hello"}`
	send := func(enc string, payload []byte) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", bytes.NewReader(payload))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", enc)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	closed := func(resp *http.Response) *http.Response { resp.Body.Close(); return resp }
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(body))
	zw.Close()
	enc, _ := zstd.NewWriter(nil)
	zs := enc.EncodeAll([]byte(body), nil)
	for name, payload := range map[string][]byte{"gzip": gz.Bytes(), "zstd": zs} {
		resp := send(name, payload)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", name, resp.StatusCode)
		}
		reqs := h.ups["A"].Requests()
		last := reqs[len(reqs)-1]
		if string(last.Body) != body || last.Header.Get("Content-Encoding") != "" {
			t.Fatalf("%s: upstream got %q with Content-Encoding %q", name, last.Body, last.Header.Get("Content-Encoding"))
		}
	}
	// A small body that inflates past the cap is payload_too_large.
	var bomb bytes.Buffer
	zw = gzip.NewWriter(&bomb)
	zw.Write([]byte(`{"model":"gpt-fake-1","input":"` + strings.Repeat("a", 100000) + `"}`))
	zw.Close()
	if resp := send("gzip", bomb.Bytes()); closed(resp).StatusCode != 413 {
		t.Fatalf("inflating body: %d", resp.StatusCode)
	}
	if resp := send("br", []byte(body)); closed(resp).StatusCode != 415 {
		t.Fatalf("unsupported encoding: %d", resp.StatusCode)
	}
	if resp := send("gzip", []byte("not gzip")); closed(resp).StatusCode != 400 {
		t.Fatalf("corrupt gzip: %d", resp.StatusCode)
	}
}

func TestAdminToken(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{AdminToken: "adm-secret"}})
	get := func(auth string) int {
		req, _ := http.NewRequest(http.MethodGet, h.url+"/admin/upstreams", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(""); code != 401 {
		t.Fatalf("no token → %d", code)
	}
	if code := get("Bearer wrong"); code != 401 {
		t.Fatalf("wrong token → %d", code)
	}
	if code := get("Bearer adm-secret"); code != 200 {
		t.Fatalf("right token → %d", code)
	}
	// The scheme's name is case-insensitive (RFC 9110), as for Sluice keys.
	if code := get("bearer adm-secret"); code != 200 {
		t.Fatalf("right token, lower-case scheme → %d", code)
	}
	for _, bad := range []string{"Basic adm-secret", "adm-secret", "Bearer adm-secret-and-more", "Bearer"} {
		if code := get(bad); code != 401 {
			t.Fatalf("%q → %d", bad, code)
		}
	}
	// The API and health endpoints are not affected.
	if code := h.getJSON("/healthz", nil); code != 200 {
		t.Fatalf("healthz %d", code)
	}
}

// A session scope id (X-Codex-Turn-State, session_id) is stored with every
// anchor a request records, so it is bounded like a response id.
func TestOverlongScopeHeadersAreRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	for _, name := range []string{"X-Codex-Turn-State", "Session_id", "X-Codex-Session-Id"} {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/v1/responses", strings.NewReader(`{"model":"m","input":"x"}`))
		req.Header.Set(name, strings.Repeat("a", 1025))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		e := readError(t, resp)
		if resp.StatusCode != 400 || deref(e.Error.Code) != "invalid_value" {
			t.Fatalf("%s of 1025 bytes: %d %+v", name, resp.StatusCode, e.Error)
		}
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("an overlong scope reached the upstream %d times", n)
	}
}

package upstreamtest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var wantRespTypes = []string{
	"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
	"response.output_text.delta", "response.output_text.delta", "response.output_text.delta",
	"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed",
}

// checkResponsesStream validates the shape of a canned Responses stream.
func checkResponsesStream(t *testing.T, evs []map[string]any, id, model, text string) {
	t.Helper()
	if got := types(evs); !slices.Equal(got, wantRespTypes) {
		t.Fatalf("types = %v\nwant %v", got, wantRespTypes)
	}
	var deltas strings.Builder
	itemID := ""
	for i, e := range evs {
		if got := num(e["sequence_number"]); got != i {
			t.Errorf("event %d sequence_number = %v", i, e["sequence_number"])
		}
		typ := str(e["type"])
		switch typ {
		case "response.created", "response.in_progress", "response.completed":
			r := asObj(e["response"])
			if r["id"] != id || r["object"] != "response" || r["model"] != model || num(r["created_at"]) <= 0 {
				t.Errorf("%s response = %v", typ, r)
			}
			want := "in_progress"
			if typ == "response.completed" {
				want = "completed"
			}
			if r["status"] != want {
				t.Errorf("%s status = %v", typ, r["status"])
			}
		case "response.output_item.added", "response.output_item.done":
			if num(e["output_index"]) != 0 {
				t.Errorf("%s without output_index 0: %v", typ, e)
			}
			item := asObj(e["item"])
			if item["type"] != "message" || item["role"] != "assistant" || !strings.HasPrefix(str(item["id"]), "msg_") {
				t.Errorf("%s item = %v", typ, item)
			}
			if itemID == "" {
				itemID = str(item["id"])
			} else if item["id"] != itemID {
				t.Errorf("item ids differ: %v vs %v", item["id"], itemID)
			}
		default:
			if num(e["output_index"]) != 0 || num(e["content_index"]) != 0 || e["item_id"] != itemID {
				t.Errorf("%s location fields wrong: %v", typ, e)
			}
		}
		if typ == "response.output_text.delta" {
			deltas.WriteString(str(e["delta"]))
		}
	}
	if deltas.String() != text {
		t.Errorf("deltas = %q, want %q", deltas.String(), text)
	}
	if got := str(evs[7]["text"]); got != text {
		t.Errorf("output_text.done text = %q", got)
	}
	done := evs[len(evs)-1]
	if got := path(done, "response", "output", 0, "content", 0, "text"); got != text {
		t.Errorf("completed output text = %v", got)
	}
	if got := path(done, "response", "output", 0, "id"); got != itemID {
		t.Errorf("completed output id = %v", got)
	}
	u := asObj(path(done, "response", "usage"))
	if num(u["input_tokens"]) <= 0 || num(u["output_tokens"]) != 3 || num(u["total_tokens"]) != num(u["input_tokens"])+3 {
		t.Errorf("usage = %v", u)
	}
}

func TestResponsesStreamCanned(t *testing.T) {
	s := NewServer(Options{Name: "A"})
	defer s.Close()
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") || !strings.HasSuffix(s.URL, "/v1") {
		t.Fatalf("URL = %q", s.URL)
	}
	c := newClient(t)
	for i, model := range []string{"gpt-4o", "gpt-5"} {
		resp, body, err := c.post(s.URL+"/responses", `{"model":"`+model+`","stream":true,"input":"hi"}`)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		blocks := parseSSE(t, body)
		for _, b := range blocks {
			if b.Event == "" {
				t.Errorf("block without event line: %+v", b)
			}
		}
		id := []string{"resp_A_1", "resp_A_2"}[i]
		checkResponsesStream(t, decodeEvents(t, blocks), id, model, "Hello from A")
		if !strings.Contains(string(body), "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,") {
			t.Errorf("frame form wrong:\n%s", body)
		}
	}
}

func TestResponsesJSON(t *testing.T) {
	s := NewServer(Options{Name: "B", Models: []string{"m1", "m2"}})
	defer s.Close()
	resp, body, err := newClient(t).post(s.URL+"/responses", `{"input":"hi"}`)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", err, resp)
	}
	m := mustJSON(t, body)
	if m["id"] != "resp_B_1" || m["object"] != "response" || m["status"] != "completed" || m["model"] != "m1" {
		t.Errorf("response = %v", m)
	}
	if got := path(m, "output", 0, "content", 0, "text"); got != "Hello from B" {
		t.Errorf("text = %v", got)
	}
	if path(m, "output", 0, "content", 0, "type") != "output_text" || num(path(m, "usage", "output_tokens")) != 3 {
		t.Errorf("body = %s", body)
	}
}

func TestChatStreamCanned(t *testing.T) {
	s := NewServer(Options{Name: "C"})
	defer s.Close()
	c := newClient(t)
	for _, usage := range []bool{false, true} {
		req := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]`
		if usage {
			req += `,"stream_options":{"include_usage":true}`
		}
		resp, body, err := c.post(s.URL+"/chat/completions", req+"}")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", err, resp)
		}
		blocks := parseSSE(t, body)
		last := blocks[len(blocks)-1]
		if last.Data != "[DONE]" || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("last block %+v", last)
		}
		evs := decodeEvents(t, blocks[:len(blocks)-1])
		var text strings.Builder
		id := str(evs[0]["id"])
		if !strings.HasPrefix(id, "chatcmpl-C-") {
			t.Errorf("id = %q", id)
		}
		for i, e := range evs {
			if e["object"] != "chat.completion.chunk" || e["model"] != "gpt-4o" || e["id"] != id || num(e["created"]) <= 0 {
				t.Errorf("chunk %d = %v", i, e)
			}
			text.WriteString(str(path(e, "choices", 0, "delta", "content")))
		}
		if path(evs[0], "choices", 0, "delta", "role") != "assistant" {
			t.Errorf("first chunk has no role: %v", evs[0])
		}
		if text.String() != "Hello from C" {
			t.Errorf("text = %q", text.String())
		}
		finish := evs[len(evs)-1]
		if usage {
			u := asObj(finish["usage"])
			if len(finish["choices"].([]any)) != 0 || num(u["completion_tokens"]) != 3 || num(u["total_tokens"]) != num(u["prompt_tokens"])+3 {
				t.Errorf("usage chunk = %v", finish)
			}
			finish = evs[len(evs)-2]
		}
		if path(finish, "choices", 0, "finish_reason") != "stop" {
			t.Errorf("finish chunk = %v", finish)
		}
	}
}

func TestChatJSON(t *testing.T) {
	s := NewServer(Options{Name: "C"})
	defer s.Close()
	resp, body, err := newClient(t).post(s.URL+"/chat/completions", `{"model":"x","messages":[]}`)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", err, resp)
	}
	m := mustJSON(t, body)
	if m["object"] != "chat.completion" || m["model"] != "x" || path(m, "choices", 0, "message", "content") != "Hello from C" ||
		path(m, "choices", 0, "finish_reason") != "stop" || num(path(m, "usage", "total_tokens")) <= 0 {
		t.Errorf("body = %s", body)
	}
}

func TestModels(t *testing.T) {
	s := NewServer(Options{Models: []string{"a", "b"}})
	defer s.Close()
	c := newClient(t)
	resp, body, err := c.do(context.Background(), http.MethodGet, s.URL+"/models", "")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", err, resp)
	}
	m := mustJSON(t, body)
	if m["object"] != "list" || path(m, "data", 1, "id") != "b" || path(m, "data", 0, "object") != "model" {
		t.Errorf("models = %s", body)
	}
	s.SetModelsStatus(503)
	resp, body, _ = c.do(context.Background(), http.MethodGet, s.URL+"/models", "")
	if resp.StatusCode != 503 || path(mustJSON(t, body), "error", "type") != "server_error" {
		t.Errorf("status %d body %s", resp.StatusCode, body)
	}
	s.SetModelsStatus(0)
	resp, _, _ = c.do(context.Background(), http.MethodGet, s.URL+"/models", "")
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	resp, _, _ = c.do(context.Background(), http.MethodGet, s.URL+"/models/", "")
	if resp.StatusCode != 404 {
		t.Errorf("/models/ status %d", resp.StatusCode)
	}
	if s.ModelsRequests() != 3 {
		t.Errorf("ModelsRequests = %d", s.ModelsRequests())
	}
	// Probes are not recorded; the 404 on /models/ is.
	if s.RequestCount() != 1 || s.Requests()[0].Path != "/v1/models/" {
		t.Errorf("requests = %+v", s.Requests())
	}
}

func TestAPIKey(t *testing.T) {
	s := NewServer(Options{APIKey: "sk-good"})
	defer s.Close()
	c := newClient(t)
	s.Enqueue(Status5xx(500))
	for _, auth := range []string{"", "Bearer sk-bad"} {
		for _, p := range []string{"/responses", "/chat/completions"} {
			var hdr []string
			if auth != "" {
				hdr = []string{"Authorization", auth}
			}
			resp, body, _ := c.post(s.URL+p, `{"model":"m"}`, hdr...)
			m := mustJSON(t, body)
			if resp.StatusCode != 401 || path(m, "error", "type") != "invalid_request_error" || str(path(m, "error", "message")) == "" {
				t.Errorf("%s auth %q: %d %s", p, auth, resp.StatusCode, body)
			}
		}
		resp, _, _ := c.do(context.Background(), http.MethodGet, s.URL+"/models", "", "Authorization", auth)
		if resp.StatusCode != 401 {
			t.Errorf("models auth %q: %d", auth, resp.StatusCode)
		}
	}
	// Rejected requests are recorded but do not consume the script.
	if s.RequestCount() != 4 || s.Pending() != 1 {
		t.Errorf("count %d pending %d", s.RequestCount(), s.Pending())
	}
	resp, _, _ := c.post(s.URL+"/responses", `{"model":"m"}`, "Authorization", "Bearer sk-good")
	if resp.StatusCode != 500 {
		t.Errorf("authorized request got %d, want the scripted 500", resp.StatusCode)
	}
	resp, _, _ = c.post(s.URL+"/responses", `{"model":"m"}`, "Authorization", "Bearer sk-good")
	if resp.StatusCode != 200 {
		t.Errorf("authorized request got %d", resp.StatusCode)
	}
}

func TestStrictPrevious(t *testing.T) {
	s := NewServer(Options{Name: "P", StrictPrevious: true})
	defer s.Close()
	c := newClient(t)
	want := `{"error":{"message":"Previous response with id 'resp_x' not found.","type":"invalid_request_error",` +
		`"param":"previous_response_id","code":"previous_response_not_found"}}`

	// Non-stream: JSON 400.
	resp, body, _ := c.post(s.URL+"/responses", `{"model":"m","previous_response_id":"resp_x"}`)
	if resp.StatusCode != 400 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	jsonEqual(t, body, want)
	// Stream: the same 400 before any event.
	resp, body, _ = c.post(s.URL+"/responses", `{"model":"m","stream":true,"previous_response_id":"resp_x"}`)
	if resp.StatusCode != 400 || strings.Contains(string(body), "event:") {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	jsonEqual(t, body, want)

	// A response this server created chains fine, streamed or not.
	_, body, _ = c.post(s.URL+"/responses", `{"model":"m"}`)
	id := str(mustJSON(t, body)["id"])
	resp, _, _ = c.post(s.URL+"/responses", `{"model":"m","stream":true,"previous_response_id":"`+id+`"}`)
	if resp.StatusCode != 200 {
		t.Errorf("known previous got %d", resp.StatusCode)
	}
	// Rejections do not consume scripts and leave ResponseID empty.
	reqs := s.Requests()
	if reqs[0].ResponseID != "" || reqs[0].PreviousResponseID != "resp_x" || reqs[2].ResponseID != id {
		t.Errorf("requests = %+v", reqs)
	}
	// An upstream that lost its state.
	s.ForgetResponses(id)
	resp, _, _ = c.post(s.URL+"/responses", `{"model":"m","previous_response_id":"`+id+`"}`)
	if resp.StatusCode != 400 {
		t.Errorf("forgotten previous got %d", resp.StatusCode)
	}
}

func TestStrictPreviousInStream(t *testing.T) {
	for _, tc := range []struct {
		shape Shape
		want  string
	}{
		{ShapeErrorEvent, `{"type":"error","status":400,"error":{"message":"Previous response with id 'resp_y' not found.",` +
			`"type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}`},
		{ShapeFailed, `{"type":"response.failed","response":{"id":"resp_P_1","status":"failed",` +
			`"error":{"code":"previous_response_not_found","message":"Previous response with id 'resp_y' not found."}}}`},
	} {
		s := NewServer(Options{Name: "P", StrictPrevious: true, PreviousShape: tc.shape})
		c := newClient(t)
		resp, body, _ := c.post(s.URL+"/responses", `{"model":"m","stream":true,"previous_response_id":"resp_y"}`)
		blocks := parseSSE(t, body)
		if resp.StatusCode != 200 || len(blocks) != 1 {
			t.Fatalf("shape %d: %d %s", tc.shape, resp.StatusCode, body)
		}
		jsonEqual(t, []byte(blocks[0].Data), tc.want)
		// Non-streaming requests still get the status form.
		resp, _, _ = c.post(s.URL+"/responses", `{"model":"m","previous_response_id":"resp_y"}`)
		if resp.StatusCode != 400 {
			t.Errorf("non-stream got %d", resp.StatusCode)
		}
		s.Close()
	}
}

func TestStrictModels(t *testing.T) {
	s := NewServer(Options{Models: []string{"a"}, StrictModels: true})
	defer s.Close()
	resp, body, _ := newClient(t).post(s.URL+"/chat/completions", `{"model":"zzz"}`)
	if resp.StatusCode != 404 || path(mustJSON(t, body), "error", "code") != "model_not_found" {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}

func TestBadJSONAndUnknownPath(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	c := newClient(t)
	s.Enqueue(Status5xx(502))
	resp, body, _ := c.post(s.URL+"/responses", `{not json`)
	if resp.StatusCode != 400 || path(mustJSON(t, body), "error", "type") != "invalid_request_error" {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	resp, body, _ = c.post(s.URL+"/embeddings", `{}`)
	if resp.StatusCode != 404 || !strings.Contains(str(path(mustJSON(t, body), "error", "message")), "/v1/embeddings") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	if s.Pending() != 1 {
		t.Errorf("pending = %d", s.Pending())
	}
}

func TestFIFOAcrossEndpoints(t *testing.T) {
	s := NewServer(Options{})
	defer s.Close()
	c := newClient(t)
	s.Enqueue(Status5xx(500), Status5xx(502))
	resp, _, _ := c.post(s.URL+"/responses", `{"model":"m","stream":true}`)
	if resp.StatusCode != 500 {
		t.Errorf("first = %d", resp.StatusCode)
	}
	resp, _, _ = c.post(s.URL+"/chat/completions", `{"model":"m"}`)
	if resp.StatusCode != 502 {
		t.Errorf("second = %d", resp.StatusCode)
	}
	resp, _, _ = c.post(s.URL+"/chat/completions", `{"model":"m"}`)
	if resp.StatusCode != 200 || s.Pending() != 0 {
		t.Errorf("third = %d", resp.StatusCode)
	}
}

func TestRecording(t *testing.T) {
	s := NewServer(Options{Name: "R"})
	defer s.Close()
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- s.WaitRequests(ctx, 2) }()
	before := time.Now()
	c.post(s.URL+"/responses", `{"model":"m1","stream":true}`, "X-Test", "one")
	c.post(s.URL+"/chat/completions", `{"model":"m2"}`, "X-Test", "two")
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	reqs := s.Requests()
	if len(reqs) != 2 || s.RequestCount() != 2 {
		t.Fatalf("requests = %+v", reqs)
	}
	r0, r1 := reqs[0], reqs[1]
	if r0.Method != "POST" || r0.Path != "/v1/responses" || r0.Header.Get("X-Test") != "one" || r0.Model != "m1" || !r0.Stream ||
		string(r0.Body) != `{"model":"m1","stream":true}` || r0.ReceivedAt.Before(before) || r0.ResponseID != "resp_R_1" || r0.WebSocket {
		t.Errorf("r0 = %+v", r0)
	}
	if r1.Path != "/v1/chat/completions" || r1.Header.Get("X-Test") != "two" || r1.Stream || r1.ResponseID != "chatcmpl-R-2" {
		t.Errorf("r1 = %+v", r1)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if err := s.WaitRequests(short, 3); err == nil {
		t.Error("WaitRequests(3) returned without a third request")
	}
	s.ClearRequests()
	if s.RequestCount() != 0 || len(s.Requests()) != 0 {
		t.Error("ClearRequests did not clear")
	}
}

func TestDisableRecording(t *testing.T) {
	s := NewServer(Options{DisableRecording: true})
	defer s.Close()
	newClient(t).post(s.URL+"/responses", `{"model":"m"}`)
	if s.RequestCount() != 1 || len(s.Requests()) != 0 {
		t.Errorf("count %d, requests %d", s.RequestCount(), len(s.Requests()))
	}
}

func TestNewHandler(t *testing.T) {
	s := NewHandler(Options{Name: "H"})
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()
	defer s.Close()
	if s.URL != "" || s.WebSocketURL() != "" {
		t.Errorf("URL = %q", s.URL)
	}
	_, body, _ := newClient(t).post(hs.URL+"/v1/responses", `{"model":"m"}`)
	if path(mustJSON(t, body), "output", 0, "content", 0, "text") != "Hello from H" {
		t.Errorf("body %s", body)
	}
}

func TestSetDefaultAndPlaceholders(t *testing.T) {
	s := NewServer(Options{Name: "D"})
	defer s.Close()
	s.SetDefault(Script{
		Frames:     ResponsesStream(PlaceholderID, PlaceholderModel, "one two three four five", 5),
		ChatFrames: ChatStream(PlaceholderID, PlaceholderModel, "alpha beta", 2),
		Body:       ResponseJSON(PlaceholderID, PlaceholderModel, "custom "+PlaceholderName),
	})
	c := newClient(t)
	_, body, _ := c.post(s.URL+"/responses", `{"model":"q\"m","stream":true}`)
	evs := decodeEvents(t, parseSSE(t, body))
	if len(evs) != 13 || path(evs[0], "response", "id") != "resp_D_1" || path(evs[0], "response", "model") != `q"m` ||
		evs[2]["item"].(map[string]any)["id"] != "msg_D_1" {
		t.Errorf("events = %v", evs)
	}
	_, body, _ = c.post(s.URL+"/chat/completions", `{"model":"m","stream":true}`)
	if !strings.Contains(string(body), `"id":"chatcmpl-D-2"`) || !strings.Contains(string(body), `"content":" beta"`) {
		t.Errorf("chat = %s", body)
	}
	_, body, _ = c.post(s.URL+"/responses", `{"model":"m"}`)
	m := mustJSON(t, body)
	if m["id"] != "resp_D_3" || path(m, "output", 0, "content", 0, "text") != "custom D" {
		t.Errorf("json = %s", body)
	}
	s.SetDefault(Script{})
	_, body, _ = c.post(s.URL+"/responses", `{"model":"m"}`)
	if path(mustJSON(t, body), "output", 0, "content", 0, "text") != "Hello from D" {
		t.Errorf("reset default: %s", body)
	}
}

func TestConcurrent(t *testing.T) {
	s := NewServer(Options{Name: "Z", StrictPrevious: true})
	defer s.Close()
	c := newClient(t)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%3 == 0 {
				s.Enqueue(Canned())
			}
			p := "/responses"
			if i%2 == 1 {
				p = "/chat/completions"
			}
			resp, _, err := c.post(s.URL+p, `{"model":"m","stream":true}`)
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("%v %v", err, resp)
			}
			_ = s.Requests()
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, r := range s.Requests() {
		if seen[r.ResponseID] {
			t.Errorf("duplicate id %s", r.ResponseID)
		}
		seen[r.ResponseID] = true
	}
}

func TestCloseRejectsLateRequests(t *testing.T) {
	s := NewHandler(Options{})
	s.Close()
	s.Close()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(`{}`)))
	if rec.Code != 503 {
		t.Errorf("code %d", rec.Code)
	}
}

// With Conversations, a Responses request naming a conversation the server
// does not hold (as an id or {"id": …}) gets OpenAI's 404 without taking a
// script; one it holds, or none named, is served.
func TestConversations(t *testing.T) {
	s := NewServer(Options{Name: "C", Conversations: []string{"conv_1"}})
	defer s.Close()
	s.Enqueue(Status5xx(http.StatusInternalServerError))
	for _, tc := range []struct {
		body   string
		status int
	}{
		{`{"input":"hi","conversation":"conv_2"}`, http.StatusNotFound},
		{`{"input":"hi","conversation":{"id":"conv_2"}}`, http.StatusNotFound},
		{`{"input":"hi","conversation":"conv_1"}`, http.StatusInternalServerError}, // the queued script, untouched until now
		{`{"input":"hi","conversation":{"id":"conv_1"}}`, http.StatusOK},
		{`{"input":"hi","conversation":null}`, http.StatusOK},
		{`{"input":"hi"}`, http.StatusOK},
	} {
		resp, body, err := newClient(t).post(s.URL+"/responses", tc.body)
		if err != nil || resp.StatusCode != tc.status {
			t.Fatalf("%s: %v %v %s, want %d", tc.body, err, resp, body, tc.status)
		}
		if tc.status == http.StatusNotFound {
			m := mustJSON(t, body)
			if path(m, "error", "param") != "conversation" || path(m, "error", "message") != "Conversation with id 'conv_2' not found." {
				t.Fatalf("%s: %s", tc.body, body)
			}
		}
	}
}

package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// modeAServer serves the harness's gateway behind streaming input's Mode A
// middleware, the way cmd/sluice mounts it, and returns its base URL.
func modeAServer(t *testing.T, h *harness) string {
	t.Helper()
	mgr, err := streaminput.New(context.Background(), streaminput.Options{Dispatch: h.gw.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mgr.ModeA(h.gw.Handler()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = mgr.Close(ctx)
		srv.Close()
	})
	return srv.URL
}

// modeAStream starts a Mode A request whose body the test writes line by
// line, and returns the body's writer and the answer's SSE reader (nil when
// the request failed).
func modeAStream(t *testing.T, url string, header string) (io.WriteCloser, func() *sse.Reader) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url+streaminput.EndpointResponses, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	req.Header.Set(streaminput.HeaderStreamingInput, "true")
	respc := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("Mode A request: %v", err)
		}
		respc <- resp
	}()
	t.Cleanup(func() { _ = pw.Close() })
	if _, err := io.WriteString(pw, header+"\n"); err != nil {
		t.Fatal(err)
	}
	return pw, func() *sse.Reader {
		resp := <-respc
		if resp == nil {
			t.FailNow()
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return sse.NewReader(resp.Body, 1<<20)
	}
}

// readUntil reads events until one satisfies stop (included) or the
// stream ends.
func readUntil(t *testing.T, r *sse.Reader, stop func(sse.Event) bool) []sse.Event {
	t.Helper()
	var evs []sse.Event
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return evs
		}
		if err != nil {
			t.Fatalf("reading the answer: %v (after %d events)", err, len(evs))
		}
		evs = append(evs, ev.Clone())
		if stop(ev) {
			return evs
		}
	}
}

type failedResponse struct {
	SequenceNumber int64 `json:"sequence_number"`
	Response       struct {
		ID        string          `json:"id"`
		Model     string          `json:"model"`
		CreatedAt json.RawMessage `json:"created_at"`
		Error     struct{ Code, Message string }
		Output    []struct {
			Type, Status string
			Content      []struct{ Text string }
		}
		Tools    []map[string]any
		Metadata map[string]string
	}
}

// checkModeAFailed checks the stream ends with one response.failed that
// validates against the spec, numbered after the events before it, with a
// code outside the spec's enum traveling as invalid_prompt (the client's
// own error: its body) leading the message; it returns the event.
func checkModeAFailed(t *testing.T, evs []sse.Event, wantPrefix string) failedResponse {
	t.Helper()
	like := make([]eventLike, len(evs))
	for i, ev := range evs {
		like[i] = eventLike{typ: eventType(ev), data: ev.Data}
		var s struct {
			SequenceNumber json.RawMessage `json:"sequence_number"`
		}
		if err := json.Unmarshal(ev.Data, &s); err != nil || string(s.SequenceNumber) != strconv.Itoa(i) {
			t.Fatalf("event %d (%s) has sequence_number %s: %s", i, like[i].typ, s.SequenceNumber, ev.Data)
		}
	}
	last := assertOneTerminal(t, like)
	if last.typ != "response.failed" {
		t.Fatalf("terminal %s, want response.failed", last.typ)
	}
	v, c := validateTerminal(t, loadSpec(t), last.data)
	if len(v)+len(c) > 0 {
		t.Fatalf("response.failed breaks the spec:\n%v %v\n%s", v, c, last.data)
	}
	var f failedResponse
	if err := json.Unmarshal(last.data, &f); err != nil {
		t.Fatal(err)
	}
	if f.Response.Error.Code != "invalid_prompt" || !strings.HasPrefix(f.Response.Error.Message, wantPrefix) {
		t.Fatalf("error %+v, want invalid_prompt with a message starting %q", f.Response.Error, wantPrefix)
	}
	return f
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

const modeAFailedHeader = `{"template":{"model":"gpt-fake-1","stream":true,"input":"Say: ",` +
	`"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"metadata":{"k":"v"}},"start_policy":"on_first_chunk"}`

// TestModeAFailedAfterDeltasAgreesWithTheStream: a bad Mode A line after
// text went out ends the stream with a response.failed that names the
// response the client was shown (id, model, created_at), is numbered after
// the last event, holds the text streamed so far, and validates against
// OpenAI's spec, its code traveling as invalid_prompt (a client's error).
func TestModeAFailedAfterDeltasAgreesWithTheStream(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].Enqueue(upstreamtest.HangAfter(5)) // created, in_progress, item, part, "Hello"
	url := modeAServer(t, h)
	body, answer := modeAStream(t, url, modeAFailedHeader)
	if _, err := io.WriteString(body, `{"payload":"a"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	r := answer()
	evs := readUntil(t, r, func(ev sse.Event) bool { return eventType(ev) == "response.output_text.delta" })
	if _, err := io.WriteString(body, "not json\n"); err != nil {
		t.Fatal(err)
	}
	evs = append(evs, readUntil(t, r, func(sse.Event) bool { return false })...)

	f := checkModeAFailed(t, evs, "invalid_json: ")
	// Every field response.created showed (id, model, created_at, the
	// echoed request fields) is the same in response.failed, but those that
	// say how it ended.
	var created, failed struct{ Response map[string]json.RawMessage }
	if eventType(evs[0]) != "response.created" {
		t.Fatalf("first event %s", evs[0].Data)
	}
	mustUnmarshal(t, evs[0].Data, &created)
	mustUnmarshal(t, evs[len(evs)-1].Data, &failed)
	for k, v := range created.Response {
		switch k {
		case "status", "error", "incomplete_details", "output", "usage":
			continue
		}
		if string(failed.Response[k]) != string(v) {
			t.Errorf("response.failed says %s: %s, response.created said %s", k, failed.Response[k], v)
		}
	}
	if len(f.Response.Output) != 1 || f.Response.Output[0].Type != "message" || f.Response.Output[0].Status != "incomplete" ||
		len(f.Response.Output[0].Content) != 1 || f.Response.Output[0].Content[0].Text != "Hello" {
		t.Fatalf("output %+v, want the incomplete message %q the client was sent", f.Response.Output, "Hello")
	}
}

// TestModeAFailedBeforeAnyEvent: a bad Mode A line before the client saw
// any event ends the stream with a response.failed numbered 1, opened by
// its response.created (README, "What it promises"), both naming a fresh
// id for every failure, and valid against the spec.
func TestModeAFailedBeforeAnyEvent(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	url := modeAServer(t, h)
	idForm := regexp.MustCompile(`^resp_sluice_[0-9a-f]{24}$`)
	var ids []string
	for n := range 2 {
		h.ups["A"].Enqueue(upstreamtest.HangAfter(0)) // the stream's headers, then nothing
		body, answer := modeAStream(t, url, modeAFailedHeader)
		if _, err := io.WriteString(body, `{"payload":"a"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := h.ups["A"].WaitRequests(ctx, n+1)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(body, "not json\n"); err != nil {
			t.Fatal(err)
		}
		evs := readUntil(t, answer(), func(sse.Event) bool { return false })
		if len(evs) != 2 || eventType(evs[0]) != "response.created" {
			t.Fatalf("events %d, want response.created and response.failed", len(evs))
		}
		f := checkModeAFailed(t, evs, "invalid_json: ")
		if !idForm.MatchString(f.Response.ID) || f.Response.Model != "gpt-fake-1" || len(f.Response.Output) != 0 {
			t.Fatalf("response.failed: id %q model %q output %+v", f.Response.ID, f.Response.Model, f.Response.Output)
		}
		// With no lifecycle event shown, the request's fields are echoed.
		if len(f.Response.Tools) != 1 || f.Response.Tools[0]["name"] != "f" || f.Response.Metadata["k"] != "v" {
			t.Fatalf("the request's tools and metadata are not echoed: %s", evs[1].Data)
		}
		var created struct {
			Response struct {
				ID, Status string
				Error      json.RawMessage
			}
		}
		mustUnmarshal(t, evs[0].Data, &created)
		if created.Response.ID != f.Response.ID || created.Response.Status != "in_progress" || string(created.Response.Error) != "null" {
			t.Fatalf("the failure is not opened by its response.created: %s", evs[0].Data)
		}
		ids = append(ids, f.Response.ID)
	}
	if ids[0] == ids[1] {
		t.Fatalf("two failures share the id %s", ids[0])
	}
}

package streaminput_test

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// modeARequest starts a Mode A request whose body is an io.Pipe, so it is
// genuinely sent with Transfer-Encoding: chunked, line by line.
func (e *env) modeARequest(path string) (*io.PipeWriter, <-chan *http.Response) {
	e.t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, e.url+path, pr)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", clientKey)
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set(streaminput.HeaderStreamingInput, "true")
	out := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			e.t.Errorf("Mode A request: %v", err)
			close(out)
			return
		}
		out <- resp
	}()
	return pw, out
}

func writeLine(t *testing.T, w io.Writer, line string) {
	t.Helper()
	if _, err := io.WriteString(w, line+"\n"); err != nil {
		t.Fatalf("writing %q: %v", line, err)
	}
}

func TestModeAStartsOnFirstChunkWhileBodyStreams(t *testing.T) {
	e := newEnv(t, envConfig{})
	pw, respc := e.modeARequest(streaminput.EndpointResponses)
	writeLine(t, pw, `{"template":`+respTemplate+`,"start_policy":"on_first_chunk"}`)
	writeLine(t, pw, `{"sequence_id":0,"payload":"early "}`)

	// The answer starts streaming while the request body is still open.
	var resp *http.Response
	select {
	case resp = <-respc:
	case <-time.After(10 * time.Second):
		t.Fatal("no response while the body is still being sent")
	}
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	first, err := r.Next()
	if err != nil || eventType(first) != "response.created" {
		t.Fatalf("first event: %v %s", err, first.Data)
	}
	firstAt := time.Now()
	for i := 1; i <= 3; i++ {
		time.Sleep(50 * time.Millisecond)
		writeLine(t, pw, fmt.Sprintf(`{"payload":"late %d "}`, i))
	}
	lastLineAt := time.Now()
	var evs []sse.Event
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		evs = append(evs, ev.Clone())
		if eventType(ev) == "response.completed" {
			break
		}
	}
	pw.Close()
	if !firstAt.Before(lastLineAt) || len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("events %v; first event at %v, last line at %v", eventTypes(evs), firstAt, lastLineAt)
	}
	if resp.Header.Get("X-Streaming-Input-Chunks") != "1" || resp.Header.Get("X-Streaming-Input-Complete") != "false" {
		t.Fatalf("headers: %v", resp.Header)
	}
	req := e.upstreamRequest(0)
	if got := inputOf(t, req.Body); got != "Q: early " {
		t.Fatalf("upstream input %q", got)
	}
	if req.Header.Get("Authorization") != clientKey || req.Header.Get(streaminput.HeaderStreamingInput) != "" {
		t.Fatalf("upstream headers: %v", req.Header)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.modeATE) != 1 || e.modeATE[0] != "chunked" {
		t.Fatalf("the request was not chunked: %q", e.modeATE)
	}
}

func TestModeAEndOnlyWaitsForTheWholeBody(t *testing.T) {
	e := newEnv(t, envConfig{})
	pw, respc := e.modeARequest(streaminput.EndpointChat)
	img := base64.StdEncoding.EncodeToString([]byte("\x89PNG fake"))
	writeLine(t, pw, `{"template":{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"Describe: "}]}}`)
	lines := []string{`{"payload":"this "}`, "", `{"payload":"picture"}`, `{"modality":"image","format":"png","payload":"` + img + `"}`}
	for _, l := range lines {
		time.Sleep(60 * time.Millisecond)
		writeLine(t, pw, l)
	}
	lastAt := time.Now()
	pw.Close()
	resp := <-respc
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	_, evs, _ := readAnswer(t, resp)
	if len(evs) == 0 || !evs[len(evs)-1].Done {
		t.Fatalf("chat stream does not end with [DONE]: %d events", len(evs))
	}
	req := e.upstreamRequest(0)
	if req.ReceivedAt.Before(lastAt) {
		t.Fatal("on_end_only started before the body ended")
	}
	want := `"content":[{"type":"text","text":"Describe: this picture"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + img + `"}}]`
	if !strings.Contains(string(req.Body), want) {
		t.Fatalf("upstream body %s\nwant it to contain %s", req.Body, want)
	}
}

func TestModeAErrors(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxSessionBytes: 50}})
	post := func(body string) (int, apiError) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.url+streaminput.EndpointResponses, strings.NewReader(body))
		req.Header.Set(streaminput.HeaderStreamingInput, "true")
		req.Header.Set("Authorization", clientKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, decodeError(t, b)
	}
	hdr := `{"template":` + respTemplate + `}` + "\n"
	for name, c := range map[string]struct {
		body  string
		code  int
		error string
	}{
		"no header":        {`{"sequence_id":0,"payload":"x"}` + "\n", 400, "missing_required_parameter"},
		"empty body":       {"", 400, "missing_required_parameter"},
		"bad line":         {hdr + "{nope\n", 400, "invalid_json"},
		"bad chunk":        {hdr + `{"modality":"smell","payload":"x"}` + "\n", 400, "invalid_value"},
		"conflict":         {hdr + `{"sequence_id":0,"payload":"x"}` + "\n" + `{"sequence_id":0,"payload":"y"}` + "\n", 409, streaminput.CodeSequenceConflict},
		"gap at the end":   {hdr + `{"sequence_id":1,"payload":"x"}` + "\n", 409, streaminput.CodeSequenceGap},
		"over the cap":     {hdr + `{"payload":"` + strings.Repeat("x", 60) + `"}` + "\n", 413, "payload_too_large"},
		"bad policy":       {`{"template":` + respTemplate + `,"start_policy":"soon"}` + "\n", 400, "invalid_value"},
		"invalid template": {`{"template":{"stream":true}}` + "\n", 400, "missing_required_parameter"},
	} {
		code, ae := post(c.body)
		if code != c.code || ae.code() != c.error {
			t.Errorf("%s: %d %+v, want %d %s", name, code, ae, c.code, c.error)
		}
	}
	if e.up.RequestCount() != 0 {
		t.Fatalf("a rejected Mode A request reached the upstream")
	}
	// Without the header, the request is an ordinary one.
	code, b := e.do(http.MethodPost, streaminput.EndpointResponses, `{"model":"gpt-fake-1","input":"plain"}`)
	if code != http.StatusOK || !strings.Contains(string(b), `"output"`) {
		t.Fatalf("ordinary request: %d %s", code, b)
	}
}

// TestModeABadLineAfterStart: once the answer streams, a bad line ends it
// with a terminal event carrying the error.
func TestModeABadLineAfterStart(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.up.Enqueue(upstreamtest.HangAfter(2))
	pw, respc := e.modeARequest(streaminput.EndpointResponses)
	writeLine(t, pw, `{"template":`+respTemplate+`,"start_policy":"on_first_chunk"}`)
	writeLine(t, pw, `{"payload":"go"}`)
	resp := <-respc
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	for i := 0; i < 2; i++ {
		if _, err := r.Next(); err != nil {
			t.Fatal(err)
		}
	}
	writeLine(t, pw, `{"sequence_id":0,"payload":"changed"}`)
	ev, err := r.Next()
	if err != nil || eventType(ev) != "response.failed" || failureCode(ev) != streaminput.CodeSequenceConflict {
		t.Fatalf("after a conflicting line: %v %s", err, ev.Data)
	}
	pw.Close()
	eventually(t, 5*time.Second, "the upstream request is cancelled", func() bool { return e.upIn.Load() == 0 })
}

// TestModeAIdleBody: a body that stops sending before the answer starts is
// cut after the idle timeout and answered with an error.
func TestModeAIdleBody(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{IdleTimeout: 300 * time.Millisecond}})
	pw, respc := e.modeARequest(streaminput.EndpointResponses)
	defer pw.Close()
	writeLine(t, pw, `{"template":`+respTemplate+`}`)
	writeLine(t, pw, `{"payload":"and then nothing"}`)
	start := time.Now()
	var resp *http.Response
	select {
	case resp = <-respc:
	case <-time.After(10 * time.Second):
		t.Fatal("a stalled body was never cut")
	}
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ae := decodeError(t, b); resp.StatusCode != http.StatusRequestTimeout || ae.code() != streaminput.CodeSessionExpired || time.Since(start) < 250*time.Millisecond {
		t.Fatalf("stalled body: %d %s after %v", resp.StatusCode, b, time.Since(start))
	}
	if e.up.RequestCount() != 0 {
		t.Fatal("a stalled Mode A request reached the upstream")
	}
	// The connection pool is still healthy for the next request.
	if code, _ := e.do(http.MethodPost, streaminput.EndpointResponses, `{"model":"gpt-fake-1","input":"x"}`); code != http.StatusOK {
		t.Fatalf("next request: %d", code)
	}
}

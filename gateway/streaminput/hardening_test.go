package streaminput_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/klauspost/compress/zstd"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// Tests for hostile clients: nesting depth, slow bodies, global caps, line
// and body caps, Content-Encoding, duplicate keys and what reaches the disk.

// deep is n '[' : far deeper than any limit. Six million of them overflowed
// the goroutine stack of a recursive JSON walker (a fatal error, not a
// panic: the whole test binary dies).
func deep(n int) string { return strings.Repeat("[", n) }

const hostileDepth = 6_000_000

// postRaw posts body with the client key and extra headers, and returns the
// status, headers and body of the answer.
func (e *env) postRaw(path string, body io.Reader, hdr map[string]string) (int, http.Header, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", clientKey)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func modeAHeaders(extra ...string) map[string]string {
	h := map[string]string{streaminput.HeaderStreamingInput: "true", "Content-Type": "application/x-ndjson"}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

func wantError(t *testing.T, what string, code int, b []byte, wantStatus int, wantCode string) apiError {
	t.Helper()
	ae := decodeError(t, b)
	if code != wantStatus || ae.code() != wantCode {
		t.Fatalf("%s: %d %.300s, want %d %s", what, code, b, wantStatus, wantCode)
	}
	return ae
}

// stillServes proves the process survived and serves: a plain request and
// a session create both work.
func (e *env) stillServes() {
	e.t.Helper()
	if code, b := e.do(http.MethodPost, streaminput.EndpointResponses, `{"model":"gpt-fake-1","input":"x"}`); code != http.StatusOK {
		e.t.Fatalf("the next request: %d %s", code, b)
	}
	e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
}

func TestDeepNestingCreate(t *testing.T) {
	e := newEnv(t, envConfig{})
	for name, body := range map[string]string{
		"whole body":  deep(hostileDepth),
		"in template": `{"template":{"model":"gpt-fake-1","tools":` + deep(hostileDepth) + `}}`,
		"in chunk":    `{"template":` + respTemplate + `,"chunk":{"payload":"x","meta":` + deep(hostileDepth) + `}}`,
		"just over":   `{"template":{"model":"gpt-fake-1","metadata":` + deep(129) + strings.Repeat("]", 129) + `}}`,
	} {
		code, b := e.do(http.MethodPost, streaminput.PathPrefix, body)
		ae := wantError(t, "create, "+name, code, b, http.StatusBadRequest, streaminput.CodeNestingTooDeep)
		if ae.Error.Type != "invalid_request_error" || !strings.Contains(ae.Error.Message, "128") {
			t.Fatalf("create, %s: %s", name, b)
		}
	}
	// At the limit is fine.
	e.create(`{"template":{"model":"gpt-fake-1","metadata":` + deep(126) + strings.Repeat("]", 126) + `}}`)
	e.stillServes()
}

func TestDeepNestingChunk(t *testing.T) {
	e := newEnv(t, envConfig{})
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	for _, body := range []string{deep(hostileDepth), `{"sequence_id":0,"payload":"x","extra":` + deep(hostileDepth) + `}`} {
		code, _, ae := e.chunk(id, body)
		if code != http.StatusBadRequest || ae.code() != streaminput.CodeNestingTooDeep {
			t.Fatalf("deep chunk: %d %+v", code, ae)
		}
	}
	// The session is intact and takes the next chunk.
	if a := e.mustChunk(id, textChunk(0, "fine", false)); a.NextSequenceID != 1 {
		t.Fatalf("ack %+v", a)
	}
	// finish bodies (at most 64 KiB) are checked too.
	code, b := e.do(http.MethodPost, streaminput.PathPrefix+"/"+id+"/finish", deep(60000))
	wantError(t, "deep finish body", code, b, http.StatusBadRequest, streaminput.CodeNestingTooDeep)
	e.stillServes()
}

func TestDeepNestingModeA(t *testing.T) {
	e := newEnv(t, envConfig{})
	hdr := `{"template":` + respTemplate + `}` + "\n"
	for name, body := range map[string]string{
		"header line":             deep(hostileDepth) + "\n",
		"template in header line": `{"template":{"model":"gpt-fake-1","tools":` + deep(hostileDepth) + "}}\n",
		"chunk line":              hdr + `{"payload":"x","extra":` + deep(hostileDepth) + "}\n",
		"last chunk line":         hdr + `{"payload":"x"}` + "\n" + deep(hostileDepth),
	} {
		code, _, b := e.postRaw(streaminput.EndpointResponses, strings.NewReader(body), modeAHeaders())
		wantError(t, "Mode A, "+name, code, b, http.StatusBadRequest, streaminput.CodeNestingTooDeep)
	}
	if e.up.RequestCount() != 0 {
		t.Fatal("a refused Mode A request reached the upstream")
	}
	e.stillServes()
}

// TestDeepNestingWebSocket sends an input_chunk frame nested six million
// levels deep on the gateway's Responses WebSocket: an error frame, and the
// socket goes on working.
func TestDeepNestingWebSocket(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hdr := http.Header{}
	hdr.Set("Authorization", clientKey)
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.url, "http")+"/v1/responses", &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 20)
	send := func(frame string) {
		t.Helper()
		if err := c.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string {
		t.Helper()
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, frame := range []string{
		`{"type":"input_chunk","payload":"x","extra":` + deep(hostileDepth) + `}`,
		`{"type":"input_chunk","payload":"x","extra":` + deep(200) + strings.Repeat("]", 200) + `}`,
	} {
		send(frame)
		got := read()
		if !strings.Contains(got, `"type":"error"`) || !strings.Contains(got, `"status":400`) ||
			!(strings.Contains(got, streaminput.CodeNestingTooDeep) || strings.Contains(got, "invalid_json")) {
			t.Fatalf("deep input_chunk frame: %.300s", got)
		}
	}
	// The socket still works: a chunk and a response.create merge as usual.
	send(`{"type":"input_chunk","payload":"still here"}`)
	send(`{"type":"response.create","model":"gpt-fake-1","input":"Q: "}`)
	for {
		got := read()
		if strings.Contains(got, `"type":"error"`) || strings.Contains(got, "response.failed") {
			t.Fatalf("after the deep frame: %.300s", got)
		}
		if strings.Contains(got, "response.completed") {
			break
		}
	}
	if got := inputOf(t, e.upstreamRequest(0).Body); got != "Q: still here" {
		t.Fatalf("upstream input %q", got)
	}
}

// TestAccumulatorRefusesDeepAndDuplicate: the Accumulator checks the
// frames itself, whatever its caller did before.
func TestAccumulatorRefusesDeepAndDuplicate(t *testing.T) {
	a := streaminput.NewAccumulator(streaminput.AccumulatorOptions{MaxJSONDepth: 16})
	for _, f := range []string{
		deep(hostileDepth),
		`{"type":"input_chunk","payload":"x","extra":` + deep(hostileDepth) + `}`,
		`{"type":"input_chunk","payload":"x","extra":` + deep(17) + strings.Repeat("]", 17) + `}`,
	} {
		// IsInputChunk runs before any check, on anything a socket sends.
		if got := streaminput.IsInputChunk([]byte(f)); got != strings.HasPrefix(f, "{") {
			t.Fatalf("IsInputChunk(%.60s) = %v", f, got)
		}
		wantAPIErr(t, a.Add([]byte(f)), http.StatusBadRequest, streaminput.CodeNestingTooDeep)
	}
	wantAPIErr(t, a.Add([]byte(`{"type":"input_chunk","payload":"a","payload":"b"}`)), http.StatusBadRequest, streaminput.CodeDuplicateKey)
	if err := a.Add([]byte(`{"type":"input_chunk","payload":"ok"}`)); err != nil {
		t.Fatal(err)
	}
	_, err := a.Apply([]byte(`{"type":"response.create","model":"m","x":` + deep(hostileDepth) + `}`))
	wantAPIErr(t, err, http.StatusBadRequest, streaminput.CodeNestingTooDeep)
	if a.Len() != 0 {
		t.Fatalf("a refused response.create kept %d chunks for the next one", a.Len())
	}
}

func TestModeAHeaderTimeout(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{ReadTimeout: 300 * time.Millisecond}})
	for name, first := range map[string]string{"nothing": "", "half a header line": `{"template":{"model":`} {
		pw, respc := e.modeARequest(streaminput.EndpointResponses)
		if first != "" {
			if _, err := io.WriteString(pw, first); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		var resp *http.Response
		select {
		case resp = <-respc:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer to a Mode A request that never sends its header line", name)
		}
		if resp == nil {
			t.FailNow()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		pw.Close()
		wantError(t, name, resp.StatusCode, b, http.StatusRequestTimeout, streaminput.CodeRequestTimeout)
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Fatalf("%s: answered after %v, before the timeout", name, d)
		}
	}
	// A header line that arrives in time is not affected by the timeout,
	// even when the rest of the body takes longer.
	pw, respc := e.modeARequest(streaminput.EndpointResponses)
	writeLine(t, pw, `{"template":`+respTemplate+`}`)
	time.Sleep(500 * time.Millisecond)
	writeLine(t, pw, `{"payload":"slow but fine"}`)
	pw.Close()
	resp := <-respc
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	if _, evs, _ := readAnswer(t, resp); resp.StatusCode != http.StatusOK || len(evs) == 0 || eventType(evs[len(evs)-1]) != "response.completed" {
		t.Fatalf("a slow body after a timely header: %d %v", resp.StatusCode, eventTypes(evs))
	}
	e.stillServes()
}

func TestStalledRESTBody(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{ReadTimeout: 300 * time.Millisecond}})
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	for _, path := range []string{streaminput.PathPrefix + "/" + id + "/chunks", streaminput.PathPrefix} {
		pr, pw := io.Pipe()
		go func() { _, _ = io.WriteString(pw, `{"sequence_id":0,"payl`) }() // then nothing
		start := time.Now()
		done := make(chan struct{})
		var code int
		var b []byte
		go func() {
			defer close(done)
			code, _, b = e.postRaw(path, pr, nil)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: a stalled body was never cut", path)
		}
		pw.Close()
		wantError(t, path, code, b, http.StatusRequestTimeout, streaminput.CodeRequestTimeout)
		if d := time.Since(start); d < 250*time.Millisecond {
			t.Fatalf("%s: answered after %v, before the timeout", path, d)
		}
	}
	// The session is unharmed.
	if a := e.mustChunk(id, textChunk(0, "late but whole", false)); a.NextSequenceID != 1 {
		t.Fatalf("ack %+v", a)
	}
	e.stillServes()
}

func TestGlobalSessionCap(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxSessions: 3}})
	body := sessionBody(streaminput.EndpointResponses, "", respTemplate)
	var ids []string
	for i := 0; i < 3; i++ {
		code, b := e.doKey("Bearer sk-rotating-"+string(rune('a'+i)), http.MethodPost, streaminput.PathPrefix, body)
		if code != http.StatusOK {
			t.Fatalf("session %d: %d %s", i, code, b)
		}
		var st streaminput.SessionStatus
		mustJSON(t, b, &st)
		ids = append(ids, st.SessionID)
	}
	// A fresh key does not help: the cap is for all clients together.
	code, hdr, b := func() (int, http.Header, []byte) {
		req, _ := http.NewRequest(http.MethodPost, e.url+streaminput.PathPrefix, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-rotating-z")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}()
	ae := wantError(t, "a session over the global cap", code, b, http.StatusServiceUnavailable, streaminput.CodeServerOverloaded)
	if hdr.Get("Retry-After") == "" || ae.Error.Type != "server_error" {
		t.Fatalf("over the cap: headers %v, %s", hdr, b)
	}
	// Mode A sessions count too.
	code, hdr, b = e.postRaw(streaminput.EndpointResponses, strings.NewReader(`{"template":`+respTemplate+"}\n"), modeAHeaders("Authorization", "Bearer sk-rotating-y"))
	wantError(t, "Mode A over the global cap", code, b, http.StatusServiceUnavailable, streaminput.CodeServerOverloaded)
	if hdr.Get("Retry-After") == "" {
		t.Fatalf("Mode A over the cap: no Retry-After: %v", hdr)
	}
	// A closed session gives its place back.
	if code, b := e.doKey("Bearer sk-rotating-a", http.MethodDelete, streaminput.PathPrefix+"/"+ids[0], ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, b := e.doKey("Bearer sk-rotating-z", http.MethodPost, streaminput.PathPrefix, body); code != http.StatusOK {
		t.Fatalf("after a delete: %d %s", code, b)
	}
	if code, b := e.doKey("Bearer sk-rotating-x", http.MethodPost, streaminput.PathPrefix, body); code != http.StatusServiceUnavailable {
		t.Fatalf("cap after reuse: %d %s", code, b)
	}
}

func TestGlobalByteCap(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxTotalBytes: 2000}})
	body := sessionBody(streaminput.EndpointResponses, "", respTemplate)
	a := e.create(body)
	code, b := e.doKey("Bearer sk-other", http.MethodPost, streaminput.PathPrefix, body)
	if code != http.StatusOK {
		t.Fatalf("second session: %d %s", code, b)
	}
	var st streaminput.SessionStatus
	mustJSON(t, b, &st)
	other := st.SessionID
	e.mustChunk(a, textChunk(0, strings.Repeat("a", 1000), false))

	postOther := func(path, body string) (int, http.Header, []byte) {
		req, _ := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-other")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	// Another client's chunk would cross the global budget: refused, with
	// Retry-After, and its session stays open.
	code, hdr, b := postOther(streaminput.PathPrefix+"/"+other+"/chunks", textChunk(0, strings.Repeat("b", 1000), false))
	wantError(t, "a chunk over the global byte cap", code, b, http.StatusServiceUnavailable, streaminput.CodeServerOverloaded)
	if hdr.Get("Retry-After") == "" {
		t.Fatalf("no Retry-After: %v", hdr)
	}
	// So would a template that does not fit.
	big := `{"template":{"model":"gpt-fake-1","instructions":"` + strings.Repeat("i", 1500) + `"}}`
	code, _, b = postOther(streaminput.PathPrefix, big)
	wantError(t, "a template over the global byte cap", code, b, http.StatusServiceUnavailable, streaminput.CodeServerOverloaded)
	// Once the first session is gone, the bytes are free again.
	if code, b := e.do(http.MethodDelete, streaminput.PathPrefix+"/"+a, ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, _, b := postOther(streaminput.PathPrefix+"/"+other+"/chunks", textChunk(0, strings.Repeat("b", 1000), false)); code != http.StatusAccepted {
		t.Fatalf("after the delete: %d %s", code, b)
	}
}

func TestModeALongLine(t *testing.T) {
	// Lines may be 64 KiB plus the template (header line) or plus the
	// session's base64 payload (chunk lines).
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxTemplateBytes: 1024, MaxSessionBytes: 300}})
	hdr := `{"template":` + respTemplate + `}` + "\n"
	for name, body := range map[string]string{
		"header line": `{"template":{"model":"gpt-fake-1","instructions":"` + strings.Repeat("i", 70<<10) + `"}}` + "\n",
		"chunk line":  hdr + `{"payload":"x","pad":"` + strings.Repeat("p", 70<<10) + `"}` + "\n",
	} {
		code, _, b := e.postRaw(streaminput.EndpointResponses, strings.NewReader(body), modeAHeaders())
		wantError(t, name, code, b, http.StatusRequestEntityTooLarge, "payload_too_large")
	}
	e.stillServes()
}

func TestModeAContentEncoding(t *testing.T) {
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxTemplateBytes: 1024, MaxSessionBytes: 300}})
	ndjson := `{"template":{"model":"gpt-fake-1","stream":false,"input":"Q: "}}` + "\n" + `{"payload":"compressed "}` + "\n" + `{"payload":"input"}` + "\n"
	gz := func(s string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write([]byte(s))
		_ = zw.Close()
		return b.Bytes()
	}
	zenc, _ := zstd.NewWriter(nil)
	zs := zenc.EncodeAll([]byte(ndjson), nil)
	for i, c := range []struct {
		enc  string
		body []byte
	}{{"gzip", gz(ndjson)}, {"zstd", zs}} {
		code, _, b := e.postRaw(streaminput.EndpointResponses, bytes.NewReader(c.body), modeAHeaders("Content-Encoding", c.enc))
		if code != http.StatusOK || !strings.Contains(string(b), `"output"`) {
			t.Fatalf("%s body: %d %s", c.enc, code, b)
		}
		req := e.upstreamRequest(i)
		if got := inputOf(t, req.Body); got != "Q: compressed input" {
			t.Fatalf("%s body: upstream input %q", c.enc, got)
		}
		if req.Header.Get("Content-Encoding") != "" {
			t.Fatalf("%s body: the decoded request went upstream with Content-Encoding %q", c.enc, req.Header.Get("Content-Encoding"))
		}
	}
	// An encoding Sluice does not decode: 415.
	code, _, b := e.postRaw(streaminput.EndpointResponses, strings.NewReader(ndjson), modeAHeaders("Content-Encoding", "br"))
	wantError(t, "br body", code, b, http.StatusUnsupportedMediaType, streaminput.CodeUnsupportedEncoding)
	// gzip and br on two Content-Encoding lines are one list (RFC 9110
	// §5.3), as "gzip, br" on one line: 415, not a body read as gzip alone.
	req, err := http.NewRequest(http.MethodPost, e.url+streaminput.EndpointResponses, bytes.NewReader(gz(ndjson)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range modeAHeaders() {
		req.Header.Set(k, v)
	}
	req.Header.Set("Authorization", clientKey)
	req.Header.Add("Content-Encoding", "gzip")
	req.Header.Add("Content-Encoding", "br")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	wantError(t, "gzip and br on two lines", resp.StatusCode, b, http.StatusUnsupportedMediaType, streaminput.CodeUnsupportedEncoding)
	// A corrupt gzip body: 400.
	code, _, b = e.postRaw(streaminput.EndpointResponses, strings.NewReader(ndjson), modeAHeaders("Content-Encoding", "gzip"))
	wantError(t, "corrupt gzip body", code, b, http.StatusBadRequest, "invalid_body")
	// A small body that decodes into an endless stream of blank lines: the
	// decoded size is capped.
	bomb := gz(`{"template":` + respTemplate + `}` + "\n" + strings.Repeat("\n", 8<<20))
	code, _, b = e.postRaw(streaminput.EndpointResponses, bytes.NewReader(bomb), modeAHeaders("Content-Encoding", "gzip"))
	wantError(t, "gzip bomb", code, b, http.StatusRequestEntityTooLarge, "payload_too_large")
	if n := e.up.RequestCount(); n != 2 {
		t.Fatalf("%d upstream requests, want the 2 good ones", n)
	}
	e.stillServes()
}

func TestDuplicateKeys(t *testing.T) {
	e := newEnv(t, envConfig{})
	for body, param := range map[string]string{
		`{"template":` + respTemplate + `,"template":` + respTemplate + `}`:                           "template",
		`{"template":{"model":"gpt-fake-1","input":"a","model":"other"}}`:                             "template.model",
		`{"template":` + respTemplate + `,"chunk":{"payload":"a","payload":"b"}}`:                     "chunk.payload",
		`{"start_policy":"on_end_only","template":` + respTemplate + `,"start_policy":"on_end_only"}`: "start_policy",
	} {
		code, b := e.do(http.MethodPost, streaminput.PathPrefix, body)
		if ae := wantError(t, "create "+body, code, b, http.StatusBadRequest, streaminput.CodeDuplicateKey); ae.param() != param {
			t.Fatalf("create %s: param %q, want %q", body, ae.param(), param)
		}
	}
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	code, _, ae := e.chunk(id, `{"sequence_id":0,"payload":"a","sequence_id":1}`)
	if code != http.StatusBadRequest || ae.code() != streaminput.CodeDuplicateKey || ae.param() != "sequence_id" {
		t.Fatalf("duplicate chunk key: %d %+v", code, ae)
	}
	// Mode A: header line, template and chunk lines.
	hdr := `{"template":` + respTemplate + `}` + "\n"
	for name, body := range map[string]string{
		"header line": `{"template":` + respTemplate + `,"template":` + respTemplate + "}\n",
		"template":    `{"template":{"model":"gpt-fake-1","stream":true,"stream":false}}` + "\n",
		"chunk line":  hdr + `{"payload":"a","payload":"b"}` + "\n",
	} {
		code, _, b := e.postRaw(streaminput.EndpointResponses, strings.NewReader(body), modeAHeaders())
		wantError(t, "Mode A "+name, code, b, http.StatusBadRequest, streaminput.CodeDuplicateKey)
	}
	// Keys that only look alike are different keys; an escaped spelling of
	// the same key is the same key.
	e.create(`{"template":{"model":"gpt-fake-1","Model":"x","input":"a"}}`)
	code, b := e.do(http.MethodPost, streaminput.PathPrefix, `{"template":{"model":"gpt-fake-1","\u006dodel":"x"}}`)
	wantError(t, "escaped duplicate", code, b, http.StatusBadRequest, streaminput.CodeDuplicateKey)
	if e.up.RequestCount() != 0 {
		t.Fatal("a refused request reached the upstream")
	}
}

// TestNoCredentialsOnDisk: a session's persisted record (and every file of
// the store) holds none of the client's credential-like headers, nor a
// header its Connection header names; the dispatched request still carries
// the credentials (from memory) and not the connection-scoped header.
func TestNoCredentialsOnDisk(t *testing.T) {
	e := newEnv(t, envConfig{})
	secrets := map[string]string{
		"X-Api-Key":           "xapikey-SECRET-1",
		"Api-Key":             "apikey-SECRET-2",
		"Openai-Organization": "org-SECRET-3",
		"Openai-Project":      "proj-SECRET-4",
		"Cookie":              "session=cookie-SECRET-5",
		"X-Auth-Token":        "authtoken-SECRET-6",
		"Proxy-Authorization": "Basic proxy-SECRET-7",
		"X-Hop-Scoped":        "hop-SECRET-8",
		"X-Access":            "Bearer access-SECRET-9", // a credential by its value (hostabi.CredentialValue)
	}
	req, _ := http.NewRequest(http.MethodPost, e.url+streaminput.PathPrefix,
		strings.NewReader(`{"start_policy":"on_first_chunk","template":`+respTemplate+`,"chunk":{"payload":"hello"}}`))
	req.Header.Set("Authorization", clientKey)
	for k, v := range secrets {
		req.Header.Set(k, v)
	}
	req.Header.Set("Connection", "X-Hop-Scoped")
	req.Header.Set("X-Plain", "plain-value")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var st streaminput.SessionStatus
	mustJSON(t, b, &st)

	rec, err := e.st.GetInputSession(context.Background(), st.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rec.Template), "plain-value") {
		t.Fatalf("the ordinary header was not kept with the session: %s", rec.Template)
	}
	check := func(where string, data []byte) {
		t.Helper()
		for _, v := range []string{"sk-client-one", "SECRET"} {
			if i := bytes.Index(data, []byte(v)); i >= 0 {
				t.Fatalf("%s holds a credential-like value: %q", where, data[max(0, i-40):min(len(data), i+40)])
			}
		}
	}
	check("the session record", rec.Template)

	// The dispatched request has the credentials, not the hop-scoped header.
	up := e.upstreamRequest(0)
	if up.Header.Get("X-Api-Key") != secrets["X-Api-Key"] || up.Header.Get("Openai-Organization") != secrets["Openai-Organization"] {
		t.Fatalf("the credentials did not reach the upstream: %v", up.Header)
	}
	if up.Header.Get("X-Hop-Scoped") != "" {
		t.Fatalf("a header named in Connection was dispatched: %v", up.Header)
	}
	// Nothing anywhere in the store's files (WAL included).
	e.stop()
	err = filepath.WalkDir(e.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		check(path, data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestModeAStalledBodyAfterAnswer: a chunked request that sends one chunk
// and then neither sends nor ends gets its whole answer, and its request
// ends one idle timeout later (it does not stay open).
func TestModeAStalledBodyAfterAnswer(t *testing.T) {
	const idle = 400 * time.Millisecond
	e := newEnv(t, envConfig{opts: streaminput.Options{IdleTimeout: idle}})
	pw, respc := e.modeARequest(streaminput.EndpointResponses)
	defer pw.Close()
	writeLine(t, pw, `{"template":`+respTemplate+`,"start_policy":"on_first_chunk"}`)
	writeLine(t, pw, `{"payload":"one chunk, then silence"}`)
	resp := <-respc
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	start := time.Now()
	done := make(chan []string, 1)
	go func() {
		_, evs, _ := readAnswer(t, resp) // to the end of the response body
		done <- eventTypes(evs)
	}()
	select {
	case types := <-done:
		if len(types) == 0 || types[len(types)-1] != "response.completed" {
			t.Fatalf("answer: %v", types)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request never ended while its body stalled")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the request ended after %v", d)
	}
	if resp.Header.Get("Connection") != "close" && !resp.Close {
		t.Fatalf("an answer that began before the body ended keeps the connection: %v", resp.Header)
	}
	e.stillServes()
}

package gateway_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// Fuzz-input mode bits for FuzzServeHTTP.
const (
	fuzzChat      = 1 << 0 // POST /v1/chat/completions (else /v1/responses)
	fuzzEncShift  = 1      // bits 1-2: Content-Encoding
	fuzzCompress  = 1 << 3 // compress the body with that encoding (else send it raw, labelled)
	fuzzNoLength  = 1 << 4 // no Content-Length (as a chunked body arrives)
	fuzzChatProto = 1 << 5 // the upstream speaks Chat Completions only (requests are converted)
)

var fuzzEncodings = [4]string{"", "gzip", "zstd", "br"} // "br" is not supported: 415

// FuzzServeHTTP drives the whole HTTP entry, Server.Handler().ServeHTTP,
// with arbitrary bodies on both POST endpoints, in any Content-Encoding
// (compressed for real or not), in front of a fake upstream speaking the
// Responses API or Chat Completions only. For every input the handler must
// return, answer 200 or a 4xx/5xx, never hit the panic handler, send an
// OpenAI-shaped error body with every non-2xx, and end every 200 stream with
// its terminal event. Seeds (deep nesting, repeated and very many keys, bad
// gzip and zstd, invalid UTF-8, normal requests) are in
// testdata/fuzz/FuzzServeHTTP and run with `go test`.
func FuzzServeHTTP(f *testing.F) {
	opts := gateway.Options{
		MaxBodyBytes:   8 << 20, // above the 6 MB crash body, so it reaches the depth check; keeps iterations cheap
		HeaderTimeout:  10 * time.Second,
		IdleTimeout:    10 * time.Second,
		ConnectTimeout: 2 * time.Second,
	}
	responses := newHarness(f, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A", DisableRecording: true}}, opts: opts})
	chatOnly := newHarness(f, harnessConfig{upstreams: []upstreamtest.Options{{Name: "C", DisableRecording: true}},
		protocol: map[string]string{"C": "chat"}, opts: opts})

	f.Add(uint8(0), []byte(`{"model":"gpt-fake-1","input":"hi"}`))
	f.Add(uint8(fuzzChat|fuzzChatProto), []byte(`{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`))

	f.Fuzz(func(t *testing.T, mode uint8, body []byte) {
		h := responses
		if mode&fuzzChatProto != 0 {
			h = chatOnly
		}
		path := "/v1/responses"
		if mode&fuzzChat != 0 {
			path = "/v1/chat/completions"
		}
		enc := fuzzEncodings[(mode>>fuzzEncShift)&3]
		wire := body
		if mode&fuzzCompress != 0 {
			wire = fuzzCompressBody(t, enc, body)
		}
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(wire))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-client-secret")
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		if mode&fuzzNoLength != 0 {
			req.ContentLength = -1
		}
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.gw.Handler().ServeHTTP(rec, req)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("the handler did not return within 30s (mode %#x, %d-byte body)", mode, len(body))
		}
		logs := h.logs.String()
		h.logs.mu.Lock()
		h.logs.buf.Reset() // the harness logs at debug level; keep long runs flat
		h.logs.mu.Unlock()
		if strings.Contains(logs, "handler panic") {
			t.Fatalf("the handler panicked (mode %#x): %s", mode, logs)
		}
		checkServeAnswer(t, mode, path, rec)
	})
}

// fuzzCompressBody encodes body as enc says (anything else: unchanged).
func fuzzCompressBody(t *testing.T, enc string, body []byte) []byte {
	var buf bytes.Buffer
	switch enc {
	case "gzip":
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body)
		_ = zw.Close()
	case "zstd":
		zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = zw.Write(body)
		_ = zw.Close()
	default:
		return body
	}
	return buf.Bytes()
}

// checkServeAnswer holds an answer to the gateway's promises.
func checkServeAnswer(t *testing.T, mode uint8, path string, rec *httptest.ResponseRecorder) {
	t.Helper()
	status, body := rec.Code, rec.Body.Bytes()
	ctype := rec.Header().Get("Content-Type")
	where := fmt.Sprintf("mode %#x %s: %d %s", mode, path, status, ctype)
	if status != http.StatusOK && (status < 400 || status > 599) {
		t.Fatalf("%s: status outside {200, 4xx, 5xx}: %.300q", where, body)
	}
	if status != http.StatusOK {
		var env struct {
			Error map[string]json.RawMessage `json:"error"`
		}
		_ = json.Unmarshal(body, &env)
		var msg, typ string
		_ = json.Unmarshal(env.Error["message"], &msg)
		_ = json.Unmarshal(env.Error["type"], &typ)
		code, hasCode := env.Error["code"]
		param, hasParam := env.Error["param"]
		if msg == "" || typ == "" || !hasCode || !hasParam || !stringOrNull(code) || !stringOrNull(param) {
			t.Fatalf("%s: not an OpenAI error body {\"error\":{message,type,code,param}}: %.500q", where, body)
		}
		if status == http.StatusInternalServerError && bytes.Contains(body, []byte(`"internal_error"`)) {
			t.Fatalf("%s: the panic handler answered: %s", where, body)
		}
		if status == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "" &&
			bytes.Contains(body, []byte(`"server_overloaded"`)) {
			t.Fatalf("%s: server_overloaded without Retry-After", where)
		}
		return
	}
	if !strings.HasPrefix(ctype, "text/event-stream") {
		if !json.Valid(body) {
			t.Fatalf("%s: a 200 JSON answer that is not JSON: %.300q", where, body)
		}
		return
	}
	// A 200 stream ends with exactly one terminal event ([DONE] on Chat).
	r := sse.NewReader(bytes.NewReader(body), 64<<20)
	var names []string
	terminals := 0
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		typ := eventType(ev)
		if string(ev.Data) == "[DONE]" {
			typ = "[DONE]"
		}
		names = append(names, typ)
		if isTerminal(typ) {
			terminals++
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: an empty 200 stream", where)
	}
	last := names[len(names)-1]
	if strings.HasSuffix(path, "/chat/completions") {
		if last != "[DONE]" {
			t.Fatalf("%s: the Chat stream does not end with [DONE]: %v", where, names)
		}
		return
	}
	if terminals != 1 || !isTerminal(last) {
		t.Fatalf("%s: the stream does not end with exactly one terminal event: %v", where, names)
	}
}

// stringOrNull reports whether v is a JSON string or null.
func stringOrNull(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return string(v) == "null" || (len(v) >= 2 && v[0] == '"')
}

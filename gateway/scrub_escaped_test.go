package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
)

// unicodeEscaped writes every character of s as a \uXXXX JSON escape, as an
// upstream hiding the key it quotes from a byte-level match would.
func unicodeEscaped(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}

// escapedKeyBody is an upstream 400 error body whose message quotes the
// operator's key \u-escaped, half of it and whole.
func escapedKeyBody() []byte {
	half := len(operatorKey) / 2
	msg := "upstream saw " + unicodeEscaped(operatorKey) + " half " + operatorKey[:half] + unicodeEscaped(operatorKey[half:])
	return []byte(`{"error":{"message":"` + msg + `","type":"invalid_request_error","code":"invalid_value","param":null}}`)
}

// decodedJSON is what a client's JSON parser reads from raw: each line (an
// SSE data line without its "data: ") that is JSON, decoded and written
// back without escapes; any other line as it is.
func decodedJSON(raw []byte) string {
	var out strings.Builder
	for _, line := range bytes.Split(raw, []byte("\n")) {
		line = bytes.TrimPrefix(line, []byte("data: "))
		var v any
		if json.Unmarshal(line, &v) != nil {
			out.Write(line)
			out.WriteByte('\n')
			continue
		}
		enc := json.NewEncoder(&out)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
	}
	return out.String()
}

// recoverInputs is the built-in policy that remembers every recover input
// it is asked.
type recoverInputs struct {
	gateway.BuiltinPolicy
	mu  sync.Mutex
	ins []hostabi.RecoverInput
}

func (p *recoverInputs) Recover(ctx context.Context, in hostabi.RecoverInput) hostabi.RecoverOutput {
	p.mu.Lock()
	p.ins = append(p.ins, in)
	p.mu.Unlock()
	return p.BuiltinPolicy.Recover(ctx, in)
}

func (p *recoverInputs) take() []hostabi.RecoverInput {
	p.mu.Lock()
	defer p.mu.Unlock()
	ins := p.ins
	p.ins = nil
	return ins
}

// escapedKeyScripts are upstream answers that quote the operator's key
// \u-escaped, by the client they are asked for (json | sse | chat).
func escapedKeyScripts() []struct {
	name, client string
	script       upstreamtest.Script
	recovers     bool // the answer is an error the recover policy is asked about
} {
	body := escapedKeyBody()
	bareErrorEvent := []byte(`{"type":"error","code":"x","message":"upstream saw ` + unicodeEscaped(operatorKey) + `","sequence_number":4}`)
	delta := upstreamtest.ResponsesStream(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, "placeholder", 1)
	for i, f := range delta {
		f.Raw = bytes.Replace(f.Raw, []byte("placeholder"), []byte("the key is "+unicodeEscaped(operatorKey)), 1)
		delta[i] = f
	}
	return []struct {
		name, client string
		script       upstreamtest.Script
		recovers     bool
	}{
		{"JSON: 400 status", "json", upstreamtest.Script{Status: http.StatusBadRequest, Body: body}, true},
		{"SSE: 400 status before the stream", "sse", upstreamtest.Script{Status: http.StatusBadRequest, Body: body}, true},
		{"SSE: error event", "sse", upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusBadRequest, body), true},
		{"SSE: bare error event", "sse", upstreamtest.Script{Frames: []upstreamtest.Frame{upstreamtest.SSEEvent(bareErrorEvent)}}, true},
		{"SSE: a text delta quoting it", "sse", upstreamtest.Script{Frames: delta}, false},
		{"Chat SSE: error chunk", "chat", upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusBadRequest, body), true},
		{"Chat JSON: 400 status", "chatjson", upstreamtest.Script{Status: http.StatusBadRequest, Body: body}, true},
	}
}

// askEscaped sends the request of client kind to h and returns what the
// client's JSON parser reads of the answer, headers included.
func askEscaped(t *testing.T, h *harness, client string) string {
	t.Helper()
	path, body := "/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`
	switch client {
	case "json":
		body = `{"model":"gpt-fake-1","input":"hi"}`
	case "chat":
		path, body = "/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}],"stream":true}`
	case "chatjson":
		path, body = "/v1/chat/completions", `{"model":"gpt-fake-1","messages":[{"role":"user","content":"hi"}]}`
	}
	resp, raw := h.sendRaw(path, body, nil)
	return fmt.Sprint(resp.Header) + "\n" + decodedJSON(raw)
}

// TestEscapedUpstreamKeyNeverReachesClients: an upstream that quotes the
// gateway's key with \uXXXX escapes does not get it past the scrubber
// (SECURITY.md, Secrets: "JSON-escaped forms of the key are matched too"):
// not to the client once its JSON parser decoded the answer, not in the
// gateway's own response.failed, not in the recover policy's input
// ("Policies never see credentials"), and not in a log line.
func TestEscapedUpstreamKeyNeverReachesClients(t *testing.T) {
	policy := &recoverInputs{}
	h := newHarness(t, harnessConfig{keys: map[string]string{"A": operatorKey},
		upstreams: []upstreamtest.Options{{Name: "A", APIKey: operatorKey}}, opts: gateway.Options{Policy: policy}})
	for _, tt := range escapedKeyScripts() {
		t.Run(tt.name, func(t *testing.T) {
			h.t = t
			h.ups["A"].Enqueue(tt.script)
			seen := askEscaped(t, h, tt.client)
			if strings.Contains(seen, operatorKey) {
				t.Errorf("the operator's key reached the client:\n%s", seen)
			}
			if !strings.Contains(seen, "[redacted]") {
				t.Errorf("the upstream's text did not reach the client redacted:\n%s", seen)
			}
			ins := policy.take()
			if tt.recovers && len(ins) == 0 {
				t.Fatal("the recover policy was not asked about the upstream's error")
			}
			for _, in := range ins {
				if got := fmt.Sprintf("%+v", in); strings.Contains(got, operatorKey) {
					t.Errorf("the recover policy was handed the operator's key: %s", got)
				}
			}
		})
	}
	if strings.Contains(h.logs.String(), operatorKey) {
		t.Error("the operator's key is in the logs")
	}
}

// TestEscapedUpstreamKeyNotRecorded: with record_dir, the recover hook's
// recorded input holds no \u-escaped key the upstream quoted (README
// "Recorded traffic as tests": recordings leave credentials out).
func TestEscapedUpstreamKeyNotRecorded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rec")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{RecordDir: dir, Logger: hclog.NewNullLogger(), PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	h := newHarness(t, harnessConfig{keys: map[string]string{"A": operatorKey},
		upstreams: []upstreamtest.Options{{Name: "A", APIKey: operatorKey}}, opts: gateway.Options{Policy: rt}})
	for _, tt := range escapedKeyScripts() {
		if tt.recovers {
			h.ups["A"].Enqueue(tt.script)
			askEscaped(t, h, tt.client)
		}
	}
	recs, text := readRecords(t, dir)
	recovers := 0
	for _, rc := range recs {
		if rc.Hook == "recover" {
			recovers++
		}
	}
	if recovers == 0 {
		t.Fatalf("no recover record:\n%s", text)
	}
	if decoded := decodedJSON([]byte(text)); strings.Contains(decoded, operatorKey) {
		t.Fatalf("the recording holds the operator's key:\n%s", decoded)
	}
}

// TestUpstreamHeaderNamedByKeyDropped: a response header whose name holds
// the key is dropped even though Go's transport changed its letter case
// (X-Sk-Operator-… for x-sk-operator-…) before the scrubber saw it.
func TestUpstreamHeaderNamedByKeyDropped(t *testing.T) {
	h := newHarness(t, harnessConfig{keys: map[string]string{"A": operatorKey},
		upstreams: []upstreamtest.Options{{Name: "A", APIKey: operatorKey}}})
	h.ups["A"].Enqueue(upstreamtest.Script{Header: http.Header{"x-" + operatorKey: {"1"}, "X-Kept": {"2"}}})
	resp, raw := h.sendRaw("/v1/responses", `{"model":"gpt-fake-1","input":"hi"}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("client got %d %s", resp.StatusCode, raw)
	}
	for name := range resp.Header {
		if strings.Contains(strings.ToLower(name), strings.ToLower(operatorKey)) {
			t.Errorf("header %q reached the client", name)
		}
	}
	if resp.Header.Get("X-Kept") != "2" {
		t.Errorf("an ordinary upstream header was dropped: %v", resp.Header)
	}
}

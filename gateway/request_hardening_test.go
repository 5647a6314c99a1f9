package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/sluice-gw/sluice/gateway"
)

// A top-level key that is a field the gateway reads in another case is
// refused on both endpoints and reaches no upstream: an upstream that
// matches keys ignoring case (Go's encoding/json) would read "Stream" or
// "Model" where the gateway read "stream" and "model", so a client could
// make it stream where the gateway expects JSON, or pass a key's models list.
func TestMiscasedGatewayFieldRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	tests := []struct {
		name, path, body, param, code, meant string
	}{
		{"Stream alone", "/v1/responses", `{"model":"gpt-fake-1","input":"hi","Stream":true}`, "Stream", "unknown_parameter", "stream"},
		{"Model beside model", "/v1/responses", `{"model":"gpt-fake-1","Model":"forbidden","input":"hi"}`, "Model", "duplicate_key", "model"},
		{"model after MODEL", "/v1/responses", `{"MODEL":"forbidden","model":"gpt-fake-1","input":"hi"}`, "MODEL", "duplicate_key", "model"},
		{"STORE", "/v1/responses", `{"model":"gpt-fake-1","input":"hi","STORE":false}`, "STORE", "unknown_parameter", "store"},
		{"Previous_Response_Id", "/v1/responses", `{"model":"gpt-fake-1","input":"hi","Previous_Response_Id":"resp_x"}`, "Previous_Response_Id", "unknown_parameter", "previous_response_id"},
		{"Background", "/v1/responses", `{"model":"gpt-fake-1","input":"hi","Background":true}`, "Background", "unknown_parameter", "background"},
		{"Input beside input", "/v1/responses", `{"model":"gpt-fake-1","input":"hi","Input":"there"}`, "Input", "duplicate_key", "input"},
		// U+017F (long s) folds to "s", as encoding/json matches it.
		{"long s in stream", "/v1/responses", `{"model":"gpt-fake-1","input":"hi","ſtream":true}`, "ſtream", "unknown_parameter", "stream"},
		{"chat Stream", "/v1/chat/completions", `{"model":"gpt-fake-1",` + msgs + `,"Stream":true}`, "Stream", "unknown_parameter", "stream"},
		{"chat Model beside model", "/v1/chat/completions", `{"model":"gpt-fake-1","Model":"forbidden",` + msgs + `}`, "Model", "duplicate_key", "model"},
		{"chat Messages beside messages", "/v1/chat/completions", `{"model":"gpt-fake-1",` + msgs + `,"Messages":[]}`, "Messages", "duplicate_key", "messages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.post(tt.path, tt.body)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", resp.StatusCode)
			}
			e := readError(t, resp)
			if e.Error.Type != "invalid_request_error" || deref(e.Error.Param) != tt.param || deref(e.Error.Code) != tt.code {
				t.Fatalf("error %+v param=%q code=%q, want param %q code %q", e.Error, deref(e.Error.Param), deref(e.Error.Code), tt.param, tt.code)
			}
			if !strings.Contains(e.Error.Message, `"`+tt.meant+`"`) {
				t.Fatalf("message %q does not name the spelling meant, %q", e.Error.Message, tt.meant)
			}
		})
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("a refused body reached the upstream %d times", n)
	}
	// Keys the gateway does not read pass through in any case.
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","Metadata":{"a":"b"}}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a key the gateway does not read was refused: %d", resp.StatusCode)
	}
}

// The same refusal on a WebSocket's response.create frame; the socket keeps
// working.
func TestWebSocketMiscasedGatewayFieldRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	c := h.dialWS(nil)
	evs := c.turn(`{"type":"response.create","model":"gpt-fake-1","input":"hi","Model":"forbidden"}`)
	var v struct {
		Status int
		Error  struct{ Code, Param string }
	}
	_ = json.Unmarshal(evs[0].data, &v)
	if len(evs) != 1 || evs[0].typ != "error" || v.Status != 400 || v.Error.Code != "duplicate_key" || v.Error.Param != "Model" {
		t.Fatalf("a frame with Model beside model → %s", evs[0].data)
	}
	// "Stream" alone is the client's unknown parameter, not a duplicate of
	// the "stream" the gateway sets on every frame; the access log names
	// the refused frame's model.
	evs = c.turn(`{"type":"response.create","model":"gpt-fake-1","input":"hi","Stream":false}`)
	_ = json.Unmarshal(evs[0].data, &v)
	if len(evs) != 1 || v.Status != 400 || v.Error.Code != "unknown_parameter" || v.Error.Param != "Stream" {
		t.Fatalf("a frame with Stream alone → %s", evs[0].data)
	}
	// The line is written once the error frame went: wait for it.
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(h.logs.String(), `model=gpt-fake-1 status=400 code=unknown_parameter`); {
		if time.Now().After(deadline) {
			t.Fatalf("the access log of the refused frame lacks its model:\n%s", h.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("the refused frame reached the upstream (%d requests)", n)
	}
	if evs := c.turn(createFrame("")); evs[len(evs)-1].typ != "response.completed" {
		t.Fatalf("the socket is unusable after the refusal: %s", evs[len(evs)-1].data)
	}
}

// A client that says Connection: close and sends a small zstd bomb gets its
// 413 and then the end of the connection, not a reset: the gateway refuses
// the body after reading only its frame header, and a socket closed with
// the rest unread is reset by the kernel, which discards an answer the
// client has not read yet.
func TestBombWithConnectionCloseGetsItsAnswer(t *testing.T) {
	const limit = 64 << 10
	h := newHarness(t, harnessConfig{opts: gateway.Options{MaxBodyBytes: limit}})
	// EncodeAll records the decoded size (8 MiB) in the frame header, which
	// the decoder refuses before it reads any block. A tail of varied text
	// keeps the frame some tens of KiB long, so most of it is still unread
	// when the answer goes.
	var plain bytes.Buffer
	plain.WriteString(`{"model":"gpt-fake-1","input":"`)
	plain.Write(bytes.Repeat([]byte(" "), 8<<20))
	for i := 0; i < 8<<10; i++ {
		fmt.Fprintf(&plain, "%x ", uint64(i)*0x9E3779B97F4A7C15)
	}
	plain.WriteString(`"}`)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	bomb := enc.EncodeAll(plain.Bytes(), nil)
	_ = enc.Close()
	if len(bomb) < 16<<10 || len(bomb) > 200<<10 {
		t.Fatalf("the bomb is %d bytes; it must be long enough to be unread and within the 256 KiB net/http reads after a refusal", len(bomb))
	}

	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // a bound on a hang, not an assertion
	head := fmt.Sprintf("POST /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-client-secret\r\n"+
		"Content-Type: application/json\r\nContent-Encoding: zstd\r\nConnection: close\r\nContent-Length: %d\r\n\r\n", len(bomb))
	if _, err := conn.Write(append([]byte(head), bomb...)); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to the bomb: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the answer was cut: %v (read %q)", err, body)
	}
	var e apiError
	if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(body, &e) != nil || deref(e.Error.Code) != "payload_too_large" {
		t.Fatalf("answer %d %s, want 413 payload_too_large", resp.StatusCode, body)
	}
	// The connection then ends with a FIN. A reset instead loses the answer
	// for any client that has not read it yet, or reads to the end first.
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the answer: %q, %v; want a clean end of the connection", rest, err)
	}
	if n := h.ups["A"].RequestCount(); n != 0 {
		t.Fatalf("the bomb reached the upstream %d times", n)
	}
}

// TestUnauthenticatedUploadWithConnectionCloseGetsIts401: with
// auth.required, a request without a key is answered 401 before its body
// is read; a client that sent the whole body with Connection: close still
// gets that answer, not a reset.
func TestUnauthenticatedUploadWithConnectionCloseGetsIts401(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: true}}})
	body := `{"model":"gpt-fake-1","input":"` + strings.Repeat("x", 64<<10) + `"}`
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // a bound on a hang, not an assertion
	head := fmt.Sprintf("POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := conn.Write([]byte(head + body)); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "invalid_api_key") {
		t.Fatalf("answer %d %s (%v), want 401 invalid_api_key", resp.StatusCode, b, err)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the answer: %q, %v; want a clean end of the connection", rest, err)
	}
}

package streaminput_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/internal/redistest"
)

// respTemplateWithInput is a Responses streaming template whose input is
// the given text.
func respTemplateWithInput(input string) string {
	return fmt.Sprintf(`{"model":"gpt-fake-1","stream":true,"input":%q}`, input)
}

// A template that could never be sent is refused when the session is
// created (README "Limits": an accepted input can always be sent): one
// over the request limit (limits.max_body_bytes), REST or in a Mode A
// header line, and one larger than the bytes all sessions may hold (a 413,
// not a 503 to retry).
func TestTemplateTooLargeRefusedAtCreate(t *testing.T) {
	big := respTemplateWithInput(strings.Repeat("a", 5000))
	for _, tc := range []struct {
		name    string
		opts    streaminput.Options
		message string // the refusal's message contains it
	}{
		{"over the request limit", streaminput.Options{MaxRequestBytes: 4096}, "template is larger than the gateway limit of 4096 bytes"},
		{"over the bytes all sessions hold", streaminput.Options{MaxTotalBytes: 3000}, "can never be accepted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{opts: tc.opts})
			code, b := e.do(http.MethodPost, streaminput.PathPrefix, sessionBody(streaminput.EndpointResponses, "on_end_only", big))
			ae := decodeError(t, b)
			if code != http.StatusRequestEntityTooLarge || ae.code() != "payload_too_large" || ae.param() != "template" ||
				!strings.Contains(ae.Error.Message, tc.message) {
				t.Fatalf("create with a template that can never be sent: %d %s", code, b)
			}
		})
	}

	t.Run("Mode A header line", func(t *testing.T) {
		e := newEnv(t, envConfig{opts: streaminput.Options{MaxRequestBytes: 4096}})
		body := `{"template":` + big + `}` + "\n" + `{"sequence_id":0,"payload":"b"}` + "\n"
		code, _, b := e.postRaw(streaminput.EndpointResponses, strings.NewReader(body), modeAHeaders())
		ae := decodeError(t, b)
		if code != http.StatusRequestEntityTooLarge || ae.code() != "payload_too_large" ||
			!strings.Contains(ae.Error.Message, "the template in the header line") {
			t.Fatalf("Mode A with a template over the request limit: %d %s", code, b)
		}
		if e.up.RequestCount() != 0 {
			t.Fatal("a refused Mode A request reached the upstream")
		}
	})
}

// bytesHeldThenDeletedElsewhere starts two replicas whose sessions may hold
// 15000 bytes in all; replica 1 creates two sessions with body, the first
// holding 10000 bytes, and replica 2 deletes that one. It returns replica
// 1, the second session's id and body.
func bytesHeldThenDeletedElsewhere(t *testing.T) (r1 *env, next, body string) {
	t.Helper()
	r := replicasOpts(t, 2, redistest.Start(t), gateway.ResumeOptions{}, streaminput.Options{MaxTotalBytes: 15000})
	r1, r2 := r[0], r[1]
	body = sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate)
	held, next := r1.create(body), r1.create(body)
	r1.mustChunk(held, textChunk(0, strings.Repeat("a", 10000), false))
	if code, b := r2.do(http.MethodDelete, streaminput.PathPrefix+"/"+held, ""); code != http.StatusOK {
		t.Fatalf("delete on replica 2: %d %s", code, b)
	}
	return r1, next, body
}

// A chunk that would cross the bytes all sessions hold only because a
// session deleted through another replica still counts here is accepted
// the first time it is sent: the replica checks the sessions it counts
// against the store before the cap refuses (README "Several replicas").
func TestSharedByteCapChecksStoreBeforeRefusingChunk(t *testing.T) {
	r1, next, body := bytesHeldThenDeletedElsewhere(t)
	if code, _, ae := r1.chunk(next, textChunk(0, strings.Repeat("b", 10000), false)); code != http.StatusAccepted {
		t.Fatalf("chunk on replica 1 after the session holding the bytes was deleted on replica 2: %d %+v", code, ae)
	}
	// The cap still holds for the sessions that are live.
	third := r1.create(body)
	if code, _, ae := r1.chunk(third, textChunk(0, strings.Repeat("c", 10000), false)); code != http.StatusServiceUnavailable || ae.code() != "server_overloaded" {
		t.Fatalf("a chunk over the cap: %d %+v", code, ae)
	}
}

// A resent chunk whose payload is the same but whose end_of_input or
// new_part differs is refused with a message naming that field.
func TestSequenceConflictNamesWhatDiffers(t *testing.T) {
	e := newEnv(t, envConfig{})
	for _, tc := range []struct {
		name          string
		first, second string
		want          string
		notWant       string
	}{
		{"end_of_input", `{"sequence_id":0,"payload":"a","end_of_input":false}`, `{"sequence_id":0,"payload":"a","end_of_input":true}`,
			"end_of_input false (this chunk has true)", "payload"},
		{"new_part", `{"sequence_id":0,"payload":"a"}`, `{"sequence_id":0,"payload":"a","new_part":true}`,
			"new_part false (this chunk has true)", "payload"},
		{"payload", `{"sequence_id":0,"payload":"a"}`, `{"sequence_id":0,"payload":"b"}`,
			"with a different payload", "end_of_input"},
		{"payload and end_of_input", `{"sequence_id":0,"payload":"a"}`, `{"sequence_id":0,"payload":"b","end_of_input":true}`,
			"with a different payload, end_of_input false (this chunk has true)", "new_part"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := e.create(sessionBody(streaminput.EndpointResponses, "on_end_only", respTemplate))
			e.mustChunk(id, tc.first)
			code, _, ae := e.chunk(id, tc.second)
			if code != http.StatusConflict || ae.code() != streaminput.CodeSequenceConflict ||
				!strings.Contains(ae.Error.Message, tc.want) || strings.Contains(ae.Error.Message, tc.notWant) {
				t.Fatalf("conflicting resend: %d %+v, want a message with %q and without %q", code, ae, tc.want, tc.notWant)
			}
		})
	}
}

// ?starting_after=N counts Responses stream events: for a Chat stream or a
// JSON answer it is refused rather than ignored (which replayed the whole
// answer to a reader that already had part of it).
func TestStartingAfterRefusedWhenNotAResponsesStream(t *testing.T) {
	e := newEnv(t, envConfig{})
	for _, tc := range []struct {
		name, endpoint, template string
	}{
		{"chat stream", streaminput.EndpointChat, `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"Q: "}]}`},
		{"responses JSON", streaminput.EndpointResponses, `{"model":"gpt-fake-1","input":"Q: "}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := e.create(sessionBody(tc.endpoint, "on_end_only", tc.template))
			e.mustChunk(id, textChunk(0, "hello", true))
			resp, _, b := e.result(id, "?starting_after=5")
			ae := decodeError(t, b)
			if resp.StatusCode != http.StatusBadRequest || ae.code() != "invalid_value" || ae.param() != "starting_after" ||
				!strings.Contains(ae.Error.Message, "Responses event streams") {
				t.Fatalf("starting_after on a %s: %d %s", tc.name, resp.StatusCode, b)
			}
			// Without it, the whole answer is there.
			if resp, _, b := e.result(id, ""); resp.StatusCode != http.StatusOK {
				t.Fatalf("result without starting_after: %d %s", resp.StatusCode, b)
			}
		})
	}
}

// A Mode A body cut mid-way by a client that half-closes its connection
// but still reads is answered 400 invalid_body, as a plain request's cut
// body is, not a 499 "the client went away".
func TestModeABodyCutWhileClientReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail string // what the client sends after its complete lines, before half-closing
	}{
		{"cut inside a chunk frame", "40\r\n{\"payload\":\"par"},
		{"cut after complete lines", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envConfig{})
			u, err := url.Parse(e.url)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			frame := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
			req := "POST " + streaminput.EndpointResponses + " HTTP/1.1\r\nHost: " + u.Host + "\r\nAuthorization: " + clientKey +
				"\r\n" + streaminput.HeaderStreamingInput + ": true\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n" +
				frame(`{"template":`+respTemplate+`,"start_policy":"on_end_only"}`+"\n") +
				frame(`{"sequence_id":0,"payload":"a"}`+"\n") + tc.tail
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer to a client still reading: %v", err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			ae := decodeError(t, b)
			if resp.StatusCode != http.StatusBadRequest || ae.code() != "invalid_body" {
				t.Fatalf("a Mode A body cut short: %d %s", resp.StatusCode, b)
			}
			if e.up.RequestCount() != 0 {
				t.Fatal("a cut Mode A body reached the upstream")
			}
		})
	}
}

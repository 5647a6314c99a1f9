package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/streaminput"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// unsentBodyWait bounds every read of these tests: a gateway that waits
// for a body that never comes fails the test instead of hanging it.
const unsentBodyWait = 20 * time.Second

const unsentBodyAdminToken = "adm-secret-0123456789"

// unsentBodyHarness is a gateway with auth required (the key teamAKey),
// an admin token, a store for keys and usage, and a short read_body.
func unsentBodyHarness(t *testing.T) *harness {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{Dir: t.TempDir(), SweepInterval: -1, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return newHarness(t, harnessConfig{opts: gateway.Options{
		AdminToken:      unsentBodyAdminToken,
		ReadBodyTimeout: 2 * time.Second,
		Accounts: gateway.AccountsOptions{Required: true, KeyStore: st, Usage: st,
			Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}},
	}})
}

// sendDeclaredBody opens a connection to the gateway at base and sends a
// request whose headers declare a body (headers holds Content-Length or
// Transfer-Encoding) followed by only part of it, then nothing more.
func sendDeclaredBody(t *testing.T, base, method, path, headers, partial string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(unsentBodyWait))
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n%s\r\n%s", method, path, headers, partial)
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// answeredAndClosed reads one answer from br and checks that the gateway
// then closes the connection; it returns the answer's status and body.
func answeredAndClosed(t *testing.T, what string, br *bufio.Reader) (int, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: no answer while the declared body is not sent: %v", what, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", what, err)
	}
	if !resp.Close {
		t.Errorf("%s: the answer does not say Connection: close (headers %v)", what, resp.Header)
	}
	if n, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: after the answer the connection gave %v, %v; want EOF (closed)", what, n, err)
	}
	return resp.StatusCode, body
}

// A request that declares a body and sends only part of it gets its
// answer, and its connection closed, on every endpoint that does not read
// its body: net/http would otherwise read the rest before answering, with
// no deadline, and the client would hold the answer and the connection for
// as long as it likes (SECURITY.md, "Limits").
func TestDeclaredBodyNotSentDoesNotHoldTheAnswer(t *testing.T) {
	h := unsentBodyHarness(t)
	const key, admin = "Authorization: Bearer " + teamAKey + "\r\n", "Authorization: Bearer " + unsentBodyAdminToken + "\r\n"
	for _, c := range []struct {
		name, method, path, headers string
		status                      int
		code                        string
	}{
		{"keyless 401", http.MethodPost, "/v1/responses", "", http.StatusUnauthorized, "invalid_api_key"},
		{"keyless 401, chunked", http.MethodPost, "/v1/responses", "Transfer-Encoding: chunked\r\n", http.StatusUnauthorized, "invalid_api_key"},
		{"keyless WebSocket upgrade", http.MethodGet, "/v1/responses", "Connection: Upgrade\r\nUpgrade: websocket\r\n", http.StatusUnauthorized, "invalid_api_key"},
		{"healthz", http.MethodGet, "/healthz", "", http.StatusOK, ""},
		{"healthz, chunked", http.MethodGet, "/healthz", "Transfer-Encoding: chunked\r\n", http.StatusOK, ""},
		{"models", http.MethodGet, "/v1/models", key, http.StatusOK, ""},
		{"stored response, stream asked in the query", http.MethodGet, "/v1/responses/resp_unknown?stream=true", key, http.StatusNotFound, ""},
		{"stored response delete", http.MethodDelete, "/v1/responses/resp_unknown", key, http.StatusNotFound, ""},
		{"unknown path", http.MethodPost, "/v1/nonexistent", key, http.StatusNotFound, ""},
		{"admin usage", http.MethodGet, "/admin/usage", admin, http.StatusOK, ""},
		{"WebSocket upgrade with a key", http.MethodGet, "/v1/responses", key + "Connection: Upgrade\r\nUpgrade: websocket\r\n", http.StatusBadRequest, "invalid_body"},
		{"another path asking to upgrade", http.MethodGet, "/v1/models", key + "Connection: Upgrade\r\nUpgrade: websocket\r\n", http.StatusBadRequest, "invalid_body"},
	} {
		t.Run(c.name, func(t *testing.T) {
			headers, partial := "Content-Length: 1000\r\n", `{"a"`
			if strings.HasPrefix(c.headers, "Transfer-Encoding") {
				headers, partial = "", "10\r\n"+`{"a"`
			}
			_, br := sendDeclaredBody(t, h.url, c.method, c.path, c.headers+headers, partial)
			status, body := answeredAndClosed(t, c.name, br)
			if status != c.status || (c.code != "" && gjson.GetBytes(body, "error.code").Str != c.code) {
				t.Fatalf("%s %s: %d %s, want %d %s", c.method, c.path, status, body, c.status, c.code)
			}
		})
	}
}

// The endpoints that do read a body (a stored response's GET reads the
// {"stream":true} some SDKs send there, POST /admin/keys its key) read it
// within read_body as every body is: 408 request_timeout, and the
// connection closed, for one that is not sent.
func TestDeclaredBodyNotSentIsA408WhereTheBodyIsRead(t *testing.T) {
	h := unsentBodyHarness(t)
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"hi"}`)
	id := gjson.GetBytes(b, "id").Str
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("creating a response: %d %s", resp.StatusCode, b)
	}
	for _, c := range []struct{ name, method, path, auth string }{
		{"stored response", http.MethodGet, "/v1/responses/" + id, teamAKey},
		{"admin keys", http.MethodPost, "/admin/keys", unsentBodyAdminToken},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, br := sendDeclaredBody(t, h.url, c.method, c.path, "Authorization: Bearer "+c.auth+"\r\nContent-Length: 1000\r\n", `{"stream"`)
			status, body := answeredAndClosed(t, c.name, br)
			if status != http.StatusRequestTimeout || gjson.GetBytes(body, "error.code").Str != "request_timeout" {
				t.Fatalf("%s %s: %d %s, want 408 request_timeout", c.method, c.path, status, body)
			}
		})
	}
}

// Controls: a request whose body is read to its end keeps its connection
// (keep-alive), and a body sent whole to an endpoint that reads it is
// still taken into account there.
func TestDeclaredBodySentWholeKeepsTheConnection(t *testing.T) {
	h := unsentBodyHarness(t)
	const body = respBody // a streamed response: its events can be streamed again
	conn, br := sendDeclaredBody(t, h.url, http.MethodPost, "/v1/responses",
		fmt.Sprintf("Authorization: Bearer %s\r\nContent-Length: %d\r\n", teamAKey, len(body)), body)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("POST /v1/responses: %d %s (close %v, %v)", resp.StatusCode, b, resp.Close, err)
	}
	id := regexp.MustCompile(`"id":"(resp_[^"]+)"`).FindStringSubmatch(string(b))
	if id == nil {
		t.Fatalf("no response id in %q", b)
	}
	// The same connection serves the next request: a stored response's
	// GET, with its {"stream":true} body sent whole.
	stream := `{"stream":true}`
	if _, err := fmt.Fprintf(conn, "GET /v1/responses/%s HTTP/1.1\r\nHost: sluice\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s",
		id[1], teamAKey, len(stream), stream); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the connection was not kept for a second request: %v", err)
	}
	b, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Close || !strings.Contains(string(b), "event: response.completed") {
		t.Fatalf("GET with {\"stream\":true}: %d %s %q (close %v)", resp.StatusCode, resp.Header.Get("Content-Type"), b, resp.Close)
	}
}

// Control: a streaming-input Mode A request, mounted behind the gate as
// cmd/sluice mounts it, still streams its answer while its body arrives.
func TestModeAStillStreamsWhileItsBodyArrives(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	pool, err := upstream.NewPool([]upstream.Config{{Name: "A", BaseURL: up.URL}}, upstream.Options{Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	pool.ProbeAll(context.Background())
	gw, err := gateway.New(gateway.Options{Pool: pool, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := streaminput.New(context.Background(), streaminput.Options{Dispatch: gw.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = mgr.Close(ctx)
	})
	gw.Wrap(mgr.ModeA)
	mgr.Start()
	url := serveGateway(t, gw)

	header := `{"template":{"model":"gpt-fake-1","stream":true},"start_policy":"on_first_chunk"}` + "\n"
	chunk := `{"payload":"hello"}` + "\n"
	lines := fmt.Sprintf("%x\r\n%s\r\n%x\r\n%s\r\n", len(header), header, len(chunk), chunk)
	conn, br := sendDeclaredBody(t, url, http.MethodPost, streaminput.EndpointResponses,
		streaminput.HeaderStreamingInput+": true\r\nTransfer-Encoding: chunked\r\n", lines)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer while the Mode A body is still arriving: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("Mode A: %d %s", resp.StatusCode, b)
	}
	sr := bufio.NewReader(resp.Body)
	for {
		line, err := sr.ReadString('\n')
		if err != nil {
			t.Fatalf("the answer ended before its first event, with the body still arriving: %v", err)
		}
		if strings.HasPrefix(line, "event: ") {
			break
		}
	}
	// The body ends: the answer runs to its end.
	if _, err := io.WriteString(conn, "0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(sr)
	if err != nil || !strings.Contains(string(rest), "response.completed") {
		t.Fatalf("the rest of the answer: %v %q", err, rest)
	}
}

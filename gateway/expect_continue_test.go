package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// expectContinue sends headers only, with Expect: 100-continue, and returns
// what the gateway answers before it closes the connection (read with a
// bounded deadline).
func expectContinue(t *testing.T, h *harness, method, path, headers string) string {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n%s\r\n", method, path, headers)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("reading the answer: %v (got %q)", err, got)
	}
	return string(got)
}

// A body refused from its header fields alone (a Content-Length over the
// limit, a Content-Encoding the gateway does not decode) is answered at
// once, without a 100 Continue first (RFC 9110 §10.1.1): the client asked
// whether to upload and must not be told to. The connection is closed
// after the answer (SECURITY.md "Limits").
func TestExpectContinueRefusedFromTheHeaders(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	admin, _ := keyedHarness(t)
	for _, tc := range []struct {
		name          string
		h             *harness
		path, headers string
		status        string
	}{
		{"responses too large", h, "/v1/responses", "Content-Length: 40000000\r\n", "413"},
		{"chat too large", h, "/v1/chat/completions", "Content-Length: 40000000\r\n", "413"},
		{"responses brotli", h, "/v1/responses", "Content-Length: 20\r\nContent-Encoding: br\r\n", "415"},
		{"admin too large", admin, "/admin/keys", "Content-Length: 2000000\r\n", "413"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := expectContinue(t, tc.h, http.MethodPost, tc.path, tc.headers)
			if !strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" ") {
				t.Fatalf("the gateway answered %q; want %s at once, no 100 Continue", got, tc.status)
			}
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
			if err != nil {
				t.Fatalf("answer %q: %v", got, err)
			}
			if !resp.Close {
				t.Fatalf("answer %q does not close the connection", got)
			}
		})
	}
	// A body the gateway takes still gets its 100 Continue, then the answer.
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(respBody))
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("first line %q (%v), want 100 Continue", line, err)
	}
	if blank, err := br.ReadString('\n'); err != nil || blank != "\r\n" {
		t.Fatalf("after 100 Continue: %q (%v)", blank, err)
	}
	fmt.Fprint(conn, respBody)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after 100 Continue: %d, want 200", resp.StatusCode)
	}
}

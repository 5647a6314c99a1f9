package upstream

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestRedactErrorText: a client error is rendered without its URL (which may
// carry a key in userinfo) and without the method the client named it by,
// as README quotes it; other errors are left as they are.
func TestRedactErrorText(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:9: connect: connection refused")
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"a GET", &url.Error{Op: "Get", URL: "http://user:sk-secret@127.0.0.1:9/v1/models", Err: refused}, refused.Error()},
		{"a POST, wrapped", errors.Join(&url.Error{Op: "Post", URL: "http://127.0.0.1:9/v1/responses", Err: refused}), refused.Error()},
		{"not a client error", errors.New("HTTP 503"), "HTTP 503"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := RedactError(tt.err); got != tt.want {
				t.Fatalf("RedactError = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestProbeRefusedReason: an upstream whose port refuses connections is down
// with the reason README quotes, "probe: dial tcp …: connection refused".
func TestProbeRefusedReason(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // a port nothing listens on
	p, err := NewPool([]Config{{Name: "A", BaseURL: "http://" + addr + "/v1"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p.ProbeAll(context.Background())
	st := p.Get("A").Status(time.Now())
	if st.State != StateDown || !strings.HasPrefix(st.Reason, "probe: dial tcp "+addr+": ") || !strings.HasSuffix(st.Reason, "connection refused") {
		t.Fatalf("status %+v; want down with \"probe: dial tcp %s: …connection refused\"", st, addr)
	}
}

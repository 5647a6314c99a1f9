package streaminput_test

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// Tests that pin behaviour a second sampled mutation run found unchecked.

// TestGaps2DispatchAsTheClient: a live session's request reaches the
// gateway from the client's own address, not the placeholder a restored
// session (which no longer knows it) uses.
func TestGaps2DispatchAsTheClient(t *testing.T) {
	seen := make(chan string, 1)
	e := newEnv(t, envConfig{dispatch: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- r.RemoteAddr:
		default:
		}
	})})
	id := e.create(sessionBody(streaminput.EndpointResponses, "", respTemplate))
	e.mustChunk(id, textChunk(0, "x", true))
	select {
	case addr := <-seen:
		host, port, err := net.SplitHostPort(addr)
		if err != nil || net.ParseIP(host) == nil || port == "0" {
			t.Fatalf("dispatched with RemoteAddr %q, want the client's address", addr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session was not dispatched")
	}
}

// TestGaps2CreateRequestBound: a create request body is bounded by the
// template's limit plus a chunk request's (the session's byte cap
// base64-encoded, plus 64 KiB): a larger one is refused with that limit.
func TestGaps2CreateRequestBound(t *testing.T) {
	const tplBytes, capBytes = 1024, 3000
	e := newEnv(t, envConfig{opts: streaminput.Options{MaxTemplateBytes: tplBytes, MaxSessionBytes: capBytes}})
	const limit = tplBytes + capBytes/3*4 + 64<<10
	code, b := e.do(http.MethodPost, streaminput.PathPrefix, `{"pad":"`+strings.Repeat("z", limit+1000)+`"}`)
	ae := decodeError(t, b)
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(ae.Error.Message, "limit of "+strconv.Itoa(limit)+" bytes") {
		t.Fatalf("a create request over %d bytes: %d %q", limit, code, ae.Error.Message)
	}
}

package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// Every answer carries an x-request-id, as OpenAI's do and the SDKs expose
// it: one the gateway mints (req_ and 32 hex digits) on the answers it
// writes itself — errors, a background create, a stored response, its
// replayed stream, /v1/models — and the upstream's own on an answer relayed
// from it. The access log line names the id the gateway minted.
func TestEveryAnswerCarriesARequestID(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	c := h.client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	minted := regexp.MustCompile(`^req_[0-9a-f]{32}$`)
	seen := map[string]bool{}
	check := func(what string, resp *http.Response, want *regexp.Regexp) {
		t.Helper()
		id := resp.Header.Get("X-Request-Id")
		if !want.MatchString(id) {
			t.Fatalf("%s: x-request-id %q, want %s", what, id, want)
		}
		if seen[id] {
			t.Fatalf("%s: x-request-id %q was given before", what, id)
		}
		seen[id] = true
	}

	var resp *http.Response
	_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-fake-1",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	check("a relayed answer", resp, regexp.MustCompile(`^req_`))
	if minted.MatchString(resp.Header.Get("X-Request-Id")) {
		t.Fatalf("a relayed answer: x-request-id %q is not the upstream's", resp.Header.Get("X-Request-Id"))
	}
	relayedID := resp.Header.Get("X-Request-Id")

	bg, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-fake-1", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}, option.WithResponseInto(&resp))
	if err != nil {
		t.Fatal(err)
	}
	check("a background create", resp, minted)
	stream := c.Responses.GetStreaming(ctx, bg.ID, responses.ResponseGetParams{}, option.WithResponseInto(&resp))
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	check("a replayed stream", resp, minted)
	if _, err := c.Responses.Get(ctx, bg.ID, responses.ResponseGetParams{}, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	check("a stored response", resp, minted)
	if _, err := c.Models.List(ctx, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	check("/v1/models", resp, minted)
	var apiErr *openai.Error
	if _, err := c.Responses.Get(ctx, "resp_unknown", responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown response: %v", err)
	}
	check("a 404", apiErr.Response, minted)
	notFoundID := apiErr.Response.Header.Get("X-Request-Id")
	bad := h.post("/v1/responses", `{"model":`) // not JSON: the gateway's 400
	bad.Body.Close()
	if bad.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad body: %d", bad.StatusCode)
	}
	check("a 400 the gateway writes", bad, minted)

	waitAccessLines(t, h, len(seen))
	lines := grepLines(h.logs.String(), "access: request")
	if !strings.Contains(lines, "request_id="+notFoundID+" ") {
		t.Errorf("no access line names request_id=%s:\n%s", notFoundID, lines)
	}
	if strings.Contains(lines, relayedID) {
		t.Errorf("the upstream's x-request-id %s is in the access log (it may carry a raw response id):\n%s", relayedID, lines)
	}
}

// TestWebSocketFramesLogTheirSocketsRequestID: a WebSocket frame carries no
// headers, so each frame's access line names the x-request-id of the
// upgrade's 101, the one id its client was given.
func TestWebSocketFramesLogTheirSocketsRequestID(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	ws := h.dialWS(nil)
	id := ws.header.Get("X-Request-Id")
	if !regexp.MustCompile(`^req_[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("the upgrade's x-request-id %q", id)
	}
	ws.turn(createFrame(""))
	ws.turn(createFrame(""))
	waitAccessLines(t, h, 2)
	lines := grepLines(h.logs.String(), "method=WS")
	if n := strings.Count(lines, "request_id="+id+" "); n != 2 {
		t.Fatalf("%d frame access lines name the socket's request_id %s, want 2:\n%s", n, id, lines)
	}
}

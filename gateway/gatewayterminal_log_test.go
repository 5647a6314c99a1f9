package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestGatewayTerminalStreamIsKept: a Responses stream that fails before the
// upstream's first event is answered by the gateway alone (response.created
// with an id it mints, then response.failed). That stream keeps its
// client-visible event log like any other (README, "Every Responses stream
// Sluice writes … keeps its client-visible event log"): the same key can GET
// the failed Response, resume the stream and list its input items; another
// key cannot; starting_after past its end is answered as for any ended
// stream.
func TestGatewayTerminalStreamIsKept(t *testing.T) {
	const key = "sk-client-secret"
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	// An ordinary stream, ended, to compare a resume past the end with.
	h.ups["A"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, ordinary := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true}`)
	ordinaryID := gjson.GetBytes(assertOneTerminal(t, ordinary).data, "response.id").Str

	h.ups["A"].SetDefault(upstreamtest.Status5xx(500))
	_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"tell me about foxes","stream":true}`)
	terminal := assertOneTerminal(t, evs)
	if len(evs) != 2 || evs[0].typ != "response.created" || terminal.typ != "response.failed" {
		t.Fatalf("client got %d events: %v", len(evs), evs)
	}
	id := gjson.GetBytes(evs[0].data, "response.id").Str
	if !strings.HasPrefix(id, "resp_sluice_") || gjson.GetBytes(terminal.data, "response.id").Str != id {
		t.Fatalf("created names %q, failed %q", id, gjson.GetBytes(terminal.data, "response.id").Str)
	}
	code := gjson.GetBytes(terminal.data, "response.error.code").Str

	status, body := h.call(http.MethodGet, "/v1/responses/"+id, key)
	got := gjson.ParseBytes(body)
	if status != http.StatusOK || got.Get("id").Str != id || got.Get("status").Str != "failed" ||
		code == "" || got.Get("error.code").Str != code {
		t.Fatalf("GET %s: %d %s; the stream ended with error code %q", id, status, body, code)
	}

	status, replay, errBody := h.resume(key, id, -1)
	if status != http.StatusOK || len(replay) != 2 {
		t.Fatalf("resume from the start: %d, %d events %s", status, len(replay), errBody)
	}
	for i, ev := range replay {
		if string(ev) != string(evs[i].data) {
			t.Fatalf("resumed event %d\n%s\nthe client got\n%s", i, ev, evs[i].data)
		}
	}
	if status, rest, errBody := h.resume(key, id, 0); status != http.StatusOK || len(rest) != 1 ||
		gjson.GetBytes(rest[0], "type").Str != "response.failed" {
		t.Fatalf("resume after response.created: %d %q %s", status, rest, errBody)
	}
	wantStatus, _, wantBody := h.resume(key, ordinaryID, 100)
	if status, _, errBody := h.resume(key, id, 100); status != wantStatus || status == http.StatusOK ||
		gjson.Get(errBody, "error.code").Str != gjson.Get(wantBody, "error.code").Str {
		t.Fatalf("resume past the end: %d %s; an ordinary ended stream: %d %s", status, errBody, wantStatus, wantBody)
	}

	status, body = h.call(http.MethodGet, "/v1/responses/"+id+"/input_items", key)
	if status != http.StatusOK || gjson.GetBytes(body, "data.0.content.0.text").Str != "tell me about foxes" {
		t.Fatalf("input_items: %d %s", status, body)
	}

	// Another key sees none of it.
	if status, _ := h.call(http.MethodGet, "/v1/responses/"+id, "sk-someone-else"); status != http.StatusNotFound {
		t.Fatalf("GET as another key: %d", status)
	}
	if status, _, _ := h.resume("sk-someone-else", id, -1); status != http.StatusNotFound {
		t.Fatalf("resume as another key: %d", status)
	}
	if status, _ := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items", "sk-someone-else"); status != http.StatusNotFound {
		t.Fatalf("input_items as another key: %d", status)
	}
}

// TestGatewayTerminalStreamStoreFalse: with store: false, a stream the
// gateway answered alone is kept as long as any other stream is: a GET once
// it ended answers as it does for an ordinary stream.
func TestGatewayTerminalStreamStoreFalse(t *testing.T) {
	const key = "sk-client-secret"
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	h.ups["A"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, ordinary := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true,"store":false}`)
	ordinaryID := gjson.GetBytes(assertOneTerminal(t, ordinary).data, "response.id").Str
	wantStatus, _ := h.call(http.MethodGet, "/v1/responses/"+ordinaryID, key)

	h.ups["A"].SetDefault(upstreamtest.Status5xx(500))
	_, evs := h.responsesStream(`{"model":"gpt-fake-1","input":"hi","stream":true,"store":false}`)
	id := gjson.GetBytes(assertOneTerminal(t, evs).data, "response.id").Str
	if status, body := h.call(http.MethodGet, "/v1/responses/"+id, key); status != wantStatus {
		t.Fatalf("GET of a store:false stream the gateway answered: %d %s; of an ordinary one: %d", status, body, wantStatus)
	}
}

// TestRelayedTerminalResponseIsComplete: an upstream that streams text and
// then ends the response with its own response.failed or
// response.incomplete whose Response lacks fields the spec requires
// (created_at, model, …) has that event relayed with the output the client
// was sent and a complete Response object, as the terminal events the
// gateway writes, keeping every field the upstream did send (README, "What
// it promises"). The terminal event names the stream's response: one
// naming another is not its end (TestTerminalEventOfAnotherResponseIsACut).
func TestRelayedTerminalResponseIsComplete(t *testing.T) {
	spec := loadSpec(t)
	for _, tc := range []struct {
		typ, tail, kept string
	}{
		{"response.failed", `{"type":"response.failed","response":{"id":"` + upstreamtest.PlaceholderID + `","object":"response","status":"failed","output":[],` +
			`"error":{"code":"server_error","message":"fake failure"},"service_tier":"flex"}}`, "error.message"},
		{"response.incomplete", `{"type":"response.incomplete","response":{"id":"` + upstreamtest.PlaceholderID + `","object":"response","status":"incomplete","output":[],` +
			`"incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":8,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},` +
			`"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":11},` +
			`"service_tier":"flex"}}`, "incomplete_details.reason"},
	} {
		t.Run(tc.typ, func(t *testing.T) {
			h := newHarness(t, harnessConfig{})
			script := upstreamtest.Answer(fullAnswer, 9)
			script.StopAfterDeltas = 3
			script.Tail = g6Frames(tc.tail)
			h.ups["A"].Enqueue(script)
			s := g6Post(t, h, `{"model":"gpt-fake-1","input":"hi","stream":true,"metadata":{"k":"v"},"instructions":"be brief"}`)
			if s.terminal.typ != tc.typ || s.text != sentPart {
				t.Fatalf("client got %q ending %s", s.text, s.terminal.typ)
			}
			if violations, _ := validateTerminal(t, spec, s.terminal.data); len(violations) > 0 {
				t.Fatalf("relayed %s breaks the spec: %v\n%s", tc.typ, violations, s.terminal.data)
			}
			resp := gjson.GetBytes(s.terminal.data, "response")
			upstream := gjson.Get(tc.tail, "response")
			createdID := gjson.GetBytes(s.evs[0].data, "response.id").Str
			if resp.Get("id").Str != createdID || resp.Get("created_at").Int() == 0 || resp.Get("model").Str != "gpt-fake-1" ||
				resp.Get("instructions").Str != "be brief" || resp.Get("metadata.k").Str != "v" {
				t.Fatalf("terminal response %s", resp.Raw)
			}
			// The upstream's own fields stay.
			if resp.Get("status").Str != upstream.Get("status").Str || resp.Get(tc.kept).Str != upstream.Get(tc.kept).Str ||
				resp.Get("service_tier").Str != "flex" || resp.Get("usage").Raw != upstream.Get("usage").Raw {
				t.Fatalf("terminal response %s; the upstream's was %s", resp.Raw, upstream.Raw)
			}
			if out := resp.Get("output").Array(); len(out) != 1 || out[0].Get("content.0.text").Str != sentPart {
				t.Fatalf("terminal output %s", resp.Get("output").Raw)
			}
		})
	}
}

package gateway_test

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestRelayedTerminalHoldsWhatWasSent: an upstream that streams text and
// then ends the response itself with response.failed or
// response.incomplete whose output is empty (as some do) has that event
// relayed with the output the client was sent, the message closed as
// incomplete with its text, as in the response.failed the gateway writes
// (README, "What it promises": what was sent stays sent). The upstream's
// id, status, error, incomplete_details and usage are kept. With no route,
// and on a route whose continuation is off.
func TestRelayedTerminalHoldsWhatWasSent(t *testing.T) {
	incomplete := upstreamtest.Answer(fullAnswer, 9)
	incomplete.StopAfterDeltas = 3
	incomplete.Tail = g6Frames(`{"type":"response.incomplete","response":{"id":"{{id}}","object":"response","created_at":1767225600,` +
		`"status":"incomplete","error":null,"incomplete_details":{"reason":"max_output_tokens"},"model":"{{model}}","output":[],` +
		`"usage":{"input_tokens":8,"output_tokens":3,"total_tokens":11}}}`)
	cases := []struct {
		name    string
		script  upstreamtest.Script
		typ     string
		details string // the terminal's error, or incomplete_details
	}{
		{"response.failed", upstreamtest.Answer(fullAnswer, 9).FailAfterDeltas(3, "server_error"), "response.failed", "error"},
		{"response.incomplete", incomplete, "response.incomplete", "incomplete_details"},
	}
	routes := []struct {
		name string
		new  func(t *testing.T) (*harness, string)
	}{
		{"no route", func(t *testing.T) (*harness, string) { return newHarness(t, harnessConfig{}), "A" }},
		{"continuation off", func(t *testing.T) (*harness, string) {
			return contHarness(t, gateway.ContinuationOff, harnessConfig{}), "P"
		}},
	}
	for _, r := range routes {
		for _, c := range cases {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				h, up := r.new(t)
				h.ups[up].Enqueue(c.script)
				model := "gpt-fake-1"
				if up == "P" {
					model = "m"
				}
				s := g6Post(t, h, `{"model":"`+model+`","input":"hi","stream":true}`)
				if s.terminal.typ != c.typ || s.text != sentPart {
					t.Fatalf("client got %q ending %s", s.text, s.terminal.typ)
				}
				var itemID, createdID string
				for _, ev := range s.evs {
					switch ev.typ {
					case "response.created":
						createdID = gjson.GetBytes(ev.data, "response.id").Str
					case "response.output_item.added":
						itemID = gjson.GetBytes(ev.data, "item.id").Str
					}
				}
				resp := gjson.GetBytes(s.terminal.data, "response")
				out := resp.Get("output").Array()
				if len(out) != 1 || out[0].Get("id").Str != itemID || out[0].Get("status").Str != "incomplete" ||
					out[0].Get("content.0.text").Str != sentPart {
					t.Fatalf("terminal output %s; the client was streamed %q in item %s", resp.Get("output").Raw, sentPart, itemID)
				}
				// The upstream's own fields stay.
				status := strings.TrimPrefix(c.typ, "response.")
				if resp.Get("id").Str != createdID || resp.Get("status").Str != status || !resp.Get(c.details).IsObject() ||
					resp.Get("usage.output_tokens").Int() != 3 || resp.Get("model").Str == "" {
					t.Fatalf("terminal response %s", resp.Raw)
				}
				if c.typ == "response.failed" && resp.Get("error.code").Str != "server_error" {
					t.Fatalf("terminal error %s", resp.Get("error").Raw)
				}
			})
		}
	}
}

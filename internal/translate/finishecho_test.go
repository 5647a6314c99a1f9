package translate

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/tidwall/gjson"
)

// TestFinishReasonOutcomes checks every finish_reason class, streamed and
// as a whole chat.completion: an answer the upstream says it cut short
// never comes out completed.
func TestFinishReasonOutcomes(t *testing.T) {
	for _, tc := range []struct {
		reason     string
		status     string // the streamed terminal response's status
		incomplete string
		unknown    bool // reported through UnknownFinish
	}{
		{"stop", "completed", "", false},
		{"tool_calls", "completed", "", false},
		{"eos_token", "completed", "", false},
		{"stop_sequence", "completed", "", false},
		{"length", "incomplete", "max_output_tokens", false},
		{"content_filter", "incomplete", "content_filter", false},
		{"abort", "failed", "", false},
		{"error", "failed", "", false},
		{"end_of_story", "completed", "", true},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			var told []string
			opts := testStreamOptions()
			opts.UnknownFinish = func(r string) { told = append(told, r) }
			s := NewStream(opts)
			events := feedChunks(t, s, []string{
				`{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"delta":{},"finish_reason":"` + tc.reason + `"}]}`,
			})
			if err := validateEvents(events); err != nil {
				t.Fatalf("%v\n%s", err, dumpEvents(events))
			}
			resp := gjson.ParseBytes(events[len(events)-1].Data).Get("response")
			if resp.Get("status").Str != tc.status || resp.Get("incomplete_details.reason").Str != tc.incomplete {
				t.Errorf("terminal response %s", resp.Raw)
			}
			if (len(told) == 1) != tc.unknown || tc.unknown && told[0] != tc.reason {
				t.Errorf("UnknownFinish calls %q", told)
			}
			cut := tc.status == "failed"
			if cut {
				msg := resp.Get("error.message").Str
				if resp.Get("error.code").Str != "server_error" || !strings.HasPrefix(msg, "stream_incomplete: ") || !strings.Contains(msg, `"`+tc.reason+`"`) ||
					resp.Get("output.0.status").Str != "incomplete" {
					t.Errorf("cut short: %s", resp.Raw)
				}
				// A server error the gateway judges as it judges a cut.
				if e := s.UpstreamError(); e == nil || e.Status != http.StatusBadGateway || e.Code != apierr.CodeStreamIncomplete {
					t.Errorf("UpstreamError %+v", e)
				}
			}

			body := `{"choices":[{"index":0,"finish_reason":"` + tc.reason + `","message":{"role":"assistant","content":"x"}}]}`
			out, _, aerr, upstream := FromChatResponse([]byte(body), testStreamOptions())
			switch {
			case cut && (aerr == nil || !upstream || aerr.Status != http.StatusBadGateway || aerr.Code != apierr.CodeStreamIncomplete):
				t.Errorf("JSON cut short: %+v %v", aerr, upstream)
			case !cut && (aerr != nil || gjson.GetBytes(out, "status").Str != tc.status):
				t.Errorf("JSON: %s %+v", out, aerr)
			}
		})
	}
}

// TestResponseEchoesRequestFields checks the request fields a Response
// repeats (the spec's Response), and their defaults.
func TestResponseEchoesRequestFields(t *testing.T) {
	for _, tc := range []struct {
		name, request string
		want          map[string]string // path: raw JSON ("" absent)
	}{
		{"set", `{"model":"m","input":"x","user":"u1","safety_identifier":"s1","prompt_cache_key":"k1","service_tier":"flex","max_tool_calls":3,"top_logprobs":0}`,
			map[string]string{"user": `"u1"`, "safety_identifier": `"s1"`, "prompt_cache_key": `"k1"`, "service_tier": `"flex"`, "max_tool_calls": `3`, "top_logprobs": `0`}},
		{"defaults", `{"model":"m","input":"x"}`,
			map[string]string{"user": ``, "safety_identifier": `null`, "prompt_cache_key": `null`, "service_tier": `"default"`, "max_tool_calls": `null`, "top_logprobs": `null`}},
		{"auto tier is the default one", `{"model":"m","input":"x","service_tier":"auto"}`, map[string]string{"service_tier": `"default"`}},
		{"fast tier is reported as priority", `{"model":"m","input":"x","service_tier":"fast"}`, map[string]string{"service_tier": `"priority"`}},
		{"a tier the spec does not have is the default one", `{"model":"m","input":"x","service_tier":"bogus"}`, map[string]string{"service_tier": `"default"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, info, aerr := ToChat([]byte(tc.request), nil, RequestOptions{})
			if aerr != nil {
				t.Fatal(aerr)
			}
			opts := testStreamOptions()
			opts.Request = info.Echo
			s := NewStream(opts)
			events := append(s.Start(), s.Finish()...)
			json, _, _, _ := FromChatResponse([]byte(`{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"y"}}]}`), opts)
			for where, r := range map[string]gjson.Result{
				"created":   gjson.ParseBytes(events[0].Data).Get("response"),
				"completed": gjson.ParseBytes(events[len(events)-1].Data).Get("response"),
				"JSON":      gjson.ParseBytes(json),
				"EchoOf":    gjson.ParseBytes(append(AppendEcho([]byte(`{"_":0`), EchoOf([]byte(tc.request))), '}')),
			} {
				for path, want := range tc.want {
					if got := r.Get(path).Raw; got != want {
						t.Errorf("%s: %s = %s, want %s", where, path, got, want)
					}
				}
			}
		})
	}
}

// TestToChatMetadataLimits checks OpenAI's metadata rules, answered with
// its 400s before anything is sent.
func TestToChatMetadataLimits(t *testing.T) {
	many := make([]string, 17)
	for i := range many {
		many[i] = `"k` + string(rune('a'+i)) + `":"v"`
	}
	for _, tc := range []struct {
		name, metadata, code, param string
	}{
		{"16 pairs", `{` + strings.Join(many[:16], ",") + `}`, "", ""},
		{"a pair at the limits", `{"` + strings.Repeat("k", 64) + `":"` + strings.Repeat("é", 512) + `"}`, "", ""},
		{"17 pairs", `{` + strings.Join(many, ",") + `}`, apierr.CodeInvalidValue, "metadata"},
		{"long key", `{"` + strings.Repeat("k", 65) + `":"v"}`, apierr.CodeInvalidValue, "metadata"},
		{"long value", `{"a":"` + strings.Repeat("v", 513) + `"}`, apierr.CodeInvalidValue, "metadata.a"},
		{"number value", `{"a":1}`, apierr.CodeInvalidType, "metadata.a"},
		{"object value", `{"b":{"x":true}}`, apierr.CodeInvalidType, "metadata.b"},
		{"not an object", `"str"`, apierr.CodeInvalidType, "metadata"},
		{"null", `null`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, aerr := ToChat([]byte(`{"model":"m","input":"x","metadata":`+tc.metadata+`}`), nil, RequestOptions{})
			switch {
			case tc.code == "" && aerr != nil:
				t.Errorf("refused: %+v", aerr)
			case tc.code != "" && (aerr == nil || aerr.Status != http.StatusBadRequest || aerr.Code != tc.code || aerr.Param != tc.param):
				t.Errorf("got %+v, want %s on %s", aerr, tc.code, tc.param)
			}
		})
	}
}

// TestToChatEmptyCallArguments checks that a function_call item sent back
// with empty arguments reaches the Chat upstream as an empty JSON object.
func TestToChatEmptyCallArguments(t *testing.T) {
	for _, args := range []string{`""`, `" "`} {
		body, _, aerr := ToChat([]byte(`{"model":"m","input":[{"type":"function_call","call_id":"c1","name":"g","arguments":`+args+`},
			{"type":"function_call_output","call_id":"c1","output":"ok"}]}`), nil, RequestOptions{})
		if aerr != nil {
			t.Fatal(aerr)
		}
		if got := gjson.GetBytes(body, "messages.0.tool_calls.0.function.arguments").Raw; got != `"{}"` {
			t.Errorf("arguments %s: sent as %s", args, got)
		}
	}
}

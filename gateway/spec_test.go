package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// specSubset is testdata/openapi-response-subset.json: the schemas of
// OpenAI's OpenAPI spec that Sluice-written terminal events must satisfy,
// extracted by testdata/openapi-subset.py (commit and version inside).
type specSubset struct {
	Commit  string                     `json:"_commit"`
	Version string                     `json:"_version"`
	Schemas map[string]json.RawMessage `json:"schemas"`
}

func loadSpec(t testing.TB) *specSubset {
	t.Helper()
	b, err := os.ReadFile("testdata/openapi-response-subset.json")
	if err != nil {
		t.Fatal(err)
	}
	var s specSubset
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Commit == "" || s.Schemas["Response"] == nil || s.Schemas["ResponseFailedEvent"] == nil {
		t.Fatal("the spec subset lacks its commit or the Response schemas")
	}
	return &s
}

// schema is the subset of JSON Schema the extracted spec uses.
type schema struct {
	Ref        string             `json:"$ref"`
	Type       json.RawMessage    `json:"type"` // a name or a list of names
	Enum       []any              `json:"enum"`
	Required   []string           `json:"required"`
	Properties map[string]*schema `json:"properties"`
	Items      *schema            `json:"items"`
	AnyOf      []*schema          `json:"anyOf"`
	OneOf      []*schema          `json:"oneOf"`
	Disc       *struct {
		PropertyName string `json:"propertyName"`
	} `json:"discriminator"`
	Minimum   *float64 `json:"minimum"`
	Maximum   *float64 `json:"maximum"`
	MaxLength *int     `json:"maxLength"`
}

// empty: a schema left out of the subset (anything validates).
func (s *schema) empty() bool {
	return s.Ref == "" && s.Type == nil && s.Enum == nil && s.Required == nil && s.Properties == nil && s.Items == nil &&
		s.AnyOf == nil && s.OneOf == nil
}

// violation is one place a document breaks the schema.
type violation struct {
	path, kind, detail string
}

func (v violation) String() string { return v.path + ": " + v.kind + " " + v.detail }

type validator struct {
	spec  *specSubset
	cache map[string]*schema
}

func (v *validator) ref(name string) *schema {
	if s, ok := v.cache[name]; ok {
		return s
	}
	var s schema
	raw := v.spec.Schemas[strings.TrimPrefix(name, "#/")]
	if raw == nil {
		panic("no schema " + name)
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		panic(err)
	}
	v.cache[name] = &s
	return &s
}

func (v *validator) resolve(s *schema) *schema {
	for s.Ref != "" {
		s = v.ref(s.Ref)
	}
	return s
}

func jsonType(x any) string {
	switch n := x.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case json.Number:
		if f, err := n.Float64(); err == nil && f == math.Trunc(f) && !strings.ContainsAny(n.String(), ".eE") {
			return "integer"
		}
		return "number"
	}
	return "?"
}

func typeMatches(want, got string) bool {
	return want == got || want == "number" && got == "integer"
}

// validate checks x against s. oneOf is checked like anyOf (a branch left
// out of the subset accepts only values no extracted branch can take: it
// cannot be told apart); a discriminator picks its branch by the value's
// "type".
func (v *validator) validate(s *schema, x any, path string) []violation {
	s = v.resolve(s)
	if s.empty() {
		return nil
	}
	var out []violation
	if s.Type != nil {
		var names []string
		if json.Unmarshal(s.Type, &names) != nil {
			var one string
			_ = json.Unmarshal(s.Type, &one)
			names = []string{one}
		}
		ok := false
		for _, n := range names {
			ok = ok || typeMatches(n, jsonType(x))
		}
		if !ok {
			return []violation{{path, "type", fmt.Sprintf("%s, want %v", jsonType(x), names)}}
		}
	}
	if s.Enum != nil {
		ok := false
		for _, e := range s.Enum {
			ok = ok || fmt.Sprint(e) == fmt.Sprint(x)
		}
		if !ok {
			out = append(out, violation{path, "enum", fmt.Sprintf("%v not in %v", x, s.Enum)})
		}
	}
	if n, ok := x.(json.Number); ok {
		f, _ := n.Float64()
		if s.Minimum != nil && f < *s.Minimum || s.Maximum != nil && f > *s.Maximum {
			out = append(out, violation{path, "range", n.String()})
		}
	}
	if str, ok := x.(string); ok && s.MaxLength != nil && len([]rune(str)) > *s.MaxLength {
		out = append(out, violation{path, "maxLength", str})
	}
	if obj, ok := x.(map[string]any); ok {
		for _, r := range s.Required {
			if _, ok := obj[r]; !ok {
				out = append(out, violation{path + "." + r, "required", "missing"})
			}
		}
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p := s.Properties[k]; p != nil {
				out = append(out, v.validate(p, obj[k], path+"."+k)...)
			}
		}
	}
	if arr, ok := x.([]any); ok && s.Items != nil {
		for i, e := range arr {
			out = append(out, v.validate(s.Items, e, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	for _, alts := range [][]*schema{s.AnyOf, s.OneOf} {
		if alts != nil {
			out = append(out, v.alternatives(s, alts, x, path)...)
		}
	}
	return out
}

func (v *validator) alternatives(s *schema, alts []*schema, x any, path string) []violation {
	if s.Disc != nil {
		if obj, ok := x.(map[string]any); ok {
			tag := fmt.Sprint(obj[s.Disc.PropertyName])
			opaque, matched := false, false
			var best []violation
			for _, a := range alts {
				r := v.resolve(a)
				if r.empty() {
					opaque = true
					continue
				}
				// Several branches may share a tag (ItemResource's input
				// and output messages): the value must fit one of them.
				if p := r.Properties[s.Disc.PropertyName]; p != nil && len(p.Enum) == 1 && fmt.Sprint(p.Enum[0]) == tag {
					errs := v.validate(r, x, path)
					if len(errs) == 0 {
						return nil
					}
					if !matched || len(errs) < len(best) {
						best = errs
					}
					matched = true
				}
			}
			if matched {
				return best
			}
			if !opaque {
				return []violation{{path, "discriminator", tag + " matches no branch"}}
			}
			return nil
		}
	}
	var best []violation
	opaque := false
	for _, a := range alts {
		if v.resolve(a).empty() {
			opaque = true
			continue
		}
		errs := v.validate(a, x, path)
		if len(errs) == 0 {
			return nil
		}
		if best == nil || len(errs) < len(best) {
			best = errs
		}
	}
	if opaque && jsonType(x) == "object" {
		return nil // an object some left-out branch may describe
	}
	return best
}

// validateTerminal validates a terminal event against its spec schema. An
// error.code outside the spec's enum is reported separately: the gateway
// keeps the upstream codes clients act on (translate.ResponseErrorCode).
func validateTerminal(t testing.TB, spec *specSubset, data []byte) (violations, codeViolations []violation) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var x map[string]any
	if err := dec.Decode(&x); err != nil {
		t.Fatalf("terminal event is not JSON: %v: %s", err, data)
	}
	name := map[string]string{"response.failed": "ResponseFailedEvent", "response.incomplete": "ResponseIncompleteEvent",
		"response.completed": "ResponseCompletedEvent"}[fmt.Sprint(x["type"])]
	if name == "" {
		t.Fatalf("not a terminal event: %s", data)
	}
	v := &validator{spec: spec, cache: map[string]*schema{}}
	for _, e := range v.validate(&schema{Ref: "#/" + name}, x, "$") {
		if e.path == "$.response.error.code" && e.kind == "enum" {
			codeViolations = append(codeViolations, e)
			continue
		}
		violations = append(violations, e)
	}
	return violations, codeViolations
}

// TestValidatorCatchesMistakes: the validator itself finds what it must.
func TestValidatorCatchesMistakes(t *testing.T) {
	spec := loadSpec(t)
	good := `{"type":"response.failed","sequence_number":3,"response":{"id":"resp_1","object":"response","created_at":1,"status":"failed",
		"error":{"code":"server_error","message":"x"},"incomplete_details":null,"instructions":null,"model":"m","tools":[],"output":[
		{"id":"msg_1","type":"message","role":"assistant","status":"incomplete","content":[{"type":"output_text","text":"hi","annotations":[],"logprobs":[]}]}],
		"parallel_tool_calls":true,"metadata":{},"tool_choice":"auto","temperature":1,"top_p":1}}`
	if v, c := validateTerminal(t, spec, []byte(good)); len(v)+len(c) != 0 {
		t.Fatalf("a valid event: %v %v", v, c)
	}
	for _, m := range []struct{ from, to, want string }{
		{`"output":[`, `"output":{},"x":[`, "$.response.output: type"},
		{`"tools":[]`, `"toolz":[]`, "$.response.tools: required"},
		{`"status":"incomplete"`, `"status":"cut"`, "$.response.output[0].status: enum"},
		{`"tool_choice":"auto"`, `"tool_choice":7`, "$.response.tool_choice: type"},
		{`"sequence_number":3`, `"sequence_number":"3"`, "$.sequence_number: type"},
		{`"code":"server_error"`, `"code":"stream_incomplete"`, "$.response.error.code: enum"},
		{`"annotations":[],"logprobs":[]`, `"annotations":[]`, "$.response.output[0].content[0].logprobs: required"},
		{`"type":"message","role":"assistant"`, `"type":"message","role":"user"`, "$.response.output[0].role: enum"},
	} {
		doc := strings.Replace(good, m.from, m.to, 1)
		v, c := validateTerminal(t, spec, []byte(doc))
		if all := fmt.Sprint(append(v, c...)); !strings.Contains(all, m.want) {
			t.Errorf("%s → %s: validator said %s", m.from, m.to, all)
		}
	}
}

// TestGatewayTerminalEventsMatchTheSpec drives every way the gateway writes
// a Responses terminal event itself and validates each against the
// Response/ResponseFailedEvent schemas of OpenAI's OpenAPI spec: every
// required field, the types, the enums (error.code included: the gateway's
// own codes travel as server_error), and output carrying what was streamed.
func TestGatewayTerminalEventsMatchTheSpec(t *testing.T) {
	spec := loadSpec(t)
	t.Logf("spec %s (version %s)", spec.Commit, spec.Version)
	chatTools := `{"model":"gpt-fake-1","input":"hi","stream":true,"tools":[{"type":"function","name":"f"}],"instructions":"be brief"}`
	cases := []struct {
		name     string
		script   upstreamtest.Script
		opts     gateway.Options
		protocol string
		body     string
		drain    bool
		code     string // the wire code
		output   string // text of output[0] ("" → no output)
		upstream bool   // an upstream code outside the spec's enum passes through
	}{
		{name: "cut", script: upstreamtest.CutAfter(6), code: "server_error", output: "Hello from"},
		{name: "idle", script: upstreamtest.HangAfter(5), opts: gateway.Options{IdleTimeout: 200 * time.Millisecond}, code: "server_error", output: "Hello"},
		{name: "garbage run", script: garbageRun(3), code: "server_error", output: "Hello"},
		{name: "garbage, fail mode", script: upstreamtest.Garbage(), opts: gateway.Options{MalformedEvents: "fail"}, code: "server_error", output: "Hello"},
		{name: "oversize", script: upstreamtest.Oversize(8192), opts: gateway.Options{MaxEventBytes: 4096}, code: "server_error", output: "Hello"},
		{name: "drain", script: upstreamtest.HangAfter(6), opts: gateway.Options{DrainGrace: 100 * time.Millisecond}, drain: true, code: "server_error", output: "Hello from"},
		{name: "recovered", script: afterContent(upstreamtest.PreviousNotFound(upstreamtest.ShapeErrorEvent)), code: "server_error"},
		{name: "upstream error field", script: upstreamtest.ErrorField([]byte(`{"code":"server_error","message":"boom","type":"server_error"}`), 6), code: "server_error", output: "Hello from"},
		{name: "upstream error event", script: afterContent(upstreamtest.QuotaEvent(upstreamtest.ShapeErrorEvent)), code: "usage_limit_reached", upstream: true},
		{name: "upstream invalid_value", script: afterContent(upstreamtest.Failure(upstreamtest.ShapeErrorEvent, 400,
			upstreamtest.ErrorBody("bad", "invalid_request_error", "invalid_value", "x"))), code: "invalid_prompt"},
		{name: "no upstream left", script: upstreamtest.Status5xx(503), code: "server_error"},
		{name: "chat upstream cut", script: upstreamtest.CutAfter(3), protocol: "chat", body: chatTools, code: "server_error", output: "Hello from"},
		{name: "chat upstream [DONE] without finish", protocol: "chat", body: chatTools, code: "server_error", output: "Hello from",
			script: upstreamtest.Script{ChatFrames: append(upstreamtest.CutAfter(3).ChatFrames, upstreamtest.SSEData([]byte("[DONE]")))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			hc := harnessConfig{opts: tc.opts}
			if tc.protocol != "" {
				hc.protocol = map[string]string{"A": tc.protocol}
			}
			h := newHarness(t, hc)
			h.ups["A"].Enqueue(tc.script)
			body := tc.body
			if body == "" {
				body = `{"model":"gpt-fake-1","input":"hi","stream":true,"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"metadata":{"k":"v"}}`
			}
			var evs []eventLike
			if tc.drain {
				var wg sync.WaitGroup
				wg.Add(1)
				go func() { defer wg.Done(); _, evs = h.responsesStream(body) }()
				if err := h.ups["A"].WaitRequests(context.Background(), 1); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = h.gw.Shutdown(ctx)
				wg.Wait()
			} else {
				_, evs = h.responsesStream(body)
			}
			last := assertOneTerminal(t, evs)
			v, c := validateTerminal(t, spec, last.data)
			if len(v) > 0 {
				t.Fatalf("terminal event breaks the spec:\n%v\n%s", v, last.data)
			}
			if len(c) > 0 && !tc.upstream {
				t.Fatalf("error.code outside the spec's enum: %v\n%s", c, last.data)
			}
			var ev struct {
				SequenceNumber int64 `json:"sequence_number"`
				Response       struct {
					ID     string
					Status string
					Error  struct{ Code, Message string }
					Output []struct {
						Type, Status string
						Content      []struct{ Text string }
					}
					Tools []map[string]any
				}
			}
			if err := json.Unmarshal(last.data, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Response.Status != "failed" || ev.Response.Error.Code != tc.code || ev.SequenceNumber != int64(len(evs)-1) {
				t.Fatalf("terminal: status %s code %s seq %d of %d events: %s", ev.Response.Status, ev.Response.Error.Code, ev.SequenceNumber, len(evs), last.data)
			}
			for i, e := range evs {
				var s struct {
					SequenceNumber *int64 `json:"sequence_number"`
				}
				_ = json.Unmarshal(e.data, &s)
				if s.SequenceNumber == nil || *s.SequenceNumber != int64(i) {
					t.Fatalf("event %d (%s) has sequence_number %v", i, e.typ, s.SequenceNumber)
				}
			}
			if tc.output != "" {
				if len(ev.Response.Output) == 0 || len(ev.Response.Output[0].Content) == 0 {
					t.Fatalf("the output already streamed is missing: %s", last.data)
				}
				o := ev.Response.Output[0]
				if o.Type != "message" || o.Status != "incomplete" || o.Content[0].Text != tc.output {
					t.Fatalf("output[0] = %+v, want the incomplete message %q", o, tc.output)
				}
			}
			for _, tool := range ev.Response.Tools {
				if _, ok := tool["strict"]; tool["type"] == "function" && !ok {
					t.Fatalf("echoed function tool without strict: %v", tool)
				}
			}
		})
	}
}

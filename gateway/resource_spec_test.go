package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// validateAs validates a document the gateway wrote against the spec
// schema name, reporting every violation but those under the paths in
// upstreams (what a Responses upstream sent, passed on verbatim: the fake
// upstream's usage lacks input_tokens_details.cache_write_tokens).
func validateAs(t testing.TB, spec *specSubset, name string, data []byte, upstreams ...string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var x any
	if err := dec.Decode(&x); err != nil {
		t.Fatalf("%s: not JSON: %v: %s", name, err, data)
	}
	v := &validator{spec: spec, cache: map[string]*schema{}}
	var errs []violation
next:
	for _, e := range v.validate(&schema{Ref: "#/" + name}, x, "$") {
		for _, p := range upstreams {
			if strings.HasPrefix(e.path, p) {
				t.Logf("the upstream's own, passed on: %v", e)
				continue next
			}
		}
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		t.Fatalf("%s breaks the spec:\n%v\n%s", name, errs, data)
	}
}

// waitFor GETs path until ok holds for its body (or the test gives up).
func (h *harness) waitFor(path string, ok func(body []byte) bool) []byte {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body := h.call(http.MethodGet, path, "sk-client-secret")
		if status == http.StatusOK && ok(body) {
			return body
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("GET %s never got there: %d %s", path, status, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestResourceAnswersMatchTheSpec validates what the responses resource API
// answers against OpenAI's OpenAPI spec, for a Responses and a Chat
// upstream: GET of a completed response (streamed and JSON), of a
// background one in progress and cancelled, the cancel answer, the
// cancelled stream's terminal response.failed, and input_items.
func TestResourceAnswersMatchTheSpec(t *testing.T) {
	spec := loadSpec(t)
	for _, protocol := range []string{"responses", "chat"} {
		t.Run(protocol, func(t *testing.T) {
			h := newHarness(t, harnessConfig{opts: resumeOpts(), protocol: map[string]string{"A": protocol}})
			var upstreamOwned []string
			if protocol == "responses" {
				upstreamOwned = []string{"$.usage."}
			}
			const extras = `"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"metadata":{"k":"v"},"instructions":"be brief"`

			// Completed, streamed.
			_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true,`+extras+`}`)
			id := gjson.GetBytes(evs[0].Data, "response.id").Str
			status, body := h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret")
			if status != http.StatusOK || gjson.GetBytes(body, "status").Str != "completed" {
				t.Fatalf("GET of a completed stream: %d %s", status, body)
			}
			validateAs(t, spec, "Response", body, upstreamOwned...)

			// Completed, answered as JSON.
			resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi",`+extras+`}`)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			status, body = h.call(http.MethodGet, "/v1/responses/"+gjson.GetBytes(b, "id").Str, "sk-client-secret")
			if status != http.StatusOK || gjson.GetBytes(body, "status").Str != "completed" {
				t.Fatalf("GET of a JSON answer: %d %s", status, body)
			}
			validateAs(t, spec, "Response", body, upstreamOwned...)

			// Background: in progress (the upstream stalls after four
			// deltas), then cancelled.
			h.ups["A"].Enqueue(upstreamtest.Answer(resumeText, 12).StallAfterDeltas(4))
			resp = h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true,`+extras+`}`)
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || gjson.GetBytes(b, "status").Str != "in_progress" {
				t.Fatalf("background create: %d %s", resp.StatusCode, b)
			}
			validateAs(t, spec, "Response", b, upstreamOwned...)
			id = gjson.GetBytes(b, "id").Str
			body = h.waitFor("/v1/responses/"+id, func(body []byte) bool {
				return strings.HasPrefix(gjson.GetBytes(body, "output.0.content.0.text").Str, "one two three four")
			})
			if gjson.GetBytes(body, "status").Str != "in_progress" || gjson.GetBytes(body, "background").Type != gjson.True {
				t.Fatalf("GET of a stalled background response: %s", body)
			}
			validateAs(t, spec, "Response", body, upstreamOwned...)
			status, body = h.call(http.MethodPost, "/v1/responses/"+id+"/cancel", "sk-client-secret")
			if status != http.StatusOK || gjson.GetBytes(body, "status").Str != "cancelled" {
				t.Fatalf("cancel: %d %s", status, body)
			}
			validateAs(t, spec, "Response", body, upstreamOwned...)
			status, body = h.call(http.MethodGet, "/v1/responses/"+id, "sk-client-secret")
			if status != http.StatusOK || gjson.GetBytes(body, "status").Str != "cancelled" {
				t.Fatalf("GET of a cancelled response: %d %s", status, body)
			}
			validateAs(t, spec, "Response", body, upstreamOwned...)
			_, all, _ := h.resume("sk-client-secret", id, -1)
			checkResponsesEvents(t, all) // numbered without a gap, one terminal last
			last := all[len(all)-1]
			if gjson.GetBytes(last, "type").Str != "response.failed" || gjson.GetBytes(last, "response.status").Str != "cancelled" {
				t.Fatalf("a cancelled stream ends with %s", last)
			}
			if v, c := validateTerminal(t, spec, last); len(v)+len(c) > 0 {
				t.Fatalf("the cancelled stream's terminal event breaks the spec:\n%v %v\n%s", v, c, last)
			}

			// input_items of a multi-turn input: every kind of item a
			// client sends, with and without ids, both orders and a page.
			input := `[{"role":"developer","content":"be brief"},
				{"role":"user","content":"what is the weather?"},
				{"type":"message","role":"user","content":[{"type":"input_text","text":"in Paris"}]},
				{"role":"assistant","content":"Let me look."},
				{"type":"message","role":"assistant","id":"msg_prev","status":"completed","content":[{"type":"output_text","text":"Looking.","annotations":[]}]},
				{"type":"function_call","call_id":"call_1","name":"f","arguments":"{}"},
				{"type":"function_call_output","call_id":"call_1","output":"sunny"},
				{"role":"user","content":"thanks"}]`
			resp = h.post("/v1/responses", `{"model":"gpt-fake-1","input":`+input+`,`+extras+`}`)
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			id = gjson.GetBytes(b, "id").Str
			if resp.StatusCode != http.StatusOK || id == "" {
				t.Fatalf("create: %d %s", resp.StatusCode, b)
			}
			for _, q := range []string{"", "?order=asc", "?limit=3", "?order=asc&limit=2&after=" + itemID(t, h, id, 1)} {
				status, body := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items"+q, "sk-client-secret")
				if status != http.StatusOK || gjson.GetBytes(body, "data.#").Int() == 0 {
					t.Fatalf("input_items%s: %d %s", q, status, body)
				}
				validateAs(t, spec, "ResponseItemList", body)
			}
			_, body = h.call(http.MethodGet, "/v1/responses/"+id+"/input_items?order=asc", "sk-client-secret")
			if n := gjson.GetBytes(body, "data.#").Int(); n != 8 || gjson.GetBytes(body, "data.3.content.0.text").Str != "Let me look." ||
				gjson.GetBytes(body, "data.3.content.0.type").Str != "output_text" || gjson.GetBytes(body, "data.4.id").Str != "msg_prev" ||
				gjson.GetBytes(body, "data.5.status").Str != "completed" || gjson.GetBytes(body, "data.6.output").Str != "sunny" {
				t.Fatalf("input_items: %s", body)
			}

			// DELETE: the spec gives no schema, only its example
			// {"id":…,"object":"response","deleted":true}.
			status, body = h.call(http.MethodDelete, "/v1/responses/"+id, "sk-client-secret")
			var del map[string]any
			if err := json.Unmarshal(body, &del); status != http.StatusOK || err != nil || len(del) != 3 ||
				del["id"] != id || del["object"] != "response" || del["deleted"] != true {
				t.Fatalf("DELETE: %d %s", status, body)
			}
		})
	}
}

// itemID is the id of the input item at index i (oldest first).
func itemID(t *testing.T, h *harness, id string, i int) string {
	t.Helper()
	_, body := h.call(http.MethodGet, "/v1/responses/"+id+"/input_items?order=asc&limit=100", "sk-client-secret")
	s := gjson.GetBytes(body, "data."+itoa(int64(i))+".id").Str
	if s == "" {
		t.Fatalf("no input item %d: %s", i, body)
	}
	return s
}

// TestResumeErrorEventMatchesTheSpec: a resume that cannot be followed to
// its terminal event (the stream outgrew its log) ends with the spec's
// error event.
func TestResumeErrorEventMatchesTheSpec(t *testing.T) {
	spec := loadSpec(t)
	opts := resumeOpts()
	opts.Resume.MaxBytes = 2048
	h := newHarness(t, harnessConfig{opts: opts})
	h.ups["A"].Enqueue(upstreamtest.Answer(strings.Repeat("long text ", 100), 20))
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	if typ := eventType(evs[len(evs)-1]); typ != "response.completed" {
		t.Fatalf("the stream itself ended with %s", typ)
	}
	id := gjson.GetBytes(evs[0].Data, "response.id").Str
	status, rest, body := h.resume("sk-client-secret", id, 3)
	if status != http.StatusOK || len(rest) == 0 {
		t.Fatalf("resume: %d %s", status, body)
	}
	last := rest[len(rest)-1]
	if gjson.GetBytes(last, "type").Str != "error" || gjson.GetBytes(last, "sequence_number").Int() != 4 {
		t.Fatalf("a resume of a dropped log ends with %s", last)
	}
	validateAs(t, spec, "ResponseErrorEvent", last)
}

// TestItemListValidatorCatchesMistakes: an input message and an output
// message share the tag "message"; a message must fit one of them.
func TestItemListValidatorCatchesMistakes(t *testing.T) {
	spec := loadSpec(t)
	good := `{"object":"list","has_more":false,"first_id":"msg_1","last_id":"msg_2","data":[
		{"id":"msg_1","type":"message","role":"user","status":"completed","content":[{"type":"input_text","text":"hi"}]},
		{"id":"msg_2","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hello","annotations":[],"logprobs":[]}]}]}`
	check := func(doc string) string {
		var x any
		dec := json.NewDecoder(strings.NewReader(doc))
		dec.UseNumber()
		if err := dec.Decode(&x); err != nil {
			t.Fatal(err)
		}
		v := &validator{spec: spec, cache: map[string]*schema{}}
		return fmt.Sprint(v.validate(&schema{Ref: "#/ResponseItemList"}, x, "$"))
	}
	if got := check(good); got != "[]" {
		t.Fatalf("a valid list: %s", got)
	}
	for _, m := range []struct{ from, to, want string }{
		{`"role":"assistant"`, `"role":"tool"`, "$.data[1].role: enum"},
		{`"role":"user"`, `"role":"assistant"`, "$.data[0]"},
		{`"annotations":[],"logprobs":[]`, `"annotations":[]`, "$.data[1].content[0].logprobs: required"},
		{`"last_id":"msg_2"`, `"last_id":null`, "$.last_id: type"},
	} {
		if got := check(strings.Replace(good, m.from, m.to, 1)); !strings.Contains(got, m.want) {
			t.Errorf("%s → %s: validator said %s", m.from, m.to, got)
		}
	}
}

// TestResumeDataOnlyUpstream: an upstream that sends no SSE event lines
// (the event named by its type only) is resumed with the right event
// names: the log keeps names of its own, not views of the upstream
// reader's buffer.
func TestResumeDataOnlyUpstream(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: resumeOpts()})
	var frames []upstreamtest.Frame
	for _, e := range upstreamtest.ResponsesEvents(upstreamtest.PlaceholderID, upstreamtest.PlaceholderModel, resumeText, 12) {
		frames = append(frames, upstreamtest.SSEData(e))
	}
	h.ups["A"].Enqueue(upstreamtest.Script{Frames: frames})
	_, evs := h.streamEvents("/v1/responses", `{"model":"gpt-fake-1","input":"hi","stream":true}`)
	id := gjson.GetBytes(evs[0].Data, "response.id").Str
	req, _ := http.NewRequest(http.MethodGet, h.url+"/v1/responses/"+id+"?stream=true", nil)
	req.Header.Set("Authorization", "Bearer sk-client-secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := sse.NewReader(resp.Body, 1<<20)
	var got [][]byte
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		if typ := gjson.GetBytes(ev.Data, "type").Str; ev.Name != typ {
			t.Fatalf("resumed event %d is named %q, its type is %q", len(got), ev.Name, typ)
		}
		got = append(got, bytes.Clone(ev.Data))
	}
	if o := checkResponsesEvents(t, got); o.text != resumeText || len(got) != len(evs) {
		t.Fatalf("resumed %d of %d events, text %q", len(got), len(evs), o.text)
	}
}

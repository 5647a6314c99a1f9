package sent_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/sent"
)

// TestResponseIDShape: a response written on a stream's behalf (a failure
// before any upstream named one) gets the id resp_sluice_ and 24 lowercase
// hex digits, 96 random bits: a client that stores ids keeps one shape, and
// two failures never share an id.
func TestResponseIDShape(t *testing.T) {
	shape := regexp.MustCompile(`^resp_sluice_[0-9a-f]{24}$`)
	a, b := sent.NewResponseID(), sent.NewResponseID()
	if !shape.MatchString(a) || !shape.MatchString(b) || a == b {
		t.Fatalf("NewResponseID(): %q and %q, want two different ids resp_sluice_ and 24 hex digits", a, b)
	}
}

// TestTrackKeepsOutputValid: an event whose item or part is not a JSON
// object (an upstream's malformed output_item.done, content_part.added)
// changes nothing, so the Response rendered afterwards is still valid JSON
// and shows the item as it was streamed, closed as incomplete.
func TestTrackKeepsOutputValid(t *testing.T) {
	var o sent.Output
	for _, ev := range []string{
		`{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","status":"in_progress","content":[]}}`,
		`{"type":"response.content_part.added","output_index":0,"content_index":0,"part":null}`,
		`{"type":"response.content_part.added","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`,
		`{"type":"response.output_text.delta","output_index":0,"content_index":0,"delta":"Hi"}`,
		`{"type":"response.output_item.done","output_index":0}`,
		`{"type":"response.output_item.added","output_index":1,"item":"not an item"}`,
	} {
		o.Track(fields(ev))
	}
	b := o.AppendResponse(nil, &sent.Response{ID: "resp_1", Status: "failed", Model: "m"})
	if !gjson.ValidBytes(b) {
		t.Fatalf("invalid Response: %s", b)
	}
	want := `[{"id":"msg_1","type":"message","role":"assistant","status":"incomplete","content":[{"type":"output_text","text":"Hi","annotations":[],"logprobs":[]}]}]`
	if got := gjson.GetBytes(b, "output").Raw; got != want {
		t.Fatalf("output %s\nwant %s", got, want)
	}
}

// TestAppendResponseKeepsFieldsOnce: a Response the upstream showed with a
// field twice gives it once (the first), so the rendered Response has no
// duplicate keys.
func TestAppendResponseKeepsFieldsOnce(t *testing.T) {
	var o sent.Output
	o.Track(fields(`{"type":"response.created","response":{"id":"resp_1","model":"a","model":"b","created_at":7}}`))
	b := string(o.AppendResponse(nil, &sent.Response{ID: "resp_1", Status: "failed", Model: "m"}))
	if strings.Count(b, `"model"`) != 1 || gjson.Get(b, "model").Str != "a" || gjson.Get(b, "created_at").Raw != "7" {
		t.Fatalf("Response %s: want one model, a, created_at 7", b)
	}
}

func fields(event string) *sent.Fields {
	var f sent.Fields
	f.Read(gjson.Parse(event))
	return &f
}

// TestPartCompleteAtItsTextDone: a part is complete once its readers got
// the done event of its text, before its part's done: response.output_text.done,
// refusal.done and reasoning_text.done for content parts,
// reasoning_summary_text.done for summary parts. A delta alone leaves it
// open.
func TestPartCompleteAtItsTextDone(t *testing.T) {
	at := `"item_id":"it_1","output_index":0`
	for _, c := range []struct{ part, done string }{
		{`{"type":"response.content_part.added",` + at + `,"content_index":0,"part":{"type":"output_text","text":""}}`,
			`{"type":"response.output_text.done",` + at + `,"content_index":0,"text":"Hi"}`},
		{`{"type":"response.content_part.added",` + at + `,"content_index":0,"part":{"type":"refusal","refusal":""}}`,
			`{"type":"response.refusal.done",` + at + `,"content_index":0,"refusal":"Hi"}`},
		{`{"type":"response.content_part.added",` + at + `,"content_index":0,"part":{"type":"reasoning_text","text":""}}`,
			`{"type":"response.reasoning_text.done",` + at + `,"content_index":0,"text":"Hi"}`},
		{`{"type":"response.reasoning_summary_part.added",` + at + `,"summary_index":0,"part":{"type":"summary_text","text":""}}`,
			`{"type":"response.reasoning_summary_text.done",` + at + `,"summary_index":0,"text":"Hi"}`},
	} {
		var o sent.Output
		o.Track(fields(`{"type":"response.output_item.added","output_index":0,"item":{"id":"it_1","type":"message"}}`))
		o.Track(fields(c.part))
		it := o.Items[0]
		p := append(it.Parts, it.Summary...)[0]
		if p.Complete() {
			t.Fatalf("%s: complete before any done event", gjson.Get(c.done, "type").Str)
		}
		o.Track(fields(c.done))
		if !p.Complete() || p.Done != nil {
			t.Fatalf("%s: Complete() %v, Done %s; want complete, the part itself not yet done", gjson.Get(c.done, "type").Str, p.Complete(), p.Done)
		}
	}
}

// TestFromUpstreamCompletesTheResponse: an upstream's terminal Response that
// lacks fields the spec requires is rendered with them (created_at, model,
// the request's echo), keeps every field it had (its status, error,
// incomplete_details and any other member), and shows the output sent.
func TestFromUpstreamCompletesTheResponse(t *testing.T) {
	var o sent.Output
	for _, ev := range []string{
		`{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","status":"in_progress","content":[]}}`,
		`{"type":"response.content_part.added","output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`,
		`{"type":"response.output_text.delta","output_index":0,"content_index":0,"delta":"Hi"}`,
	} {
		o.Track(fields(ev))
	}
	for _, tc := range []struct{ typ, upstream, status, kept string }{
		{"response.failed", `{"id":"x","status":"failed","output":[],"error":{"code":"server_error","message":"boom"},"service_tier":"flex"}`,
			"failed", "error.message"},
		{"response.incomplete", `{"id":"x","incomplete_details":{"reason":"max_output_tokens"},"service_tier":"flex"}`,
			"incomplete", "incomplete_details.reason"},
	} {
		r := sent.Response{ID: "resp_1", CreatedAt: 42, Model: "m"}
		up := gjson.Parse(tc.upstream)
		r.FromUpstream(tc.typ, up)
		got := gjson.ParseBytes(o.AppendResponse(nil, &r))
		if got.Get("id").Str != "resp_1" || got.Get("created_at").Int() != 42 || got.Get("model").Str != "m" ||
			got.Get("status").Str != tc.status || got.Get(tc.kept).Str != up.Get(tc.kept).Str ||
			got.Get("service_tier").Str != "flex" || !got.Get("tools").IsArray() || got.Get("output.0.content.0.text").Str != "Hi" {
			t.Fatalf("%s rendered %s", tc.typ, got.Raw)
		}
	}
}

// TestRefers: an event naming output the readers were never sent (an item
// not added, a part not added, a negative index) does not refer; lifecycle
// events, new items and parts, and events about no item do.
func TestRefers(t *testing.T) {
	var o sent.Output
	for _, ev := range []string{
		`{"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message"}}`,
		`{"type":"response.content_part.added","item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}}`,
	} {
		var f sent.Fields
		f.Read(gjson.Parse(ev))
		o.Track(&f)
	}
	cases := []struct {
		event string
		want  bool
	}{
		{`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"x"}`, true},
		{`{"type":"response.output_text.delta","item_id":"msg_zzz","output_index":0,"content_index":0,"delta":"x"}`, true}, // by index
		{`{"type":"response.output_text.delta","output_index":0,"delta":"x"}`, true},                                       // no content_index: as before
		{`{"type":"response.output_text.delta","item_id":"msg_zzz","output_index":5,"content_index":0,"delta":"x"}`, false},
		{`{"type":"response.output_text.delta","item_id":"msg_1","output_index":-1,"content_index":0,"delta":"x"}`, false},
		{`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":-3,"delta":"x"}`, false},
		{`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":1,"delta":"x"}`, false},
		{`{"type":"response.output_text.delta","item_id":"msg_1","output_index":"0","content_index":0,"delta":"x"}`, false},
		{`{"type":"response.output_text.delta","output_index":99999999999999999999,"content_index":0,"delta":"x"}`, false},
		{`{"type":"response.reasoning_summary_text.delta","item_id":"msg_1","output_index":0,"summary_index":0,"delta":"x"}`, true}, // shown no summary part: lax
		{`{"type":"response.reasoning_summary_text.delta","item_id":"msg_1","output_index":0,"summary_index":-1,"delta":"x"}`, false},
		{`{"type":"response.content_part.added","item_id":"msg_1","output_index":0,"content_index":1,"part":{"type":"output_text"}}`, true},
		{`{"type":"response.content_part.added","item_id":"msg_2","output_index":1,"content_index":0,"part":{"type":"output_text"}}`, false},
		{`{"type":"response.output_item.done","output_index":0,"item":{"id":"msg_1","type":"message"}}`, true},
		{`{"type":"response.output_item.done","output_index":3,"item":{"id":"msg_9","type":"message"}}`, false},
		{`{"type":"response.output_item.added","output_index":1,"item":{"id":"msg_2","type":"message"}}`, true},
		{`{"type":"response.completed","response":{}}`, true},
		{`{"type":"keepalive"}`, true},
	}
	for _, c := range cases {
		var f sent.Fields
		f.Read(gjson.Parse(c.event))
		if got := o.Refers(&f); got != c.want {
			t.Errorf("Refers(%s) = %v, want %v", c.event, got, c.want)
		}
	}
}

// TestUpstreamItemOf: an event numbered as its upstream numbered the items
// finds its item by id, else the latest the upstream put at its index
// (Item.Upstream), never one the readers were shown at that index.
func TestUpstreamItemOf(t *testing.T) {
	var o sent.Output
	for k, up := range []int64{2, 3, 3} { // the readers' 0, 1, 2
		id := []string{"a", "b", ""}[k]
		o.Track(fields(`{"type":"response.output_item.added","output_index":` + strconv.Itoa(k) + `,"item":{"id":"` + id + `","type":"message"}}`))
		o.Items[k].Upstream = up
	}
	for _, tc := range []struct {
		ev   string
		want int64 // the readers' index of the item found; -1: none
	}{
		{`{"type":"response.output_text.delta","output_index":2}`, 0},
		{`{"type":"response.output_text.delta","output_index":3}`, 2},
		{`{"type":"response.output_text.delta","output_index":3,"item_id":"b"}`, 1},
		{`{"type":"response.output_text.delta","output_index":0,"item_id":"a"}`, 0},
		{`{"type":"response.output_item.done","output_index":9,"item":{"id":"b"}}`, 1},
		{`{"type":"response.output_text.delta","output_index":0}`, -1},
		{`{"type":"response.output_text.delta","output_index":1,"item_id":"zz"}`, -1},
		{`{"type":"response.output_text.delta","output_index":"2"}`, -1},
	} {
		got := int64(-1)
		if it := o.UpstreamItemOf(fields(tc.ev)); it != nil {
			got = it.Index
		}
		if got != tc.want {
			t.Errorf("%s: item %d, want %d", tc.ev, got, tc.want)
		}
	}
}

package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/clientkey"
	"github.com/sluice-gw/sluice/store"
)

// crashedLogEvents are the events a gateway stored of a stream before it
// was killed: the opening events, then one delta per piece of text.
func crashedLogEvents(id string, background bool, deltas ...string) []store.StreamEvent {
	bg := ""
	if background {
		bg = `,"background":true`
	}
	resp := `{"id":"` + id + `","object":"response","created_at":1700000000,"status":"in_progress","model":"gpt-fake-1","output":[]` + bg + `}`
	evs := []store.StreamEvent{
		{Name: "response.created", Data: []byte(`{"type":"response.created","sequence_number":0,"response":` + resp + `}`)},
		{Name: "response.in_progress", Data: []byte(`{"type":"response.in_progress","sequence_number":1,"response":` + resp + `}`)},
		{Name: "response.output_item.added", Data: []byte(`{"type":"response.output_item.added","sequence_number":2,"output_index":0,` +
			`"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}}`)},
		{Name: "response.content_part.added", Data: []byte(`{"type":"response.content_part.added","sequence_number":3,"item_id":"msg_1",` +
			`"output_index":0,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}}`)},
	}
	for _, d := range deltas {
		seq := itoa(int64(len(evs)))
		evs = append(evs, store.StreamEvent{Seq: int64(len(evs)), Name: "response.output_text.delta", Data: []byte(
			`{"type":"response.output_text.delta","sequence_number":` + seq + `,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"` + d + `"}`)})
	}
	for i := range evs {
		evs[i].Seq = int64(i)
	}
	return evs
}

// crashedLogRecord is the "Response so far" record a running stream's
// gateway wrote (at most once a second), showing text as its output.
func crashedLogRecord(id string, background bool, text string) []byte {
	bg := ""
	if background {
		bg = `,"background":true`
	}
	return []byte(`{"id":"` + id + `","object":"response","created_at":1700000000,"status":"in_progress","error":null,"incomplete_details":null,` +
		`"output":[{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[{"type":"output_text","text":"` + text +
		`","annotations":[]}]}],"model":"gpt-fake-1"` + bg + `}`)
}

// TestAbandonedLogAnswersWhatItsEventsHold: after a crash, a stream's record
// (the Response so far, rewritten at most once a second) can be older than
// its events (flushed every 100 ms). GET and cancel of such a response
// report it failed with the output its stored events hold — the text the
// client already had and a resume replays — not the record's shorter one;
// a record that goes further than the events (a log that outgrew
// resume_max_bytes keeps only its record) is still answered as it is.
func TestAbandonedLogAnswersWhatItsEventsHold(t *testing.T) {
	const key = "sk-client-secret"
	owner := clientkey.Hash(http.Header{"Authorization": {"Bearer " + key}})
	for _, tc := range []struct {
		name       string
		background bool
		record     string   // the record's text
		deltas     []string // the stored events' text
		want       string   // the text GET (and cancel) show
		replayed   bool     // want is also what a resume replays
	}{
		{name: "stream, events past the record", record: "Hel", deltas: []string{"Hel", "lo ", "wor", "ld"}, want: "Hello world", replayed: true},
		{name: "background, events past the record", background: true, record: "Hel", deltas: []string{"Hel", "lo ", "wor", "ld"},
			want: "Hello world", replayed: true},
		{name: "record past the events", record: "Hello world", deltas: []string{"Hel"}, want: "Hello world"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			const id = "resp_crashed"
			if err := st.PutStreamLog(ctx, store.StreamLog{ResponseID: id, Owner: owner, Background: tc.background, Status: "in_progress",
				ExpiresAt: time.Now().Add(time.Hour), Response: crashedLogRecord(id, tc.background, tc.record)}); err != nil {
				t.Fatal(err)
			}
			if err := st.AppendStreamEvents(ctx, id, 0, crashedLogEvents(id, tc.background, tc.deltas...)); err != nil {
				t.Fatal(err)
			}
			opts := resumeOpts()
			opts.Resume.Store = st
			h := newHarness(t, harnessConfig{opts: opts})

			_, evs, _ := h.resume(key, id, -1)
			var replay strings.Builder
			for _, ev := range evs {
				replay.WriteString(gjson.GetBytes(ev, "delta").Str)
			}
			if last := evs[len(evs)-1]; gjson.GetBytes(last, "code").Str != "stream_incomplete" {
				t.Fatalf("the resume of an abandoned log ends with %s", last)
			}
			if tc.replayed && replay.String() != tc.want {
				t.Fatalf("the resume replays %q, want %q", replay.String(), tc.want)
			}

			status, got := h.call(http.MethodGet, "/v1/responses/"+id, key)
			checkAbandoned := func(what string, status int, got []byte) {
				t.Helper()
				if status != http.StatusOK || gjson.GetBytes(got, "status").Str != "failed" ||
					!strings.HasPrefix(gjson.GetBytes(got, "error.message").Str, "stream_incomplete: ") {
					t.Fatalf("%s: %d %s", what, status, got)
				}
				if text := gjson.GetBytes(got, "output.0.content.0.text").Str; text != tc.want {
					t.Fatalf("%s shows the text %q, want %q (replayed: %q): %s", what, text, tc.want, replay.String(), got)
				}
				if item := gjson.GetBytes(got, "output.0.status").Str; item != "incomplete" {
					t.Fatalf("%s shows the open item %q, want incomplete: %s", what, item, got)
				}
				if gjson.GetBytes(got, "model").Str != "gpt-fake-1" || gjson.GetBytes(got, "id").Str != id {
					t.Fatalf("%s lost the record's fields: %s", what, got)
				}
			}
			checkAbandoned("GET", status, got)
			if tc.background {
				status, got = h.call(http.MethodPost, "/v1/responses/"+id+"/cancel", key)
				checkAbandoned("cancel", status, got)
				if gjson.GetBytes(got, "background").Type != gjson.True {
					t.Fatalf("cancel of a background response: %s", got)
				}
			}
		})
	}
}

package translate

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/tidwall/gjson"
)

// FuzzToChat: arbitrary bytes (and one arbitrary history item) never panic;
// the answer is a valid Chat body or a 400 invalid_request_error, and
// invalid JSON is always refused.
func FuzzToChat(f *testing.F) {
	f.Add([]byte(`{"model":"m","input":"hi"}`), []byte(`{"role":"user","content":"earlier"}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}`), []byte(``))
	f.Fuzz(func(t *testing.T, body, hist []byte) {
		var history []json.RawMessage
		if len(hist) > 0 {
			history = []json.RawMessage{hist}
		}
		chat, info, aerr := ToChat(body, history, RequestOptions{})
		if aerr != nil {
			if aerr.Status != 400 || aerr.Type != apierr.TypeInvalidRequest || aerr.Code == "" || aerr.Message == "" {
				t.Fatalf("bad error %+v", aerr)
			}
			if aerr.Code == apierr.CodeInvalidJSON && json.Valid(body) && (len(hist) == 0 || json.Valid(hist)) && !tooDeep(body) {
				t.Fatalf("valid JSON refused as invalid: %v", aerr)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("invalid JSON accepted: %q", body)
		}
		if !json.Valid(chat) {
			t.Fatalf("invalid chat body %q", chat)
		}
		r := gjson.ParseBytes(chat)
		if r.Get("model").Type != gjson.String || len(r.Get("messages").Array()) == 0 {
			t.Fatalf("chat body without model or messages: %s", chat)
		}
		r.Get("messages").ForEach(func(_, m gjson.Result) bool {
			if m.Get("role").Type != gjson.String || !m.Get("content").Exists() {
				t.Fatalf("bad message %s", m.Raw)
			}
			return true
		})
		for _, it := range info.InputItems {
			if !json.Valid(it) {
				t.Fatalf("invalid input item %q", it)
			}
		}
		// The echo must render into a valid response object.
		s := NewStream(StreamOptions{Request: info.Echo, ResponseID: "resp_x", CreatedAt: 1})
		for _, e := range s.Start() {
			if !json.Valid(e.Data) {
				t.Fatalf("invalid event %q", e.Data)
			}
		}
	})
}

// FuzzStream: an arbitrary sequence of chunk payloads and calls never panics;
// every event is well-formed and follows the protocol, sequence numbers run
// 0,1,2,…, and after Finish or Fail there is exactly one terminal event.
//
// The input is split on newlines; a line starting with '!' calls Fail, '#'
// Finish, '>' Start, anything else is a Chunk payload. The stream is then
// ended with Finish or Fail (by the input's length).
func FuzzStream(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n" + `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":3,"function":{"arguments":"{"}}]}}]}` + "\n!"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := NewStream(StreamOptions{ResponseID: "resp_f", CreatedAt: 1, NewID: counterIDs()})
		var events []Event
		for _, line := range bytes.Split(data, []byte("\n")) {
			switch {
			case bytes.HasPrefix(line, []byte("!")):
				events = append(events, s.Fail(apierr.StreamIncomplete("%s", line[1:]))...)
			case bytes.HasPrefix(line, []byte("#")):
				events = append(events, s.Finish()...)
			case bytes.HasPrefix(line, []byte(">")):
				events = append(events, s.Start()...)
			default:
				ev, err := s.Chunk(line)
				if err != nil && ev != nil {
					t.Fatalf("events with an error")
				}
				events = append(events, ev...)
			}
		}
		if len(data)%2 == 0 {
			events = append(events, s.Finish()...)
		} else {
			events = append(events, s.Fail(nil)...)
		}
		if err := validateEvents(events); err != nil {
			t.Fatalf("%v\n%s", err, dumpEvents(events))
		}
		n := 0
		for _, e := range events {
			if terminalTypes[e.Type] {
				n++
			}
		}
		if n != 1 || !terminalTypes[events[len(events)-1].Type] || !s.Done() {
			t.Fatalf("%d terminal events\n%s", n, dumpEvents(events))
		}
		for _, it := range s.OutputItems() {
			if !json.Valid(it) {
				t.Fatalf("invalid output item %q", it)
			}
		}
	})
}

// FuzzFromChatResponse: arbitrary bodies never panic and give either a
// valid response object or an error, whose status is an HTTP error status or
// 0 (an upstream error that names none). Stream.Completion agrees: the same
// error, or a valid event stream whose terminal output is the response's.
func FuzzFromChatResponse(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hi"}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		resp, out, aerr, _ := FromChatResponse(body, StreamOptions{ResponseID: "resp_f", CreatedAt: 1, NewID: counterIDs()})
		s := NewStream(StreamOptions{ResponseID: "resp_f", CreatedAt: 1, NewID: counterIDs()})
		events, err := s.Completion(body)
		if err == nil {
			if verr := validateEvents(events); verr != nil || !s.Done() {
				t.Fatalf("Completion: %v\n%s", verr, dumpEvents(events))
			}
		}
		if aerr != nil {
			if aerr.Status != 0 && (aerr.Status < 400 || aerr.Status > 599) || aerr.Message == "" {
				t.Fatalf("bad error %+v", aerr)
			}
			if e := s.ErrorBeforeOutput(); (err == nil) != (e != nil) || e != nil && *e != *aerr {
				t.Fatalf("Completion: %v, error %+v; FromChatResponse %+v", err, e, aerr)
			}
			return
		}
		if err != nil {
			t.Fatalf("Completion refused what FromChatResponse took: %v", err)
		}
		if got, want := gjson.GetBytes(events[len(events)-1].Data, "response.output").Raw, gjson.GetBytes(resp, "output").Raw; got != want {
			t.Fatalf("Completion output %s, FromChatResponse %s", got, want)
		}
		if !json.Valid(resp) {
			t.Fatalf("invalid response %q", resp)
		}
		for _, it := range out {
			if !json.Valid(it) {
				t.Fatalf("invalid item %q", it)
			}
		}
	})
}

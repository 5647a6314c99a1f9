package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/sse"
)

func TestScrubber(t *testing.T) {
	const key = "sk-proj-0123456789abcdef"
	tests := []struct {
		name string
		keys []string
		in   string
		want string
	}{
		{"no key configured", nil, "Bearer " + key, "Bearer " + key},
		{"short keys are ignored", []string{"sk-1", "test"}, "a test of sk-1", "a test of sk-1"},
		{"plain", []string{key}, "key " + key + " here", "key [redacted] here"},
		{"bearer form", []string{key}, "Incorrect API key provided: Bearer " + key + ".", "Incorrect API key provided: [redacted]."},
		{"bearer, any case", []string{key}, "got bearer " + key, "got [redacted]"},
		{"every occurrence", []string{key}, key + "," + key + ",Bearer " + key, "[redacted],[redacted],[redacted]"},
		{"nothing to do", []string{key}, "sk-proj-0123456789abcde", "sk-proj-0123456789abcde"},
		{"a key inside a longer key", []string{"sk-abcdefgh", "sk-abcdefgh-longer"}, "sk-abcdefgh-longer / sk-abcdefgh", "[redacted] / [redacted]"},
		{"two keys", []string{key, "another-key-42"}, "Bearer another-key-42 and " + key, "[redacted] and [redacted]"},
		{"JSON-escaped form", []string{"sk-a<b>&c/d"}, `{"m":"sk-a\u003cb\u003e\u0026c/d and sk-a<b>&c\/d"}`, `{"m":"[redacted] and [redacted]"}`},
		{"every character \\u-escaped", []string{key}, `{"m":"saw ` + escapeEach(key) + ` here","n":1}`, `{"m":"saw [redacted] here","n":1}`},
		{"partly \\u-escaped, after Bearer", []string{key}, `{"m":"Bearer sk-proj-\u0030123456789abcdef"}`, `{"m":"[redacted]"}`},
		{"one of several slashes escaped", []string{"sk-a/b/c-123456"}, `{"m":"sk-a\/b/c-123456"}`, `{"m":"[redacted]"}`},
		{"\\u-escaped inside a JSON string's JSON", []string{key}, `{"arguments":"{\"k\":\"` + strings.ReplaceAll(escapeEach(key), `\`, `\\`) + `\"}"}`,
			`{"arguments":"{\"k\":\"[redacted]\"}"}`},
		{"the other strings keep their escapes", []string{key}, `{"a":"caf\u00e9 <\/b>","m":"` + escapeEach(key) + `&"}`, `{"a":"caf\u00e9 <\/b>","m":"[redacted]&"}`},
		{"a bad escape beside them", []string{key}, `{"m":"` + escapeEach(key) + `\x"}`, `{"m":"[redacted]"}`},
		{"escapes without a key", []string{key}, `{"m":"caf\u00e9 \/ \\u0073k-proj"}`, `{"m":"caf\u00e9 \/ \\u0073k-proj"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScrubber(tt.keys)
			if got := string(s.Bytes([]byte(tt.in))); got != tt.want {
				t.Errorf("Bytes = %q, want %q", got, tt.want)
			}
			if got := s.String(tt.in); got != tt.want {
				t.Errorf("String = %q, want %q", got, tt.want)
			}
		})
	}
}

// escapeEach writes every character of s as a \uXXXX JSON escape.
func escapeEach(s string) string {
	var b strings.Builder
	for _, r := range s {
		fmt.Fprintf(&b, `\u%04x`, r)
	}
	return b.String()
}

// TestScrubberKeepsJSONValid: replacing a key inside a JSON string keeps
// the document valid, even when the match touches an escape sequence.
func TestScrubberKeepsJSONValid(t *testing.T) {
	tests := []struct {
		key string
		doc string
	}{
		{"sk-proj-0123456789abcdef", `{"error":{"message":"Incorrect API key provided: Bearer sk-proj-0123456789abcdef","type":"invalid_request_error"}}`},
		{"nk-0123456789", `{"m":"line\nk-0123456789 x"}`},         // the match starts inside \n
		{"0041sk-abcdef", `{"m":"\u0041sk-abcdef"}`},              // the match starts inside \u0041
		{`sk-abcdefg\`, `{"m":"sk-abcdefg\\","n":1}`},             // the match ends inside \\
		{"sk-abcdefgh", `{"m":"\\\\sk-abcdefgh\\\\","n":"\\\\"}`}, // escaped backslashes around it
	}
	for _, tt := range tests {
		s := newScrubber([]string{tt.key})
		got := s.Bytes([]byte(tt.doc))
		if !json.Valid(got) {
			t.Errorf("%s: %s is not valid JSON", tt.key, got)
		}
		if !strings.Contains(string(got), "[redacted]") {
			t.Errorf("%s: nothing redacted in %s", tt.key, got)
		}
	}
}

func TestScrubberAllocatesNothingWithoutAMatch(t *testing.T) {
	s := newScrubber([]string{"sk-proj-0123456789abcdef", "another-key-42"})
	ev := []byte(`{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hello"}`)
	if n := testing.AllocsPerRun(100, func() { _ = s.Bytes(ev) }); n != 0 {
		t.Errorf("Bytes allocates %v times per clean event", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.String("application/json") }); n != 0 {
		t.Errorf("String allocates %v times per clean value", n)
	}
	if out := s.Bytes(ev); &out[0] != &ev[0] {
		t.Error("a clean event was copied")
	}
	escaped := []byte(`{"type":"response.output_text.delta","delta":"caf\u00e9 \/"}`)
	if out := s.Bytes(escaped); &out[0] != &escaped[0] {
		t.Error("a clean event with escapes was copied")
	}
}

func TestScrubberHeadersAndEvents(t *testing.T) {
	const key = "sk-proj-0123456789abcdef"
	s := newScrubber([]string{key})
	h := http.Header{"X-Echo-Auth": {"Bearer " + key}, "X-Request-Id": {"req_1"}, "X-" + key: {"v"}, http.CanonicalHeaderKey("X-" + key): {"v"}}
	s.Header(h)
	if h.Get("X-Echo-Auth") != "[redacted]" || h.Get("X-Request-Id") != "req_1" || len(h) != 2 {
		t.Errorf("headers: %v", h)
	}
	src := scrubbedSource{s: s, src: &listSource{evs: []sse.Event{
		{Name: "error", Error: []byte(`{"message":"Bearer ` + key + `"}`)},
		{Data: []byte(`{"type":"x","t":"` + key + `"}`)},
	}}}
	ev, _ := src.Next()
	if string(ev.Error) != `{"message":"[redacted]"}` {
		t.Errorf("error field: %s", ev.Error)
	}
	ev, _ = src.Next()
	if string(ev.Data) != `{"type":"x","t":"[redacted]"}` {
		t.Errorf("data: %s", ev.Data)
	}
	if _, err := src.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("end: %v", err)
	}
	var nilScrubber *scrubber
	nilScrubber.answer(&upstreamAnswer{body: []byte(key)})
	if got := nilScrubber.String(key); got != key {
		t.Error("a nil scrubber changed text")
	}
}

type listSource struct{ evs []sse.Event }

func (l *listSource) Next() (sse.Event, error) {
	if len(l.evs) == 0 {
		return sse.Event{}, io.EOF
	}
	ev := l.evs[0]
	l.evs = l.evs[1:]
	return ev, nil
}

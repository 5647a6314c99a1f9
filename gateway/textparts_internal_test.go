package gateway

import (
	"testing"

	"github.com/tidwall/gjson"
)

func TestMayCarryTextParts(t *testing.T) {
	for _, tc := range []struct {
		chunk string
		want  bool
	}{
		{`{"choices":[{"delta":{"content":"Hel"}}]}`, false},
		{`{"choices":[{"delta":{"content":null}}]}`, false},
		{`{"choices":[{"delta":{"role":"assistant"}}]}`, false},
		{`{"choices":[{"delta":{"content":"[not parts]"}}]}`, false},
		{`{"choices":[{"delta":{"content":[{"type":"text","text":"Hel"}]}}]}`, true},
		{"{\"choices\":[{\"delta\":{\"content\" :\n\t[ ]}}]}", true},
		{`{"choices":[{"delta":{"content":"a","x":{"content":[]}}}]}`, true}, // a pre-check: the parse decides
		{`{"choices":[{"delta":{"content"`, false},
	} {
		if got := mayCarryTextParts([]byte(tc.chunk)); got != tc.want {
			t.Errorf("mayCarryTextParts(%s) = %v, want %v", tc.chunk, got, tc.want)
		}
	}
}

func TestWithTextPartsJoined(t *testing.T) {
	for _, tc := range []struct {
		name, chunk, want string // want "": unchanged (nil)
	}{
		{"string content", `{"id":"c","choices":[{"index":0,"delta":{"content":"Hel"}}]}`, ""},
		{"another member's array", `{"choices":[{"index":0,"delta":{"content":"a","x":{"content":[]}}}]}`, ""},
		{"no choices", `{"id":"c","usage":{"prompt_tokens":1}}`, ""},
		{"parts", `{"id":"c","choices":[{"index":0,"delta":{"content":[{"type":"text","text":"Hel"},{"type":"text","text":"lo \"you\""}]}}],"usage":null}`,
			`{"id":"c","choices":[{"index":0,"delta":{"content":"Hello \"you\""}}],"usage":null}`},
		{"non-text parts dropped", `{"choices":[{"index":0,"delta":{"content":[{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"a"}]}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"a"}}]}`},
		{"empty parts", `{"choices":[{"index":0,"delta":{"content":[]}}]}`, `{"choices":[{"index":0,"delta":{"content":""}}]}`},
		{"one of two choices", `{"choices":[{"index":0,"delta":{"content":"x"}},{"index":1,"delta":{"content":[{"type":"text","text":"y"}]}}]}`,
			`{"choices":[{"index":0,"delta":{"content":"x"}},{"index":1,"delta":{"content":"y"}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chunk := []byte(tc.chunk)
			c, valid, object := scanChatChunk(chunk, 64)
			if !valid || !object {
				t.Fatalf("not a JSON object: %s", chunk)
			}
			got := withTextPartsJoined(chunk, c.choices)
			if string(got) != tc.want && !(got == nil && tc.want == "") {
				t.Fatalf("withTextPartsJoined(%s)\n got %s\nwant %s", chunk, got, tc.want)
			}
			if got != nil && !gjson.ValidBytes(got) {
				t.Fatalf("not valid JSON: %s", got)
			}
		})
	}
}

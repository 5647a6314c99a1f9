package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestWithLane(t *testing.T) {
	for _, tc := range []struct{ name, event, want string }{
		{"an event", `{"type":"response.created","sequence_number":0}`, `{"type":"response.created","sequence_number":0,"stream_id":"lane.A-1_"}`},
		{"an empty object", `{}`, `{"stream_id":"lane.A-1_"}`},
		{"an empty object with spaces", "{ \n}", "{ \n\"stream_id\":\"lane.A-1_\"}"},
		{"trailing newline", "{\"a\":1}\n", "{\"a\":1,\"stream_id\":\"lane.A-1_\"}\n"},
		{"text that names stream_id", `{"delta":"\"stream_id\": 1"}`, `{"delta":"\"stream_id\": 1","stream_id":"lane.A-1_"}`},
		{"an error naming stream_id", `{"type":"error","error":{"param":"stream_id"}}`, `{"type":"error","error":{"param":"stream_id"},"stream_id":"lane.A-1_"}`},
		{"a stream_id already there", `{"stream_id":"other","a":1}`, `{"stream_id":"lane.A-1_","a":1}`},
		{"not an object", `[1]`, `[1]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(withLane([]byte(tc.event), "lane.A-1_", laneField("lane.A-1_")))
			if got != tc.want {
				t.Fatalf("withLane(%s) = %s, want %s", tc.event, got, tc.want)
			}
			if !json.Valid([]byte(got)) {
				t.Fatalf("withLane(%s) = %s, not JSON", tc.event, got)
			}
		})
	}
}

func TestStreamIDOf(t *testing.T) {
	for _, tc := range []struct{ name, frame, lane, code string }{
		{"absent", `{"type":"response.create"}`, "", ""},
		{"a lane", `{"stream_id":"agent_1"}`, "agent_1", ""},
		{"escaped letters", `{"stream_id":"agent\u005f1"}`, "agent_1", ""},
		{"the longest", `{"stream_id":"` + strings.Repeat("a", maxStreamIDLen) + `"}`, strings.Repeat("a", maxStreamIDLen), ""},
		{"too long", `{"stream_id":"` + strings.Repeat("a", maxStreamIDLen+1) + `"}`, "", "invalid_value"},
		{"empty", `{"stream_id":""}`, "", "invalid_value"},
		{"a slash", `{"stream_id":"a/b"}`, "", "invalid_value"},
		{"an escaped quote", `{"stream_id":"a\"b"}`, "", "invalid_value"},
		{"a number", `{"stream_id":1}`, "", "invalid_type"},
		{"null", `{"stream_id":null}`, "", "invalid_type"},
		{"no frame", ``, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var frame []byte
			if tc.frame != "" {
				frame = []byte(tc.frame)
			}
			lane, aerr := streamIDOf(frame)
			code := ""
			if aerr != nil {
				code = aerr.Code
				if aerr.Param != "stream_id" {
					t.Fatalf("the error names %q, want stream_id", aerr.Param)
				}
			}
			if lane != tc.lane || code != tc.code {
				t.Fatalf("streamIDOf(%s) = %q, %q; want %q, %q", tc.frame, lane, code, tc.lane, tc.code)
			}
		})
	}
}

package gateway

import (
	"testing"

	"github.com/tidwall/gjson"
)

// TestIsForeignTerminal: only a terminal event whose Response names an id
// other than the attempt's first is foreign; lifecycle events, a first id
// not yet known, and a Response without a string id are not.
func TestIsForeignTerminal(t *testing.T) {
	for _, tc := range []struct {
		typ, resp, first string
		want             bool
	}{
		{"response.completed", `{"id":"resp_b"}`, "resp_a", true},
		{"response.incomplete", `{"id":"resp_b"}`, "resp_a", true},
		{"response.failed", `{"id":"resp_b"}`, "resp_a", true},
		{"response.completed", `{"id":"resp_a"}`, "resp_a", false},
		{"response.completed", `{"id":"resp_b"}`, "", false},
		{"response.completed", `{"status":"completed"}`, "resp_a", false},
		{"response.completed", `{"id":7}`, "resp_a", false},
		{"response.in_progress", `{"id":"resp_b"}`, "resp_a", false},
		{"response.queued", `{"id":"resp_b"}`, "resp_a", false},
	} {
		if got := isForeignTerminal(tc.typ, gjson.Parse(tc.resp), tc.first); got != tc.want {
			t.Errorf("isForeignTerminal(%s, %s, %q) = %v, want %v", tc.typ, tc.resp, tc.first, got, tc.want)
		}
	}
}

package gateway

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// A follow whose read of the store failed ends with an error event numbered
// as the next event, whose message names the starting_after that resumes
// without skipping the response's own event of that number.
func TestReadFailedEventNamesWhereToResume(t *testing.T) {
	for _, tc := range []struct {
		next      int64
		seq       int64
		mentioned string
	}{
		{next: 13, seq: 13, mentioned: "starting_after=12"},
		{next: 0, seq: 0, mentioned: "from its start"},
	} {
		ev := readFailedEvent(tc.next)
		msg := gjson.GetBytes(ev, "message").Str
		if gjson.GetBytes(ev, "type").Str != "error" || gjson.GetBytes(ev, "sequence_number").Int() != tc.seq ||
			gjson.GetBytes(ev, "code").Str != "stream_incomplete" || !strings.Contains(msg, tc.mentioned) {
			t.Errorf("next %d: %s; want an error event numbered %d naming %q", tc.next, ev, tc.seq, tc.mentioned)
		}
	}
}

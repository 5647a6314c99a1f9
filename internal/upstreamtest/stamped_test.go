package upstreamtest

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestStampedDeltas: every delta of a StampedDeltas stream is the Unix-nano
// time it was written, in order, and the stream is a complete Responses
// stream.
func TestStampedDeltas(t *testing.T) {
	h := NewHandler(Options{Name: "stamped", DisableRecording: true})
	defer h.Close()
	h.SetDefault(StampedDeltas(5, 0))
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(`{"model":"m","input":"hi","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stamps []int64
	completed := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		switch gjson.Get(data, "type").Str {
		case "response.output_text.delta":
			d := gjson.Get(data, "delta").Str
			n, err := strconv.ParseInt(d, 10, 64)
			if err != nil || len(d) != 19 {
				t.Fatalf("delta %q is not a 19-digit Unix-nano time", d)
			}
			stamps = append(stamps, n)
		case "response.completed":
			completed = true
		}
	}
	if len(stamps) != 5 || !completed {
		t.Fatalf("got %d stamped deltas (want 5), completed=%t", len(stamps), completed)
	}
	for i := 1; i < len(stamps); i++ {
		if stamps[i] < stamps[i-1] {
			t.Fatalf("stamps out of order: %v", stamps)
		}
	}
}

package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAccessLogPathIsOneBoundedLine: the path a client chose is written to
// the access log as the model is, without control characters and bounded:
// an encoded CR, LF or ESC cannot split "one INFO line per request"
// (README "Access log"), nor a long path write a line of its size; the 404
// body that echoes the path is bounded the same way.
func TestAccessLogPathIsOneBoundedLine(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(h.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/v1/x%0Dy%0Az%1B%5B2Jw"); code != http.StatusNotFound {
		t.Fatalf("status %d, want 404", code)
	}
	waitAccessLines(t, h, 1)
	line := grepLines(h.logs.String(), "access: request")
	if !strings.Contains(line, "endpoint=/v1/xyz[2Jw") || !strings.Contains(line, "status=404") {
		t.Fatalf("the access line is not one line with the cleaned path:\n%s", h.logs.String())
	}

	long := "/v1/" + strings.Repeat("b", 100_000)
	code, body := get(long)
	if code != http.StatusNotFound || codeOf([]byte(body)) != "not_found" {
		t.Fatalf("%d %.300s", code, body)
	}
	if len(body) > 1000 {
		t.Errorf("the 404 body echoes the whole path: %d bytes", len(body))
	}
	waitAccessLines(t, h, 2)
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, "bbbb") && len(l) > 1000 {
			t.Errorf("a log line of %d bytes for one request's path", len(l))
		}
	}
}

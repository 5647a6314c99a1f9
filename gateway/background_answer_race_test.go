package gateway_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/tidwall/gjson"
)

// A background create is answered with the response as it opened, queued or
// in progress (README "Background responses"), even when the upstream
// finishes the whole answer before the handler that answers gets to run:
// the answer is taken when the log opens, on the run's own goroutine, not
// read back later from a log that may have ended by then.
func TestBackgroundCreateAnswersTheOpenedResponse(t *testing.T) {
	for _, protocol := range []string{"responses", "chat"} {
		t.Run(protocol, func(t *testing.T) { checkBackgroundAnswers(t, protocol) })
	}
}

func checkBackgroundAnswers(t *testing.T, protocol string) {
	h := newHarness(t, harnessConfig{opts: resumeOpts(), protocol: map[string]string{"A": protocol}})
	for i := range 100 {
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("create %d: %d %s", i, resp.StatusCode, b)
		}
		if s := gjson.GetBytes(b, "status").Str; s != "queued" && s != "in_progress" {
			t.Fatalf("create %d answered status %q, want queued or in_progress: %s", i, s, b)
		}
		if len(gjson.GetBytes(b, "output").Array()) != 0 || !gjson.GetBytes(b, "background").Bool() {
			t.Fatalf("create %d: the answer is not the opened background response: %s", i, b)
		}
	}
}

package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// TestRunningResponseItemsInProgress: GET /v1/responses/{id} of a response
// still running (background, or a stream whose client left) shows the item
// still being written as in_progress, as OpenAI's Response does, not as
// incomplete, and the Response is valid against the spec. Once it ends the
// item is closed as incomplete, as before: in the cancel's answer, in GET,
// and in a stored Response whose gateway stopped while it ran (failed).
func TestRunningResponseItemsInProgress(t *testing.T) {
	spec := loadSpec(t)
	st := openStore(t, t.TempDir())
	opts := resumeOpts()
	opts.Resume.Store = st
	h := newHarness(t, harnessConfig{opts: opts})
	upstreamOwned := "$.usage." // the fake upstream's usage, passed on
	fourWords := func(body []byte) bool {
		return strings.HasPrefix(gjson.GetBytes(body, "output.0.content.0.text").Str, "one two three four")
	}
	itemStatus := func(body []byte) string { return gjson.GetBytes(body, "output.0.status").Str }

	// Background, stalled after four deltas.
	h.ups["A"].Enqueue(upstreamtest.Answer(resumeText, 12).StallAfterDeltas(4))
	resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"hi","background":true}`)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	bgID := gjson.GetBytes(b, "id").Str
	if resp.StatusCode != http.StatusOK || bgID == "" {
		t.Fatalf("background create: %d %s", resp.StatusCode, b)
	}
	running := h.waitFor("/v1/responses/"+bgID, fourWords)
	if gjson.GetBytes(running, "status").Str != "in_progress" || itemStatus(running) != "in_progress" {
		t.Fatalf("GET of a running background response: %s", running)
	}
	validateAs(t, spec, "Response", running, upstreamOwned)

	// A stream whose client left, running on detached.
	h.ups["A"].Enqueue(upstreamtest.Answer(resumeText, 12).StallAfterDeltas(4))
	first := h.readSome("sk-client-secret", `{"model":"gpt-fake-1","input":"hi","stream":true}`, 2)
	streamID := gjson.GetBytes(first[0], "response.id").Str
	body := h.waitFor("/v1/responses/"+streamID, fourWords)
	if gjson.GetBytes(body, "status").Str != "in_progress" || itemStatus(body) != "in_progress" {
		t.Fatalf("GET of a detached stream: %s", body)
	}
	validateAs(t, spec, "Response", body, upstreamOwned)
	if status, _ := h.call(http.MethodDelete, "/v1/responses/"+streamID, "sk-client-secret"); status != http.StatusOK {
		t.Fatalf("DELETE of the detached stream: %d", status)
	}

	// Ended: the open item is closed as incomplete.
	status, cancelled := h.call(http.MethodPost, "/v1/responses/"+bgID+"/cancel", "sk-client-secret")
	if status != http.StatusOK || gjson.GetBytes(cancelled, "status").Str != "cancelled" || itemStatus(cancelled) != "incomplete" {
		t.Fatalf("cancel: %d %s", status, cancelled)
	}
	if _, got := h.call(http.MethodGet, "/v1/responses/"+bgID, "sk-client-secret"); itemStatus(got) != "incomplete" {
		t.Fatalf("GET of the cancelled response: %s", got)
	}

	// A record written while it ran (the Response then, with the item in
	// progress) whose gateway stopped before its end: GET answers it
	// failed, the open item closed as incomplete.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const crashedID = "resp_crashed_running"
	crashed, err := sjson.SetBytes(running, "id", crashedID)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutStreamLog(ctx, store.StreamLog{ResponseID: crashedID, Owner: ownerOf(t, st, bgID), Background: true,
		Status: "in_progress", ExpiresAt: time.Now().Add(time.Hour), Response: crashed, Input: []byte("[]")}); err != nil {
		t.Fatal(err)
	}
	if status, got := h.call(http.MethodGet, "/v1/responses/"+crashedID, "sk-client-secret"); status != http.StatusOK ||
		gjson.GetBytes(got, "status").Str != "failed" || itemStatus(got) != "incomplete" || !fourWords(got) {
		t.Fatalf("GET of a stored response whose gateway stopped: %d %s", status, got)
	}
}

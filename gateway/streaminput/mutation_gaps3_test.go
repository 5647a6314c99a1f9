package streaminput_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// How a captured Chat Completions answer that ends with its own
// "data: [DONE]" is finished and reported.
//
// The other survivors of the pure parts (accumulator, assembly, chunks,
// JSON scans, options, policy, result buffer, templates) are killed by the
// tests of mutation_gaps4_internal_test.go, or judged equivalent there or
// here. Judged equivalent, so not tested:
//   - accumulator.go:62:23 <= -> <: a zero MaxJSONDepth reaches jsonx,
//     which reads a limit <= 0 as its default too (and reports that
//     default in a depth error), so the same frames pass and fail.
//   - accumulator.go:124:33 > -> >=: a chunk numbered maxSeq is already
//     held and is answered as a duplicate or a conflict before this line.
//   - accumulator.go:157:12 <= -> < and 159:22 <= -> <: the chunk numbered
//     maxSeq is held, so next never equals it and it is never a gap.
//   - json.go:66:7 ++ -> --: -k%4096 == 0 exactly when k%4096 == 0, so the
//     context is checked at the same members.
//   - json.go:66:28 == -> !=: the context is checked at every member but
//     the 4096th instead of only there. A cancel is still always noticed;
//     the only difference is that an object of fewer than 4096 members
//     under an already-ended context is refused (499) rather than read,
//     and nothing promises either (a cancel is promised to stop the scan
//     of a large document, which both do).
//   - result.go:116:47 > -> >=: over is 0 only when the buffer holds
//     exactly the limit, where the second condition is false.
//   - result.go:353:18 > -> >=: joining an empty pending line copies the
//     line into the pending line's array instead of reading it in place;
//     the bytes read are the same.
//   - template.go:183:13 > -> >= and > -> <=: a stored envelope starts
//     with '{"v":', so its template is never at index 0 (and a missing one
//     is empty either way); the mutants only copy the template's bytes
//     instead of sharing them, and nothing writes to the envelope.

// TestPureChatDoneEndsTheAnswer: a streamed Chat answer whose last event
// is the upstream's own "data: [DONE]" is complete. The gateway must
// recognise that single-line [DONE] event as terminal, add no error chunk
// and no second [DONE] when it closes the answer, and report the session
// completed rather than failed.
func TestPureChatDoneEndsTheAnswer(t *testing.T) {
	e := newEnv(t, envConfig{})
	tpl := `{"model":"gpt-fake-1","stream":true,"messages":[{"role":"user","content":"Q: "}]}`
	id := e.create(sessionBody(streaminput.EndpointChat, "", tpl))
	e.mustChunk(id, textChunk(0, "hello", true))
	var final string
	eventually(t, 10*time.Second, "the answer ends", func() bool {
		_, st := e.status(id)
		if st.Result == nil {
			return false
		}
		final = st.Result.Status
		return final == "completed" || final == "failed"
	})
	if final != "completed" {
		t.Fatalf("a Chat answer ending with [DONE] is reported %q", final)
	}
	resp, evs, _ := e.result(id, "")
	if resp.StatusCode != http.StatusOK || len(evs) < 2 {
		t.Fatalf("result: %d, %d events", resp.StatusCode, len(evs))
	}
	dones := 0
	for _, ev := range evs {
		if ev.Done {
			dones++
		}
		if strings.Contains(string(ev.Data), `"error"`) {
			t.Fatalf("the answer carries an error chunk: %s", ev.Data)
		}
	}
	if dones != 1 || !evs[len(evs)-1].Done {
		t.Fatalf("the answer has %d [DONE] events and ends with %q", dones, evs[len(evs)-1].Data)
	}
}

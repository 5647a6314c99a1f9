package gateway_test

import (
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestErrorBeforeContentSaysWhatHappened: an upstream whose stream opens
// (response.created, held back) and then sends an error before any content
// is to be replayed on another upstream; when none is left, the client's message
// says the error came before any content, not that it came before
// response.created, which the upstream did send.
func TestErrorBeforeContentSaysWhatHappened(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	h.ups["A"].SetDefault(upstreamtest.ErrorField(nil, 2)) // response.created, in_progress, then the error
	_, evs := h.responsesStream(respBody)
	last := assertOneTerminal(t, evs)
	msg := string(last.data)
	if last.typ != "response.failed" || !strings.Contains(msg, "an error before any content") || strings.Contains(msg, "before response.created") {
		t.Fatalf("terminal %s %s", last.typ, msg)
	}
}

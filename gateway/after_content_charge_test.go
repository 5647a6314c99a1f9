package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/tidwall/gjson"
)

// TestPinnedFollowUpCutAfterContentIsCharged: a follow-up pinned to its
// owner by previous_response_id is never continued, yet a cut after
// content is the owner's failure (README "Continuation": charged whether
// the stream is continued or not) and is counted by how it ended (README
// "Observability"): three in a row open the owner's circuit.
func TestPinnedFollowUpCutAfterContentIsCharged(t *testing.T) {
	st := openStore(t, t.TempDir())
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{opts: gateway.Options{Store: st}})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.responsesStream(`{"model":"m","input":"hi","stream":true}`)
	last := assertOneTerminal(t, evs)
	id := gjson.GetBytes(last.data, "response.id").Str
	if last.typ != "response.completed" || id == "" {
		t.Fatalf("first turn: %s %s", last.typ, last.data)
	}
	for i := 1; i <= 3; i++ {
		h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
		_, evs := h.responsesStream(`{"model":"m","input":"and then?","stream":true,"previous_response_id":"` + id + `"}`)
		if last := assertOneTerminal(t, evs); last.typ != "response.failed" || last.code != "stream_incomplete" {
			t.Fatalf("follow-up %d: %s %s", i, last.typ, last.data)
		}
		m := h.metrics()
		if got := metricValue(m, `sluice_upstream_attempts_total{outcome="after_content_cut",upstream="P"}`); got != float64(i) {
			t.Fatalf("follow-up %d: after_content_cut counted %v times:\n%s", i, got, grep(m, "upstream_attempts"))
		}
		if got := metricValue(m, `sluice_upstream_attempts_total{outcome="ok",upstream="P"}`); got != 1 {
			t.Fatalf("follow-up %d: ok counted %v times (the first turn alone is):\n%s", i, got, grep(m, "upstream_attempts"))
		}
		if got := metricValue(m, `sluice_target_failures_total{class="server_error",model="m",upstream="P"}`); got != float64(i) {
			t.Fatalf("follow-up %d: P charged %v times:\n%s", i, got, grep(m, "target_failures"))
		}
	}
	if h.ups["B"].RequestCount() != 0 {
		t.Fatal("a pinned follow-up went to B")
	}
	if m := h.metrics(); metricValue(m, `sluice_target_circuit_state{model="m",upstream="P"}`) != 1 {
		t.Fatalf("three cuts in a row left P's circuit closed:\n%s", grep(m, "circuit_state"))
	}
}

// TestChatNChoicesCutAfterContentIsCharged: a Chat stream with n > 1 is
// not continued (the splice follows one choice), but its cut after
// content is still charged to the target, once, and counted as
// after_content_cut, not ok.
func TestChatNChoicesCutAfterContentIsCharged(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}],"stream":true}`)
	if seen := readChatChoices(t, evs); seen.errCode != "stream_incomplete" {
		t.Fatalf("chat n=2 cut ended with %q, want a stream_incomplete error chunk", seen.errCode)
	}
	if h.ups["B"].RequestCount() != 0 {
		t.Fatal("an n=2 stream was continued on B")
	}
	m := h.metrics()
	for _, want := range []string{
		`sluice_upstream_attempts_total{outcome="after_content_cut",upstream="P"} 1`,
		`sluice_target_failures_total{class="server_error",model="m",upstream="P"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %s:\n%s%s", want, grep(m, "upstream_attempts"), grep(m, "target_failures"))
		}
	}
	if strings.Contains(m, `sluice_upstream_attempts_total{outcome="ok",upstream="P"}`) {
		t.Fatalf("a cut stream counted ok:\n%s", grep(m, "upstream_attempts"))
	}
}

// TestContinuedCutIsChargedOnce: a cut after content that is continued is
// charged to the failed target once, not once for the continuation and
// again for the stream's end.
func TestContinuedCutIsChargedOnce(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	if o := rescueSurfaces[0].do(t, h); o.text != fullAnswer || o.terminal != "response.completed" {
		t.Fatalf("client got %q ending %s", o.text, o.terminal)
	}
	m := h.metrics()
	for series, want := range map[string]float64{
		`sluice_upstream_attempts_total{outcome="after_content_cut",upstream="P"}`:  1,
		`sluice_upstream_attempts_total{outcome="ok",upstream="P"}`:                 0,
		`sluice_upstream_attempts_total{outcome="ok",upstream="B"}`:                 1,
		`sluice_target_failures_total{class="server_error",model="m",upstream="P"}`: 1,
	} {
		if got := metricValue(m, series); got != want {
			t.Fatalf("%s = %v, want %v:\n%s%s", series, got, want, grep(m, "upstream_attempts"), grep(m, "target_failures"))
		}
	}
}

// TestRoleChunkOnlyCutIsAfterLifecycle: a Chat upstream that sends its role
// chunk and then closes is continued (the client saw the answer start),
// but no content was sent: the log and the attempt's outcome say so
// (after_lifecycle_cut), not "after content".
func TestRoleChunkOnlyCutIsAfterLifecycle(t *testing.T) {
	h := contHarness(t, gateway.ContinuationAuto, harnessConfig{})
	h.ups["P"].Enqueue(upstreamtest.CutAfter(1)) // the role chunk
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 3))
	_, evs := h.streamEvents("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`)
	if seen := readChatChoices(t, evs); seen.text[0] != fullAnswer || seen.errCode != "" {
		t.Fatalf("client got %q (error %q)", seen.text[0], seen.errCode)
	}
	m := h.metrics()
	if !strings.Contains(m, `sluice_upstream_attempts_total{outcome="after_lifecycle_cut",upstream="P"} 1`) ||
		strings.Contains(m, `outcome="after_content_cut"`) {
		t.Fatalf("role-chunk-only cut counted as:\n%s", grep(m, "upstream_attempts"))
	}
	logs := h.logs.String()
	if !strings.Contains(logs, "stream failed after its lifecycle events (no content yet); continuing on the next target") ||
		strings.Contains(logs, "stream failed after content") {
		t.Fatalf("log:\n%s", grep(logs, "stream failed"))
	}
}

// TestSilenceAfterTheAnswerStartedIsOneBound: a stream whose client saw
// only the answer's start (Responses: response.created and in_progress;
// Chat: the role chunk) and then nothing is bounded alike on both
// surfaces: the route's stall counts from the first content (README
// "Continuation"), before it timeouts.idle (without a first_token).
func TestSilenceAfterTheAnswerStartedIsOneBound(t *testing.T) {
	for _, c := range []struct {
		name, path, body string
		frames           int
	}{
		{"responses", "/v1/responses", `{"model":"m","input":"hi","stream":true}`, 2},
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "P"}},
				opts: gateway.Options{LifecycleHold: 10 * time.Millisecond, IdleTimeout: 1500 * time.Millisecond,
					Routes: []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "P"}}, Stall: 20 * time.Millisecond}}}})
			h.ups["P"].Enqueue(upstreamtest.HangAfter(c.frames))
			_, evs := h.streamEvents(c.path, c.body)
			var msg string
			for _, ev := range evs {
				if m := gjson.GetBytes(ev.Data, "error.message").Str; m != "" {
					msg = m
				}
				if m := gjson.GetBytes(ev.Data, "response.error.message").Str; m != "" {
					msg = m
				}
			}
			if !strings.HasSuffix(msg, "the upstream sent nothing for 1.5s") {
				t.Fatalf("terminal message %q; want timeouts.idle's, not the route's stall", msg)
			}
			m := h.metrics()
			if !strings.Contains(m, `sluice_upstream_attempts_total{outcome="after_lifecycle_stall",upstream="P"} 1`) {
				t.Fatalf("attempt counted as:\n%s", grep(m, "upstream_attempts"))
			}
		})
	}
}

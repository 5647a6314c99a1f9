package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/store"
)

// A stream continued on another target after a cut is charged, for the cut
// attempt that reported no usage, the estimate a stream that was not
// continued gets (README "Keys, limits and usage": its body bytes / 4 as
// input, one output token per delta it sent), summed with the usage the
// continuing attempt reported: in /admin/usage, the usage metrics (marked
// as estimated), the access log and the key's budget. Charged nothing, a
// continued stream would cost its key less than one that was not.
func TestUsageOfACutAttemptThatWasContinuedIsEstimated(t *testing.T) {
	for _, kind := range []string{"prefill", "restart"} {
		for _, surface := range []string{"responses", "chat"} {
			t.Run(kind+"/"+surface, func(t *testing.T) {
				mode, continuingDeltas := gateway.ContinuationAuto, 3
				if kind == "restart" {
					mode, continuingDeltas = gateway.ContinuationRestart, 4
				}
				path, body := "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`
				// What the cut attempt P sent the client: its three text
				// deltas, whichever API the client speaks (a Chat client's
				// role chunk carries no output).
				cutDeltas := int64(3)
				if surface == "chat" {
					path = "/v1/chat/completions"
					body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
				}
				inputEstimate := int64(len(body)+3) / 4
				// B reports 8 in and continuingDeltas out.
				wantIn, wantOut := 8+inputEstimate, int64(continuingDeltas)+cutDeltas
				h := contHarness(t, mode, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
					Keys:  []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{TokensPerDay: wantIn + wantOut})},
					Usage: openStore(t, t.TempDir())}}})
				h.ups["P"].Enqueue(upstreamtest.Answer(fullAnswer, 9).CutAfterDeltas(3))
				h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, continuingDeltas))

				_, evs := postWith(t, h, path, body, map[string]string{"Authorization": "Bearer " + teamAKey})
				var text string
				for _, ev := range evs {
					text += gjson.GetBytes(ev.Data, "delta").Str + gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
				}
				if text != fullAnswer || h.ups["P"].RequestCount() != 1 || h.ups["B"].RequestCount() != 1 {
					t.Fatalf("not continued: %q, P asked %d times, B %d", text, h.ups["P"].RequestCount(), h.ups["B"].RequestCount())
				}
				waitAccessLines(t, h, 1)

				rep := waitUsage(t, h, 1)
				if rep.Total.Requests != 1 || rep.Total.InputTokens != wantIn || rep.Total.OutputTokens != wantOut {
					t.Fatalf("/admin/usage: %+v, want 1 request, %d in (B's 8 + the cut attempt's estimate %d), %d out (B's %d + the %d deltas P sent)",
						rep.Total, wantIn, inputEstimate, wantOut, continuingDeltas, cutDeltas)
				}
				m := h.metrics()
				for _, series := range []string{
					`sluice_usage_estimated_requests_total{key="team-a",model="m",route="m",target="B"} 1`,
					fmt.Sprintf(`sluice_usage_tokens_total{key="team-a",kind="input",model="m",route="m",target="B"} %d`, wantIn),
					fmt.Sprintf(`sluice_usage_tokens_total{key="team-a",kind="output",model="m",route="m",target="B"} %d`, wantOut),
				} {
					if !strings.Contains(m, series+"\n") {
						t.Errorf("want %s in:\n%s", series, grepLines(m, "sluice_usage_"))
					}
				}
				line := grepLines(h.logs.String(), "access: request")
				if !strings.Contains(line, fmt.Sprintf("input_tokens=%d", wantIn)) || !strings.Contains(line, fmt.Sprintf("output_tokens=%d", wantOut)) {
					t.Errorf("the access line does not show the tokens charged (%d in, %d out): %s", wantIn, wantOut, line)
				}

				// The day's budget was exactly what the stream was charged:
				// the key's next request is refused.
				resp, b := send(t, h, http.MethodPost, path, teamAKey, body)
				if resp.StatusCode != http.StatusTooManyRequests || gjson.GetBytes(b, "error.code").Str != gateway.CodeInsufficientQuota {
					t.Fatalf("the next request: %d %s, want 429 insufficient_quota (the budget counts the cut attempt)", resp.StatusCode, b)
				}
			})
		}
	}
}

// A request that reached an upstream and got an error back (a 400, a 401)
// counts as one request with no tokens, in /admin/usage as in
// sluice_usage_requests_total (README "Keys, limits and usage"). Its model
// keeps its name when the upstream lists it; any other name a client sends
// is counted as "other", so a client cannot add a series or a stored total
// per name.
func TestUsageCountsARequestTheUpstreamRefused(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("team-a", teamAKey, nil, store.KeyLimits{}))
	refusal := upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusBadRequest,
		upstreamtest.ErrorBody("bad request", "invalid_request_error", "invalid_value", "input"))
	for _, model := range []string{"gpt-fake-1", "made-up-model-1", "made-up-model-2"} {
		h.ups["A"].Enqueue(refusal)
		resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"`+model+`","input":"x"}`)
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("model %s: %d %s, want the upstream's 400", model, resp.StatusCode, b)
		}
	}
	// A 401 (this upstream has no api_key of its own, so the client gets
	// it as it is).
	h.ups["A"].Enqueue(upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusUnauthorized,
		upstreamtest.ErrorBody("Incorrect API key provided", "invalid_request_error", "invalid_api_key", "")))
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"x"}`); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("rejected credentials: %d %s, want the upstream's 401", resp.StatusCode, b)
	}
	if n := h.ups["A"].RequestCount(); n != 4 {
		t.Fatalf("the upstream was asked %d times, want 4", n)
	}
	rep := waitUsage(t, h, 4)
	if rep.Total.Requests != 4 || rep.Total.InputTokens != 0 || rep.Total.OutputTokens != 0 {
		t.Fatalf("/admin/usage: %+v, want 4 requests with no tokens", rep.Total)
	}
	byModel := map[string]int64{}
	for _, r := range rep.Data {
		byModel[r.Model] += r.Requests
	}
	if byModel["gpt-fake-1"] != 2 || byModel["other"] != 2 || len(byModel) != 2 {
		t.Fatalf("/admin/usage by model: %v, want gpt-fake-1: 2 (listed), other: 2 (names the upstream does not list)", byModel)
	}
	m := h.metrics()
	for _, series := range []string{
		`sluice_usage_requests_total{key="team-a",model="gpt-fake-1",route="",target="A"} 2`,
		`sluice_usage_requests_total{key="team-a",model="other",route="",target="A"} 2`,
	} {
		if !strings.Contains(m, series+"\n") {
			t.Errorf("want %s in:\n%s", series, grepLines(m, "sluice_usage_"))
		}
	}
	if strings.Contains(m, "made-up-model") {
		t.Errorf("a model name the upstream does not list got its own series:\n%s", grepLines(m, "made-up-model"))
	}
}

// The attempt that ends a continued stream is charged its estimate too when
// it reports no usage: here the cut attempt reported a running usage (10
// in, 2 out) and the continuing one sends no usage chunk, so the usage the
// client got is the cut attempt's alone. The continuing attempt's input
// estimate and the deltas it sent are added to it.
func TestUsageOfALastAttemptWithoutUsageIsEstimated(t *testing.T) {
	for _, surface := range []string{"responses", "chat"} {
		t.Run(surface, func(t *testing.T) {
			path, body := "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`
			// What B sent the client of its answer " fox jumps over the
			// lazy dog" in 3 deltas: the text deltas, whichever API the
			// client speaks (a Chat client's finish chunk carries no
			// output).
			bDeltas := int64(3)
			if surface == "chat" {
				path = "/v1/chat/completions"
				body = `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			}
			inputEstimate := int64(len(body)+3) / 4
			h := contHarness(t, gateway.ContinuationAuto, harnessConfig{protocol: map[string]string{"P": "chat", "B": "chat"},
				opts: gateway.Options{Accounts: gateway.AccountsOptions{Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})},
					Usage: openStore(t, t.TempDir())}}})
			h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: runningUsageChunks("The quick", " brown"), End: upstreamtest.EndCut})
			h.ups["B"].Enqueue(upstreamtest.Script{ChatFrames: upstreamtest.ChatStream("chatcmpl-b", "gpt-fake-1", " fox jumps over the lazy dog", 3)})
			_, evs := postWith(t, h, path, body, map[string]string{"Authorization": "Bearer " + teamAKey})
			var text string
			for _, ev := range evs {
				text += gjson.GetBytes(ev.Data, "delta").Str + gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
			}
			if text != fullAnswer || h.ups["B"].RequestCount() != 1 {
				t.Fatalf("not continued: %q, B asked %d times", text, h.ups["B"].RequestCount())
			}
			rep := waitUsage(t, h, 1)
			if wantIn, wantOut := 10+inputEstimate, 2+bDeltas; rep.Total.Requests != 1 || rep.Total.InputTokens != wantIn || rep.Total.OutputTokens != wantOut {
				t.Fatalf("/admin/usage: %+v, want 1 request, %d in (P's 10 + B's estimate %d), %d out (P's 2 + the %d deltas B sent)",
					rep.Total, wantIn, inputEstimate, wantOut, bDeltas)
			}
			if m := h.metrics(); !strings.Contains(m, `sluice_usage_estimated_requests_total{key="team-a",model="gpt-fake-1",route="m",target="B"} 1`+"\n") {
				t.Errorf("the estimate is not counted:\n%s", grepLines(m, "sluice_usage_"))
			}
		})
	}
}

// A Chat stream continued twice: the middle attempt, cut before its usage
// chunk, reported nothing of its own (the running usage the client stream
// holds is still the first attempt's), so it is charged its estimate like
// any attempt without usage.
func TestUsageOfAMiddleAttemptWithoutUsageIsEstimated(t *testing.T) {
	body := `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	inputEstimate := int64(len(body)+3) / 4
	h := newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}, {Name: "C"}},
		protocol:  map[string]string{"P": "chat", "B": "chat", "C": "chat"},
		opts: gateway.Options{
			Routes: []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}, {Upstream: "C"}},
				Continuation: gateway.ContinuationAuto}},
			Accounts: gateway.AccountsOptions{Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, Usage: openStore(t, t.TempDir())},
		}})
	h.ups["P"].Enqueue(upstreamtest.Script{ChatFrames: runningUsageChunks("The quick", " brown"), End: upstreamtest.EndCut}) // 10 in, 2 out
	h.ups["B"].Enqueue(upstreamtest.Answer(fullAnswer, 6).CutAfterDeltas(2))                                                 // " fox jumps" " over": no usage
	h.ups["C"].Enqueue(upstreamtest.Answer(fullAnswer, 3))                                                                   // 8 in, 3 out
	_, evs := postWith(t, h, "/v1/chat/completions", body, map[string]string{"Authorization": "Bearer " + teamAKey})
	var text string
	for _, ev := range evs {
		text += gjson.GetBytes(ev.Data, "choices.0.delta.content").Str
	}
	if text != fullAnswer || h.ups["B"].RequestCount() != 1 || h.ups["C"].RequestCount() != 1 {
		t.Fatalf("not continued twice: %q, B asked %d times, C %d", text, h.ups["B"].RequestCount(), h.ups["C"].RequestCount())
	}
	rep := waitUsage(t, h, 1)
	// B sent the client its two text deltas.
	if wantIn, wantOut := 10+inputEstimate+8, int64(2+2+3); rep.Total.Requests != 1 || rep.Total.InputTokens != wantIn || rep.Total.OutputTokens != wantOut {
		t.Fatalf("/admin/usage: %+v, want 1 request, %d in (P's 10 + B's estimate %d + C's 8), %d out (P's 2 + B's 2 deltas + C's 3)",
			rep.Total, wantIn, inputEstimate, wantOut)
	}
}

// An upstream that rejects the gateway's own credential (a 401 the client
// gets as a 502) was reached all the same: the request counts.
func TestUsageCountsARequestWhoseUpstreamCredentialWasRejected(t *testing.T) {
	h := newHarness(t, harnessConfig{keys: map[string]string{"A": "sk-upstream-key-123456"},
		opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: true,
			Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}, Usage: openStore(t, t.TempDir())}}})
	h.ups["A"].Enqueue(upstreamtest.Failure(upstreamtest.ShapeStatus, http.StatusUnauthorized,
		upstreamtest.ErrorBody("Incorrect API key provided", "invalid_request_error", "invalid_api_key", "")))
	resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"x"}`)
	if resp.StatusCode != http.StatusBadGateway || h.ups["A"].RequestCount() != 1 {
		t.Fatalf("rejected credentials: %d %s, upstream asked %d times; want 502 after one request", resp.StatusCode, b, h.ups["A"].RequestCount())
	}
	rep := waitUsage(t, h, 1)
	if rep.Total.Requests != 1 || rep.Total.InputTokens != 0 || rep.Total.OutputTokens != 0 {
		t.Fatalf("/admin/usage: %+v, want 1 request with no tokens", rep.Total)
	}
	if m := h.metrics(); !strings.Contains(m, `sluice_usage_requests_total{key="team-a",model="gpt-fake-1",route="",target="A"} 1`+"\n") {
		t.Errorf("the request is not counted:\n%s", grepLines(m, "sluice_usage_"))
	}
}

package gateway_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
)

// TestPolicyChosenUpstreamCoolingDownSaysWhyAndWhen: the upstream a rewrite
// policy chose is configured but cooling down. Nothing is sent to it, and
// the client, JSON and stream alike, gets the retryable 503
// upstream_unavailable of any request whose targets are all out (README
// "Routes and fallbacks"): saying why, with the wait as Retry-After and
// Retry-After-Ms and in the message, and not calling a configured upstream
// unknown.
func TestPolicyChosenUpstreamCoolingDownSaysWhyAndWhen(t *testing.T) {
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: upstreamChoicePolicy{upstream: "B"}},
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})
	h.pool.Cooldown(h.pool.Get("B"), time.Hour, "test: down")
	for _, body := range []string{`{"model":"m","input":"x"}`, `{"model":"m","input":"x","stream":true}`} {
		resp := h.post("/v1/responses", body)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		e := gjson.GetBytes(raw, "error")
		msg := e.Get("message").Str
		if resp.StatusCode != http.StatusServiceUnavailable || e.Get("code").Str != "upstream_unavailable" {
			t.Fatalf("%s: client got %d %s; want 503 upstream_unavailable", body, resp.StatusCode, raw)
		}
		secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		ms, _ := strconv.Atoi(resp.Header.Get("Retry-After-Ms"))
		if secs < 60 || ms < 60_000 {
			t.Errorf("%s: Retry-After %q, Retry-After-Ms %q; want B's remaining cooldown (about an hour)",
				body, resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After-Ms"))
		}
		if !strings.Contains(msg, `upstream "B" chosen by policy is unavailable`) || !strings.Contains(msg, "cooling down") ||
			!strings.Contains(msg, "please try again in") || strings.Contains(msg, "unknown") {
			t.Errorf("%s: message %q; want B named, why (cooling down) and the wait, and no \"unknown\"", body, msg)
		}
	}
	if reqs := responsesRequests(h); len(reqs) != 0 {
		t.Fatalf("upstreams got %d requests, want none", len(reqs))
	}
}

// failClosedAllPolicy answers every upstream error with fail_closed and no
// message of its own.
type failClosedAllPolicy struct{ gateway.BuiltinPolicy }

func (failClosedAllPolicy) Recover(context.Context, hostabi.RecoverInput) hostabi.RecoverOutput {
	return hostabi.RecoverOutput{Verdict: hostabi.RecoverFailClosed}
}

// TestRecoverFailClosedMessageFitsTheRequest: a recover policy's fail_closed
// without a message answers the retryable upstream_unavailable (ABI.md
// §3.1). It speaks of the upstream that owns the conversation only to a
// request that names a previous response; any other request is told that
// the recover policy failed it closed after the upstream's error, named by
// its code, on a JSON answer and on a stream alike.
func TestRecoverFailClosedMessageFitsTheRequest(t *testing.T) {
	const owner = "the upstream that owns this conversation is unavailable"
	const closed = "the recover policy failed the request closed after the upstream's error (code foo)"
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: failClosedAllPolicy{}}})
	for _, tc := range []struct {
		name, previous, stream, want, not string
	}{
		{"JSON, no previous response", "", "false", closed, owner},
		{"SSE, no previous response", "", "true", closed, owner},
		{"JSON, previous response", `,"previous_response_id":"resp_abcdef123456"`, "false", owner, closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.stream == "true" {
				h.ups["A"].Enqueue(errorAfterDeltas(`{"type":"error","sequence_number":6,"code":"foo","message":"refused"}`, `{}`))
			} else {
				h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusBadRequest, Body: upstreamtest.ErrorBody("refused", "invalid_request_error", "foo", "")})
			}
			resp := h.post("/v1/responses", `{"model":"m","input":"x","stream":`+tc.stream+tc.previous+`}`)
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			errObj := answeredError(t, raw, tc.stream == "true")
			// A Responses stream's response.failed carries the code in the
			// message ("upstream_unavailable: …").
			msg := errObj.Get("code").Str + ": " + errObj.Get("message").Str
			if !strings.Contains(msg, "upstream_unavailable: ") || !strings.Contains(msg, tc.want) || strings.Contains(msg, tc.not) {
				t.Fatalf("client got %d %s; want upstream_unavailable saying %q", resp.StatusCode, raw, tc.want)
			}
			if tc.stream == "false" && resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("client got %d %s; want 503", resp.StatusCode, raw)
			}
		})
	}
}

// TestReplayLogLinesCountTheReplaysSent: the log's "replaying on …" lines
// are the replays sent, one per extra upstream request; a replay the policy
// asked for that had no target or attempt left is logged once as not sent,
// never as replaying. One target replayed on itself runs out of attempts
// (the bound of a one-target route is 3); two targets replayed on another
// run out of targets.
func TestReplayLogLinesCountTheReplaysSent(t *testing.T) {
	fail := upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusInternalServerError,
		upstreamtest.ErrorBody("The server had an error.", "server_error", "server_error", "")).AfterCreated()
	for _, tc := range []struct {
		name    string
		verdict hostabi.ReplayVerdict
		targets []gateway.RouteTarget
		line    string
		sent    int    // upstream requests
		notSent string // the line of the replay asked last
	}{
		{"same upstream, one target", hostabi.ReplaySameUpstream, []gateway.RouteTarget{{Upstream: "P"}},
			"replaying on the same upstream", 3, "replay not sent: no target or attempt left for it: upstream=P code=server_error replay=3"},
		{"another upstream, two targets", hostabi.ReplayOtherUpstream, []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B"}},
			"replaying on another upstream", 2, "replay not sent: no target or attempt left for it: upstream=B code=server_error replay=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &overridePolicy{override: func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) {
				return tc.verdict, in.Phase == hostabi.PhaseBeforeContent
			}}
			h := newHarness(t, harnessConfig{
				upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}},
				opts:      gateway.Options{Policy: p, Routes: []gateway.Route{{Models: []string{"fast"}, Targets: tc.targets}}},
			})
			for _, up := range h.ups {
				up.Enqueue(fail, fail, fail, fail)
			}
			_, evs := h.responsesStream(`{"model":"fast","input":"hi","stream":true}`)
			if last := assertOneTerminal(t, evs); last.typ != "response.failed" {
				t.Fatalf("terminal %s; want response.failed", last.data)
			}
			sent := len(responsesRequests(h))
			if sent != tc.sent {
				t.Fatalf("upstreams got %d requests, want %d", sent, tc.sent)
			}
			logs := h.logs.String()
			if n := strings.Count(logs, "replaying on "); n != sent-1 || strings.Count(logs, tc.line) != n {
				t.Errorf("%d \"replaying on\" lines for %d upstream requests; want %d %q lines:\n%s", n, sent, sent-1, tc.line, grepLines(logs, "replay"))
			}
			if n := strings.Count(logs, "replay not sent"); n != 1 || !strings.Contains(logs, tc.notSent) {
				t.Errorf("%d \"replay not sent\" lines; want the last replay asked logged as not sent:\n%s", n, grepLines(logs, "replay"))
			}
		})
	}
}

// recoverVerdictPolicy hand-assembles a WebAssembly policy of ABI version 3
// (hostabi/ABI.md) whose sluice_recover answers every input with the bare
// output {"verdict":v}.
func recoverVerdictPolicy(v int) []byte {
	const outAt, inputAt = 256, 65536
	out := `{"verdict":` + strconv.Itoa(v) + `}`
	i32, i64 := byte(0x7f), byte(0x7e)
	m := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	// 1 type: 0 () → i32, 1 (i32) → i32, 2 (i32 i32) → i64
	m = wSection(m, 1, wVec(wFunctype(nil, []byte{i32}), wFunctype([]byte{i32}, []byte{i32}), wFunctype([]byte{i32, i32}, []byte{i64})))
	// 3 function: 0 abi_version (t0), 1 alloc (t1), 2 recover (t2)
	m = wSection(m, 3, wVec([]byte{0x00}, []byte{0x01}, []byte{0x02}))
	m = wSection(m, 5, wVec([]byte{0x00, 0x02})) // memory: 2 pages
	m = wSection(m, 7, wVec(
		wCat(wName("memory"), []byte{0x02, 0x00}),
		wCat(wName("sluice_abi_version"), []byte{0x00, 0x00}),
		wCat(wName("sluice_alloc"), []byte{0x00, 0x01}),
		wCat(wName("sluice_recover"), []byte{0x00, 0x02}),
	))
	abi := wCat([]byte{0x00}, wI32(3), []byte{0x0b})
	alloc := wCat([]byte{0x00},
		[]byte{0x20, 0x00}, wI32(inputAt), []byte{0x4b}, // local.get 0; i32.const; i32.gt_u
		[]byte{0x04, 0x40, 0x00, 0x0b}, // if: unreachable
		wI32(inputAt), []byte{0x0b})
	recoverFn := wCat([]byte{0x00}, []byte{0x42}, wSleb(int64(outAt)<<32|int64(len(out))), []byte{0x0b})
	m = wSection(m, 10, wVec(wSized(abi), wSized(alloc), wSized(recoverFn)))
	return wSection(m, 11, wVec(wData(outAt, []byte(out))))
}

// TestRecordedRecoverSaysWhatTheGatewayDid: a recover policy answering an
// ordinary upstream error with rehydrate, which only an owner_unavailable
// question can have (ABI.md §3.1), has the request failed closed: the
// client gets the fail_closed answer of a request without a conversation,
// and the recording line keeps the policy's verdict and says what the
// gateway did (effective_verdict, README "Recording").
func TestRecordedRecoverSaysWhatTheGatewayDid(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rec")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{RecordDir: dir, Logger: hclog.NewNullLogger(), PoolSize: 1, CallTimeout: 5 * time.Second,
		Embedded: map[string][]byte{"05-rehydrate.wasm": recoverVerdictPolicy(int(hostabi.RecoverRehydrate))}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})
	h.ups["A"].Enqueue(upstreamtest.Script{Status: http.StatusBadRequest, Body: upstreamtest.ErrorBody("refused", "invalid_request_error", "foo", "")})
	resp := h.post("/v1/responses", `{"model":"m","input":"x"}`)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(gjson.GetBytes(raw, "error.message").Str, "recover policy failed the request closed") {
		t.Fatalf("client got %d %s; want the 503 of a fail_closed", resp.StatusCode, raw)
	}
	_, all := readRecords(t, dir)
	var recovers []string
	for _, line := range strings.Split(strings.TrimSpace(all), "\n") {
		if gjson.Get(line, "hook").Str == "recover" {
			recovers = append(recovers, line)
		}
	}
	if len(recovers) != 1 || gjson.Get(recovers[0], "verdict").Str != "rehydrate" ||
		gjson.Get(recovers[0], "effective_verdict").Str != "fail_closed" || gjson.Get(recovers[0], "decided_by").Str != "05-rehydrate" {
		t.Fatalf("recover lines %q; want one with the policy's verdict rehydrate and effective_verdict fail_closed", recovers)
	}
}

package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// overridePolicy is the built-in policy with the replay answers of override
// where it has one (ok), recording every replay input it is asked.
type overridePolicy struct {
	gateway.BuiltinPolicy
	override func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool)

	mu  sync.Mutex
	ins []hostabi.ReplayInput
}

func (p *overridePolicy) Replay(ctx context.Context, in hostabi.ReplayInput) hostabi.ReplayOutput {
	p.mu.Lock()
	p.ins = append(p.ins, in)
	p.mu.Unlock()
	if v, ok := p.override(in); ok {
		return hostabi.ReplayOutput{Verdict: v}
	}
	return hostabi.DefaultReplay(in)
}

func (p *overridePolicy) asked() []hostabi.ReplayInput {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]hostabi.ReplayInput(nil), p.ins...)
}

// policyRouteHarness is routeHarness with a replay policy: "fast" tries P
// with the client's model, then B with gpt-4.1.
func policyRouteHarness(t *testing.T, p gateway.Policy) *harness {
	t.Helper()
	return newHarness(t, harnessConfig{
		upstreams: []upstreamtest.Options{{Name: "P"}, {Name: "B"}},
		pool:      upstream.Options{},
		opts: gateway.Options{Policy: p, Routes: []gateway.Route{
			{Models: []string{"fast"}, Targets: []gateway.RouteTarget{{Upstream: "P"}, {Upstream: "B", Model: "gpt-4.1"}},
				FirstByte: routeTimeout, FirstToken: routeTimeout},
		}},
	})
}

// TestReplayPolicyOverridesTheTable: the failure table is the replay
// policy's default, not the gateway's: a policy that answers otherwise is
// obeyed before the headers and before content, and it is told the facts.
func TestReplayPolicyOverridesTheTable(t *testing.T) {
	const (
		no    = hostabi.ReplayNo
		other = hostabi.ReplayOtherUpstream
		same  = hostabi.ReplaySameUpstream
	)
	rows := []struct {
		name     string
		override func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool)
		p        []upstreamtest.Script
		stream   bool
		servedBy string // "" → the failure reaches the client
		status   int    // the client's status when servedBy == ""
		code     string // the client's error code when servedBy == ""
		pCalls   int
		bCalls   int
		maxTime  time.Duration
		check    func(t *testing.T, ins []hostabi.ReplayInput)
	}{
		{name: "500: fail instead of retrying", p: []upstreamtest.Script{upstreamtest.Status5xx(500)},
			override: func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) {
				return no, in.FailureClass == hostabi.FailureServerError
			},
			status: http.StatusBadGateway, code: "upstream_unavailable", pCalls: 1,
			check: func(t *testing.T, ins []hostabi.ReplayInput) {
				want := hostabi.ReplayInput{Surface: hostabi.SurfaceResponsesJSON, Upstream: "P", HTTPStatus: 500,
					Phase: hostabi.PhaseBeforeHeaders, FailureClass: hostabi.FailureServerError, TargetIndex: 0, TargetCount: 2,
					HasNextTarget: true, NextModelDiffers: true, MaxWaitMillis: 5000, Continuation: gateway.ContinuationAuto}
				if len(ins) != 1 || ins[0] != want {
					t.Fatalf("asked %+v\nwant %+v", ins, want)
				}
			}},
		{name: "503: the same target again instead of the next", p: []upstreamtest.Script{upstreamtest.Status5xx(503)},
			override: func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) {
				return same, in.FailureClass == hostabi.FailureOverloaded
			},
			servedBy: "P", pCalls: 2},
		{name: "429 Retry-After 1s: the next target instead of waiting", p: []upstreamtest.Script{upstreamtest.Status429(time.Second)},
			override: func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) {
				return other, in.FailureClass == hostabi.FailureRateLimit
			},
			servedBy: "B", pCalls: 1, bCalls: 1, maxTime: 900 * time.Millisecond,
			check: func(t *testing.T, ins []hostabi.ReplayInput) {
				if len(ins) != 1 || ins[0].RetryAfterMillis != 1000 || ins[0].HTTPStatus != 429 || ins[0].Code != "rate_limit_exceeded" {
					t.Fatalf("asked %+v", ins)
				}
			}},
		{name: "content filter: the next target instead of passing it through",
			p: []upstreamtest.Script{upstreamtest.Failure(upstreamtest.ShapeStatus, 400, contentFilterError())},
			override: func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) {
				return other, in.FailureClass == hostabi.FailureClientError
			},
			servedBy: "B", pCalls: 1, bCalls: 1},
		{name: "502 twice: the retry is told it is one", p: []upstreamtest.Script{upstreamtest.Status5xx(502), upstreamtest.Status5xx(502)},
			override: func(hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) { return 0, false },
			servedBy: "B", pCalls: 2, bCalls: 1,
			check: func(t *testing.T, ins []hostabi.ReplayInput) {
				if len(ins) != 2 || ins[0].SameTargetRetries != 0 || ins[1].SameTargetRetries != 1 || ins[1].TargetIndex != 0 {
					t.Fatalf("asked %+v", ins)
				}
			}},
		{name: "quota event before content: fail instead of the invisible replay", stream: true,
			p: []upstreamtest.Script{upstreamtest.QuotaEvent(upstreamtest.ShapeErrorEvent).AfterCreated()},
			override: func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) {
				return no, in.Phase == hostabi.PhaseBeforeContent
			},
			status: -1, code: "usage_limit_reached", pCalls: 1,
			check: func(t *testing.T, ins []hostabi.ReplayInput) {
				if len(ins) != 1 || ins[0].Phase != hostabi.PhaseBeforeContent || ins[0].FailureClass != hostabi.FailureQuota ||
					ins[0].Surface != hostabi.SurfaceResponsesStream || !ins[0].HasNextTarget {
					t.Fatalf("asked %+v", ins)
				}
			}},
		{name: "first_byte timeout: fail instead of the next target", p: []upstreamtest.Script{{Latency: 10 * time.Second}},
			override: func(in hostabi.ReplayInput) (hostabi.ReplayVerdict, bool) {
				return no, in.FailureClass == hostabi.FailureFirstByte
			},
			status: http.StatusBadGateway, code: "upstream_unavailable", pCalls: 1, maxTime: 5 * time.Second},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			p := &overridePolicy{override: row.override}
			h := policyRouteHarness(t, p)
			h.ups["P"].Enqueue(row.p...)
			start := time.Now()
			var o routeOutcome
			if row.stream {
				o = routeSurfaces[0].do(t, h, "fast")
			} else {
				o = postOutcome(t, h, "fast")
			}
			took := time.Since(start)
			if pc, bc := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); pc != row.pCalls || bc != row.bCalls {
				t.Fatalf("P called %d times, B %d; want %d, %d (client saw %+v)", pc, bc, row.pCalls, row.bCalls, o)
			}
			if row.servedBy == "" {
				if o.status != row.status || o.code != row.code {
					t.Fatalf("client saw %+v; want status %d code %q", o, row.status, row.code)
				}
			} else if o.status != 0 || o.text != "Hello from "+row.servedBy {
				t.Fatalf("client saw %+v; want %s's answer", o, row.servedBy)
			}
			if row.maxTime > 0 && took > row.maxTime {
				t.Fatalf("took %v, want at most %v", took, row.maxTime)
			}
			if row.check != nil {
				row.check(t, p.asked())
			}
		})
	}
}

// postOutcome sends a non-streaming request and reports it like a route
// surface does.
func postOutcome(t *testing.T, h *harness, model string) routeOutcome {
	t.Helper()
	resp := h.post("/v1/responses", `{"model":"`+model+`","input":"hi"}`)
	defer resp.Body.Close()
	var v struct {
		Model  string
		Output []struct {
			Content []struct{ Text string }
		}
		Error *struct {
			Code string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("%d: %v", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		o := routeOutcome{status: resp.StatusCode}
		if v.Error != nil {
			o.code = v.Error.Code
		}
		return o
	}
	o := routeOutcome{model: v.Model}
	for _, out := range v.Output {
		for _, c := range out.Content {
			o.text += c.Text
		}
	}
	return o
}

// TestWasmReplayPolicyOverridesTheTable: the same through a hand-written
// ABI-2 WebAssembly policy (plugins/testdata/replay_v2.wat), which never
// retries a 5xx and sends everything else with a next target to it.
func TestWasmReplayPolicyOverridesTheTable(t *testing.T) {
	rt := moduleFileRuntime(t, "10-table.wasm", "../plugins/testdata/replay_v2.wasm")

	h := policyRouteHarness(t, rt)
	h.ups["P"].Enqueue(upstreamtest.Status5xx(500))
	if o := postOutcome(t, h, "fast"); o.status != http.StatusBadGateway || o.code != "upstream_unavailable" ||
		h.ups["P"].RequestCount() != 1 || h.ups["B"].RequestCount() != 0 {
		t.Fatalf("500: client saw %+v, P called %d times, B %d; want the failure after one call", o, h.ups["P"].RequestCount(), h.ups["B"].RequestCount())
	}

	h2 := policyRouteHarness(t, rt)
	h2.ups["P"].Enqueue(upstreamtest.Status429(time.Second))
	start := time.Now()
	if o := postOutcome(t, h2, "fast"); o.text != "Hello from B" || time.Since(start) > 900*time.Millisecond || h2.ups["P"].RequestCount() != 1 {
		t.Fatalf("429 Retry-After 1s: client saw %+v after %v; want B at once", o, time.Since(start))
	}
	for _, st := range rt.Status() {
		if st.Name == "10-table" && (st.ABIVersion != 2 || st.Calls < 2 || st.Faults != 0) {
			t.Fatalf("policy status %+v", st)
		}
	}
}

// TestEmbeddedReplayPolicyKeepsTheTable: with the embedded first-party
// policies (replay.wasm, ABI 2 and later) deciding, the gateway follows the same
// failure table as with the built-in default (TestRouteFailureTable).
func TestEmbeddedReplayPolicyKeepsTheTable(t *testing.T) {
	rt := wasmPolicies(t, nil)
	rows := []struct {
		name           string
		p              []upstreamtest.Script
		served         string
		pCalls, bCalls int
	}{
		{"429 Retry-After 1s: wait, same target", []upstreamtest.Script{upstreamtest.Status429(time.Second)}, "P", 2, 0},
		{"429 Retry-After 30s: next target", []upstreamtest.Script{upstreamtest.Status429(30 * time.Second)}, "B", 1, 1},
		{"500 twice: one retry, then the next", []upstreamtest.Script{upstreamtest.Status5xx(500), upstreamtest.Status5xx(500)}, "B", 2, 1},
		{"503: next at once", []upstreamtest.Script{upstreamtest.Status5xx(503)}, "B", 1, 1},
		{"context_length_exceeded: another model", []upstreamtest.Script{upstreamtest.Failure(upstreamtest.ShapeStatus, 400, contextLengthError())}, "B", 1, 1},
		{"content filter: passed through", []upstreamtest.Script{upstreamtest.Failure(upstreamtest.ShapeStatus, 400, contentFilterError())}, "", 1, 0},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			h := policyRouteHarness(t, rt)
			h.ups["P"].Enqueue(row.p...)
			o := postOutcome(t, h, "fast")
			if pc, bc := h.ups["P"].RequestCount(), h.ups["B"].RequestCount(); pc != row.pCalls || bc != row.bCalls {
				t.Fatalf("P called %d times, B %d; want %d, %d (client saw %+v)", pc, bc, row.pCalls, row.bCalls, o)
			}
			switch {
			case row.served == "" && (o.status != 400 || o.code != "content_filter"):
				t.Fatalf("client saw %+v; want the 400 passed through", o)
			case row.served != "" && o.text != "Hello from "+row.served:
				t.Fatalf("client saw %+v; want %s's answer", o, row.served)
			}
		})
	}
	for _, st := range rt.Status() {
		if st.Name == "replay" && (st.ABIVersion < 2 || st.Calls == 0 || st.Faults != 0) {
			t.Fatalf("replay policy %+v", st)
		}
	}
}

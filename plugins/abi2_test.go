package plugins

import (
	"context"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/policies"
)

// conformanceInputs are replay inputs covering every failure class in every
// phase (with and without a next target, with a short Retry-After, a retried
// target, a tool call in flight), each with every ABI-2 member the class
// makes sense with.
func conformanceInputs() []hostabi.ReplayInput {
	classes := []string{hostabi.FailureTransport, hostabi.FailureServerError, hostabi.FailureOverloaded, hostabi.FailureRateLimit,
		hostabi.FailureQuota, hostabi.FailureFirstByte, hostabi.FailureFirstToken, hostabi.FailureContextLength,
		hostabi.FailureClientError, hostabi.FailureAuth, hostabi.FailureCut, hostabi.FailureStall, hostabi.FailureErrorEvent,
		hostabi.FailureOther}
	status := map[string]int{hostabi.FailureServerError: 502, hostabi.FailureOverloaded: 503, hostabi.FailureRateLimit: 429,
		hostabi.FailureQuota: 429, hostabi.FailureContextLength: 400, hostabi.FailureClientError: 400, hostabi.FailureAuth: 401}
	code := map[string]string{hostabi.FailureRateLimit: "rate_limit_exceeded", hostabi.FailureQuota: "insufficient_quota",
		hostabi.FailureContextLength: "context_length_exceeded", hostabi.FailureClientError: "content_filter",
		hostabi.FailureTransport: "transport", hostabi.FailureCut: "transport", hostabi.FailureErrorEvent: "vendor_x"}
	var out []hostabi.ReplayInput
	for _, p := range []string{hostabi.PhaseBeforeHeaders, hostabi.PhaseBeforeContent, hostabi.PhaseAfterContent} {
		for _, c := range classes {
			for variant := 0; variant < 4; variant++ {
				in := hostabi.ReplayInput{Surface: hostabi.SurfaceResponsesStream, Upstream: "primary", Code: firstNonEmpty(code[c], c),
					HTTPStatus: status[c], Phase: p, FailureClass: c, TargetIndex: 0, TargetCount: 2, HasNextTarget: true,
					MaxWaitMillis: 5000, Continuation: "auto", PrefillAllowed: true}
				switch variant {
				case 1:
					in.HasNextTarget = false
				case 2:
					in.RetryAfterMillis, in.SameTargetRetries, in.TargetIndex = 1000, 1, 1
				case 3:
					in.RetryAfterMillis, in.NextModelDiffers = 800, true
					if p == hostabi.PhaseAfterContent {
						in.BytesSent, in.ItemsSent, in.ToolCallInFlight, in.HasTools = 1234, 2, true, true
					}
				}
				out = append(out, in)
			}
		}
	}
	return out
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// watModel is testdata/replay_v2.wat written in Go: the answer a guest that
// scans the documented bytes (ABI.md §3) must give. decided is false for a
// defer.
func watModel(in hostabi.ReplayInput) (out hostabi.ReplayOutput, decided bool) {
	switch {
	case in.FailureClass == hostabi.FailureServerError:
		return hostabi.ReplayOutput{Verdict: hostabi.ReplayNo}, true
	case in.ToolCallInFlight:
		return hostabi.ReplayOutput{Verdict: hostabi.ReplayContinueRestart}, true
	case in.Phase == hostabi.PhaseAfterContent:
		return hostabi.ReplayOutput{Verdict: hostabi.ReplayContinuePrefill, PenaltyMillis: 7}, true
	case in.HasNextTarget:
		return hostabi.ReplayOutput{Verdict: hostabi.ReplayOtherUpstream}, true
	}
	return hostabi.ReplayOutput{}, false
}

// TestReplayABI2Conformance runs the same ABI-2 replay inputs through the
// four kinds of policy: the built-in default (no module), the first-party
// Go guest (the embedded replay.wasm, built with the SDK), the
// hand-written WAT guest (testdata/replay_v2.wat) and the AssemblyScript
// guest (examples/policies/20-as-replay.wasm, built with sdk/assemblyscript). Each must answer what its
// Go model says: every member has to cross the encoding intact and the
// continue verdicts have to come back, bare and as JSON.
func TestReplayABI2Conformance(t *testing.T) {
	emb := policies.Defaults()
	guests := []struct {
		name   string
		policy string // the module that must decide; "" for the built-in
		mods   map[string][]byte
		model  func(hostabi.ReplayInput) (hostabi.ReplayOutput, bool)
	}{
		{"built-in", "", nil, func(in hostabi.ReplayInput) (hostabi.ReplayOutput, bool) { return hostabi.DefaultReplay(in), false }},
		{"go guest", "replay", map[string][]byte{"replay.wasm": emb["replay.wasm"]},
			func(in hostabi.ReplayInput) (hostabi.ReplayOutput, bool) {
				return hostabi.EmbeddedReplay(in, nil), true
			}},
		{"wat guest", "wat", map[string][]byte{"wat.wasm": fixture(t, "replay_v2")}, watModel},
		// The AssemblyScript example answers the WAT fixture's rules, but
		// after decoding every member with the AssemblyScript SDK.
		{"assemblyscript guest", "as", map[string][]byte{"as.wasm": asExample(t)}, watModel},
	}
	inputs := conformanceInputs()
	for _, g := range guests {
		t.Run(g.name, func(t *testing.T) {
			r := newRuntime(t, Options{Embedded: g.mods})
			for _, st := range r.Status() {
				if st.State != StateActive || st.ABIVersion < 2 {
					t.Fatalf("status %+v", st)
				}
			}
			for _, in := range inputs {
				want, decided := g.model(in)
				if !decided {
					want = hostabi.DefaultReplay(in)
				}
				out, tr := r.ReplayTrace(context.Background(), in)
				if out != want {
					t.Errorf("%s × %s %+v:\n got %+v (%+v)\nwant %+v", in.FailureClass, in.Phase, in, out, tr, want)
					continue
				}
				if decided && (tr.Outcome != "decided" || tr.Policy != g.policy) || !decided && tr.Outcome != "default" {
					t.Errorf("%s × %s: trace %+v", in.FailureClass, in.Phase, tr)
				}
			}
			if st, ok := statusOf(r, g.policy); g.policy != "" && (!ok || st.Faults != 0 || st.Errors != 0) {
				t.Fatalf("status %+v", st)
			}
		})
	}
}

// TestReplayVersion1Module: a version-1 module keeps getting exactly what
// version 1 sent it, only for what version 1 asked about (before content);
// for before_headers and after_content failures it is skipped like a defer.
// The probe traps if it ever sees an ABI-2 member.
func TestReplayVersion1Module(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{
		"10-probe.wasm": fixture(t, "replay_v1probe"),
		"20-json.wasm":  fixture(t, "replay_json"), // the committed v1 fixture
	}})
	for _, st := range r.Status() {
		if st.State != StateActive || st.ABIVersion != 1 {
			t.Fatalf("status %+v", st)
		}
	}
	ctx := context.Background()
	for _, in := range conformanceInputs() {
		out, tr := r.ReplayTrace(ctx, in)
		switch in.Phase {
		case hostabi.PhaseBeforeContent:
			if out.Verdict != hostabi.ReplayOtherUpstream || tr.Policy != "10-probe" || tr.Outcome != "decided" {
				t.Fatalf("before content: %+v %+v", out, tr)
			}
		default:
			want := hostabi.DefaultReplay(in)
			if out != want || tr.Outcome != "default" || len(tr.Steps) != 2 || tr.Steps[0].Outcome != "skipped" || tr.Steps[1].Outcome != "skipped" {
				t.Fatalf("%s: %+v %+v, want the built-in %+v", in.Phase, out, tr, want)
			}
		}
	}
	// Without a phase (a version-1 caller) too.
	if out, tr := r.ReplayTrace(ctx, hostabi.ReplayInput{Code: "x"}); out.Verdict != hostabi.ReplayOtherUpstream || tr.Policy != "10-probe" {
		t.Fatalf("no phase: %+v %+v", out, tr)
	}
	st, _ := statusOf(r, "10-probe")
	if st.Faults != 0 || st.Calls == 0 {
		t.Fatalf("the probe saw an ABI-2 member: %+v", st)
	}
}

// TestReplayMixedVersions: modules of both versions in one chain, asked in
// file order, each in its own version.
func TestReplayMixedVersions(t *testing.T) {
	r := newRuntime(t, Options{Embedded: map[string][]byte{
		"10-v1.wasm": fixture(t, "replay_json"), // v1: {"verdict":1,"penalty_ms":1234}
		"20-v2.wasm": fixture(t, "replay_v2"),
	}})
	ctx := context.Background()
	in := hostabi.ReplayInput{Phase: hostabi.PhaseAfterContent, FailureClass: hostabi.FailureCut, HasNextTarget: true}
	out, tr := r.ReplayTrace(ctx, in)
	if out.Verdict != hostabi.ReplayContinuePrefill || out.PenaltyMillis != 7 || tr.Policy != "20-v2" || tr.Steps[0].Outcome != "skipped" {
		t.Fatalf("after content: %+v %+v", out, tr)
	}
	in.Phase = hostabi.PhaseBeforeContent
	out, tr = r.ReplayTrace(ctx, in)
	if out.Verdict != hostabi.ReplayOtherUpstream || out.PenaltyMillis != 1234 || tr.Policy != "10-v1" {
		t.Fatalf("before content: %+v %+v", out, tr)
	}
}

package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/sse"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
	"github.com/sluice-gw/sluice/plugins"
	"github.com/sluice-gw/sluice/policies"
)

// wasmPolicies loads the embedded first-party policies in the real runtime.
func wasmPolicies(t *testing.T, config map[string]json.RawMessage) *plugins.Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{Embedded: policies.Defaults(), Config: config, Logger: hclog.NewNullLogger(), CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("loading policies: %v", err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	if !rt.Ready() {
		t.Fatal("runtime not ready")
	}
	return rt
}

// moduleRuntime is the plugin runtime with the one module mod, loaded
// under name (its file name: the hook order and the policy's name).
func moduleRuntime(t *testing.T, name string, mod []byte) *plugins.Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{Embedded: map[string][]byte{name: mod}, Logger: hclog.NewNullLogger(),
		CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// moduleFileRuntime is moduleRuntime with the module read from path.
func moduleFileRuntime(t *testing.T, name, path string) *plugins.Runtime {
	t.Helper()
	mod, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return moduleRuntime(t, name, mod)
}

func TestWasmPoliciesDriveTheGateway(t *testing.T) {
	rt := wasmPolicies(t, map[string]json.RawMessage{
		"rewrite": json.RawMessage(`{"model_aliases":{"fast":"gpt-fake-1"},"strip_tool_types":["web_search_preview"]}`),
	})
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt, Store: st},
		upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}}})

	t.Run("rewrite edits what the upstream receives", func(t *testing.T) {
		resp := h.post("/v1/responses", `{"model":"fast","input":"hi","tools":[{"type":"web_search_preview"},{"type":"function","name":"f","parameters":{}}],"x_keep":1}`)
		resp.Body.Close()
		var got struct {
			Model string
			Tools []struct{ Type string }
			XKeep int `json:"x_keep"`
		}
		reqs := append(h.ups["A"].Requests(), h.ups["B"].Requests()...)
		_ = json.Unmarshal(reqs[len(reqs)-1].Body, &got)
		if got.Model != "gpt-fake-1" || len(got.Tools) != 1 || got.Tools[0].Type != "function" || got.XKeep != 1 {
			t.Fatalf("upstream received %s", reqs[len(reqs)-1].Body)
		}
	})

	t.Run("recover turns a lost previous response into stream_incomplete", func(t *testing.T) {
		_, id := h.turn("", nil)
		own := owner(id)
		h.ups[own].Enqueue(upstreamtest.PreviousNotFound(upstreamtest.ShapeStatus))
		evs, _ := h.turn(id, nil)
		if last := assertOneTerminal(t, evs); last.code != "stream_incomplete" {
			t.Fatalf("%s", last.data)
		}
	})

	t.Run("pass forwards a near miss unchanged", func(t *testing.T) {
		body := upstreamtest.ErrorBody("Previous response with id 'x' not found.", "invalid_request_error", "invalid_request_error", "input")
		release := h.pool.Get("B").Acquire() // A is picked
		defer release()
		h.ups["A"].Enqueue(upstreamtest.Failure(upstreamtest.ShapeStatus, 400, body))
		resp := h.post("/v1/responses", `{"model":"gpt-fake-1","input":"x"}`)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || string(got) != string(body) {
			t.Fatalf("%d %s", resp.StatusCode, got)
		}
	})

	t.Run("replay sends a quota failure before created elsewhere", func(t *testing.T) {
		release := h.pool.Get("B").Acquire() // A is picked first
		defer release()
		h.ups["A"].Enqueue(upstreamtest.QuotaEvent(upstreamtest.ShapeFailed))
		_, evs := h.responsesStream(respBody)
		var text string
		for _, ev := range evs {
			var v struct{ Type, Delta string }
			_ = json.Unmarshal(ev.data, &v)
			text += v.Delta
		}
		if last := assertOneTerminal(t, evs); last.typ != "response.completed" || text != "Hello from B" {
			t.Fatalf("%s %q", last.typ, text)
		}
	})

	var calls int64
	for _, ps := range rt.Status() {
		b, _ := json.Marshal(ps)
		if strings.Contains(string(b), `"state":"active"`) {
			var v struct{ Calls int64 }
			_ = json.Unmarshal(b, &v)
			calls += v.Calls
		}
	}
	if calls == 0 {
		t.Fatal("no policy calls counted: the gateway did not go through the Wasm runtime")
	}
}

// swapAnswer is what one request of TestPolicyHotSwapUnderLoad got.
type swapAnswer struct {
	start, end int    // the epoch observed live when it was sent; the last epoch begun when it ended
	probe      bool   // the upstream failed it on purpose (a recoverable error)
	rewriteVer int    // the version whose rewrite reached the upstream (model-N); -1 unknown
	recoverVer int    // probes: the version whose recover hook answered; -1 unknown
	bad        string // why it is neither a success nor an attributable probe
}

// modelVersion is N for "model-N", else -1.
func modelVersion(model string) int {
	switch model {
	case "model-0":
		return 0
	case "model-1":
		return 1
	case "model-2":
		return 2
	}
	return -1
}

// policyStatus is the status of the named policy (zero when not loaded).
func policyStatus(rt *plugins.Runtime, name string) plugins.PolicyStatus {
	for _, st := range rt.Status() {
		if st.Name == name {
			return st
		}
	}
	return plugins.PolicyStatus{}
}

// TestPolicyHotSwapUnderLoad swaps a policy file in the watched directory
// while requests stream through the gateway, and checks every answer against
// the versions that were live while it ran.
//
// The policy (swapPolicy) rewrites the model to model-<version> and recovers
// errors with the code swap_<version> (swap_one, swap_two). With no policy
// file, the embedded rewrite policy maps the alias "fast" to model-0 and the
// built-in recover passes the error on (its code swap_probe): version 0. The
// upstream is strict: the alias itself, or any model it does not list, is a
// 404, and every upstream request is checked for an unrewritten model.
//
// Epochs: 0 no file; 1 v1; 2 v2 over v1's name; 3 v1 again; 4 garbage
// written over the live file's name (rejected: v1 must keep serving); 5 the
// file deleted (version 0 again). In each epoch, recoverable errors are queued
// until requests sent and answered within that epoch have been recovered by
// its version, and successes answered within it carry its model. Only
// successes count as served.
func TestPolicyHotSwapUnderLoad(t *testing.T) {
	const policyName = "10-swap"
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{Embedded: policies.Defaults(), PolicyDir: dir, Logger: hclog.NewNullLogger(),
		CallTimeout: 5 * time.Second, Debounce: 20 * time.Millisecond,
		Config: map[string]json.RawMessage{"rewrite": json.RawMessage(`{"model_aliases":{"fast":"model-0"}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) }) // after the workers stop (cleanups run last-in first-out)
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}, upstreams: []upstreamtest.Options{
		{Name: "A", Models: []string{"model-0", "model-1", "model-2"}, StrictModels: true}}})
	up := h.ups["A"]
	probe := upstreamtest.Failure(upstreamtest.ShapeStatus, 400,
		upstreamtest.ErrorBody("swap probe", "invalid_request_error", "swap_probe", "")).AfterCreated()
	v1, v2 := swapPolicy(1), swapPolicy(2)
	versionOf := []int{0, 1, 2, 1, 1, 0} // by epoch

	var observed, begun atomic.Int32 // epochs
	var mu sync.Mutex
	var answers []swapAnswer
	type tally struct{ ok, probes int }
	within := make([]tally, len(versionOf)) // answers sent and received within one epoch
	var bad []swapAnswer

	client := &http.Client{Timeout: 30 * time.Second}
	one := func() (a swapAnswer) {
		a = swapAnswer{start: int(observed.Load()), rewriteVer: -1, recoverVer: -1}
		defer func() { a.end = int(begun.Load()) }()
		resp, err := client.Post(h.url+"/v1/responses", "application/json", strings.NewReader(`{"model":"fast","input":"hi","stream":true}`))
		if err != nil {
			a.bad = err.Error()
			return a
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			a.bad = fmt.Sprintf("status %d: %s", resp.StatusCode, b)
			return a
		}
		r := sse.NewReader(resp.Body, 1<<20)
		var terminal string
		var final []byte
		for {
			ev, err := r.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				a.bad = "reading the stream: " + err.Error()
				return a
			}
			typ := gjson.GetBytes(ev.Data, "type").Str
			if typ == "response.created" {
				a.rewriteVer = modelVersion(gjson.GetBytes(ev.Data, "response.model").Str)
			}
			if isTerminal(typ) {
				if terminal != "" {
					a.bad = "two terminal events"
					return a
				}
				terminal, final = typ, bytes.Clone(ev.Data)
			}
		}
		switch terminal {
		case "response.completed":
			if a.rewriteVer = modelVersion(gjson.GetBytes(final, "response.model").Str); a.rewriteVer < 0 {
				a.bad = "completed for an unexpected model: " + string(final)
			}
		case "response.failed":
			a.probe = true
			code := gatewayCode(gjson.GetBytes(final, "response.error.code").Str, gjson.GetBytes(final, "response.error.message").Str)
			switch code {
			case "swap_probe":
				a.recoverVer = 0
			case "swap_one":
				a.recoverVer = 1
			case "swap_two":
				a.recoverVer = 2
			default:
				a.bad = "failed: " + string(final)
			}
		default:
			a.bad = "no terminal event"
		}
		return a
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := one()
				mu.Lock()
				answers = append(answers, a)
				switch {
				case a.bad != "":
					bad = append(bad, a)
				case a.start == a.end && a.probe:
					within[a.start].probes++
				case a.start == a.end:
					within[a.start].ok++
				}
				mu.Unlock()
			}
		}()
	}
	// Registered after the harness and the runtime: the workers stop first,
	// also when the test fails half-way.
	t.Cleanup(stopWorkers)

	// dwell keeps epoch e until enough requests were sent and answered
	// within it, queueing recoverable errors as needed.
	dwell := func(e int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			c, nbad := within[e], len(bad)
			var first []swapAnswer
			if nbad > 0 {
				first = slices.Clone(bad[:min(nbad, 5)])
			}
			mu.Unlock()
			if nbad > 0 {
				stopWorkers()
				t.Fatalf("epoch %d: %d requests failed, first: %+v", e, nbad, first)
			}
			if c.ok >= 20 && c.probes >= 2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("epoch %d: only %d successes and %d recoverable errors sent and answered within it", e, c.ok, c.probes)
			}
			if c.probes < 2 && up.Pending() == 0 {
				up.Enqueue(probe)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitStatus := func(what string, ok func(plugins.PolicyStatus, bool) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var st plugins.PolicyStatus
			found := false
			for _, s := range rt.Status() {
				if s.Name == policyName {
					st, found = s, true
				}
			}
			if ok(st, found) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, rt.Status())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	sum := func(b []byte) string { return fmt.Sprintf("%x", sha256.Sum256(b)) }
	serving := func(b []byte, state string) func(plugins.PolicyStatus, bool) bool {
		return func(st plugins.PolicyStatus, found bool) bool {
			return found && st.State == state && st.SHA256 == sum(b)
		}
	}
	file := filepath.Join(dir, policyName+".wasm")
	writeAtomic := func(b []byte) func() {
		return func() {
			tmp := filepath.Join(dir, "."+policyName+".tmp")
			if err := os.WriteFile(tmp, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, file); err != nil {
				t.Fatal(err)
			}
		}
	}
	step := func(e int, what string, change func(), live func(plugins.PolicyStatus, bool) bool) {
		t.Helper()
		begun.Store(int32(e))
		change()
		waitStatus(what, live)
		observed.Store(int32(e))
		dwell(e)
	}

	dwell(0)
	step(1, "v1 active", writeAtomic(v1), serving(v1, plugins.StateActive))
	step(2, "v2 active", writeAtomic(v2), serving(v2, plugins.StateActive))
	step(3, "v1 active again", writeAtomic(v1), serving(v1, plugins.StateActive))
	step(4, "the garbage rejected, v1 kept", func() { // in place, over the live file
		if err := os.WriteFile(file, []byte("this is not wasm"), 0o600); err != nil {
			t.Fatal(err)
		}
	}, func(st plugins.PolicyStatus, found bool) bool {
		return found && st.State == plugins.StateActive && st.Rejected != ""
	})
	if st := policyStatus(rt, policyName); st.SHA256 != sum(v1) {
		t.Errorf("after the rejected file the status shows %+v, want v1 (%s) still serving", st, sum(v1))
	}
	step(5, "unloaded", func() {
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
	}, func(_ plugins.PolicyStatus, found bool) bool { return !found })
	stopWorkers()

	// Every answer came from a version live at some point while it ran.
	var served, probes int
	for _, a := range answers {
		if a.bad != "" {
			t.Errorf("epochs %d..%d: %s", a.start, a.end, a.bad)
			continue
		}
		allowed := versionOf[a.start : a.end+1]
		if a.rewriteVer >= 0 && !slices.Contains(allowed, a.rewriteVer) {
			t.Errorf("sent in epoch %d, answered in epoch %d (versions %v), but rewritten by version %d", a.start, a.end, allowed, a.rewriteVer)
		}
		if a.probe && !slices.Contains(allowed, a.recoverVer) {
			t.Errorf("sent in epoch %d, answered in epoch %d (versions %v), but recovered by version %d", a.start, a.end, allowed, a.recoverVer)
		}
		if a.probe {
			probes++
		} else {
			served++
		}
	}
	// Nothing reached the upstream without a rewrite.
	unrewritten := 0
	for _, r := range up.Requests() {
		if modelVersion(r.Model) < 0 {
			unrewritten++
		}
	}
	if unrewritten != 0 {
		t.Errorf("%d of %d upstream requests carried a model no policy version writes (the alias unrewritten)", unrewritten, up.RequestCount())
	}
	t.Logf("%d requests served and %d errors recovered across 3 swaps, a rejected file and an unload; per epoch (within): %+v", served, probes, within)
}

// TestFirstEventRateLimitCoolsDownAsTheTableSays: a rate limit or quota
// that arrives as the stream's first event without a wait hint, and is
// replayed on the next target, cools the failed target down as the same
// failure before the headers does (README's failure table: 5 s for a rate
// limit, 60 s for quota, ±20% jitter), not for a flat penalty of the
// embedded replay policy's own.
func TestFirstEventRateLimitCoolsDownAsTheTableSays(t *testing.T) {
	cases := []struct {
		code     string
		min, max time.Duration
	}{
		{"rate_limit_exceeded", 4 * time.Second, 6 * time.Second},
		{"insufficient_quota", 48 * time.Second, 72 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"error": map[string]any{"type": "requests", "code": c.code, "message": "Limit reached."}})
			h := newHarness(t, harnessConfig{upstreams: []upstreamtest.Options{{Name: "A"}, {Name: "B"}},
				opts: gateway.Options{Policy: wasmPolicies(t, nil), Routes: []gateway.Route{{Models: []string{"m"}, Targets: []gateway.RouteTarget{{Upstream: "A"}, {Upstream: "B"}}}}}})
			h.ups["A"].SetDefault(upstreamtest.Failure(upstreamtest.ShapeErrorEvent, http.StatusTooManyRequests, body))
			resp := h.post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || len(h.ups["B"].Requests()) != 1 {
				t.Fatalf("%d %s, B asked %d times; want B's answer", resp.StatusCode, b, len(h.ups["B"].Requests()))
			}
			tg, ok := h.target("A", "m")
			cooling, err := time.ParseDuration(tg.CoolingFor)
			if !ok || err != nil || cooling < c.min-time.Second || cooling > c.max {
				t.Fatalf("A's target %+v (%v): cooling for %v, want within [%v, %v]", tg, ok, cooling, c.min, c.max)
			}
		})
	}
}

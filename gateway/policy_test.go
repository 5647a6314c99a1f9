package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/gateway/upstreamtest"
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

// TestPolicyHotSwapUnderLoad swaps policy files (add, replace, a bad file,
// delete) in the watched directory while requests stream through the
// gateway: no request may fail, and the bad file is rejected while the
// previous version keeps serving.
func TestPolicyHotSwapUnderLoad(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := plugins.New(ctx, plugins.Options{Embedded: policies.Defaults(), PolicyDir: dir, Logger: hclog.NewNullLogger(),
		CallTimeout: 5 * time.Second, Debounce: 20 * time.Millisecond,
		Config: map[string]json.RawMessage{"rewrite": json.RawMessage(`{"model_aliases":{"fast":"gpt-fake-1"}}`)}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})

	wat, err := os.ReadFile("../examples/policies/05-wat-recover.wasm")
	if err != nil {
		t.Fatal(err)
	}
	vendor, err := os.ReadFile("../examples/policies/10-vendor-overloaded.wasm")
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var failed, served atomic.Int64
	var wg sync.WaitGroup
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
				resp, err := http.Post(h.url+"/v1/responses", "application/json", strings.NewReader(`{"model":"fast","input":"hi","stream":true}`))
				if err != nil {
					failed.Add(1)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !strings.Contains(string(body), "response.completed") {
					failed.Add(1)
				}
				served.Add(1)
			}
		}()
	}
	write := func(name string, b []byte) {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil { // atomic-rename write
			t.Fatal(err)
		}
	}
	waitFor := func(what string, ok func([]plugins.PolicyStatus) bool) {
		deadline := time.Now().Add(20 * time.Second)
		for !ok(rt.Status()) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, rt.Status())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	rejected := func(name string) func([]plugins.PolicyStatus) bool {
		return func(sts []plugins.PolicyStatus) bool {
			for _, st := range sts {
				if st.Name == name && st.State == plugins.StateRejected {
					return true
				}
			}
			return false
		}
	}
	version := func(b []byte) func([]plugins.PolicyStatus) bool {
		sum := fmt.Sprintf("%x", sha256.Sum256(b))
		return func(sts []plugins.PolicyStatus) bool {
			for _, st := range sts {
				if st.Name == "10-vendor-overloaded" && st.State == plugins.StateActive && st.SHA256 == sum {
					return true
				}
			}
			return false
		}
	}
	write("10-vendor-overloaded.wasm", vendor)
	waitFor("v1 active", version(vendor))
	write("10-vendor-overloaded.wasm", wat) // v2: other bytes, same name
	waitFor("v2 active", version(wat))
	write("10-vendor-overloaded.wasm", vendor) // back to v1
	waitFor("v1 again", version(vendor))
	write("20-garbage.wasm", []byte("this is not wasm"))
	waitFor("garbage rejected", rejected("20-garbage"))
	if err := os.Remove(filepath.Join(dir, "10-vendor-overloaded.wasm")); err != nil {
		t.Fatal(err)
	}
	waitFor("unloaded", func(sts []plugins.PolicyStatus) bool {
		for _, st := range sts {
			if st.Name == "10-vendor-overloaded" {
				return false
			}
		}
		return true
	})
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || served.Load() == 0 {
		t.Fatalf("%d of %d requests failed during swaps", failed.Load(), served.Load())
	}
	t.Logf("%d requests served across 4 swaps, a rejection and an unload, none failed", served.Load())
}

package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A key created under the name of a deleted key is a new key (README "Keys,
// limits and usage"): it starts with no requests in flight, full buckets
// and an unspent budget, across a restart and across replicas sharing
// Redis; the deleted key's requests still in flight release their own
// slots, not the new key's. /admin/usage still reports by name.

// inputHold is a fake upstream that holds each request whose "input" has a
// gate (hold) until that gate is released; other requests pass at once.
type inputHold struct {
	*upstreamtest.Server
	mu    sync.Mutex
	gates map[string]*heldInput
}

type heldInput struct {
	arrived chan struct{} // one value per request held
	release func()
}

func newInputHold(t *testing.T) *inputHold {
	t.Helper()
	up := upstreamtest.NewHandler(upstreamtest.Options{Name: "A"})
	u := &inputHold{Server: up, gates: map[string]*heldInput{}}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		u.mu.Lock()
		g := u.gates[gjson.GetBytes(body, "input").Str]
		u.mu.Unlock()
		if g != nil && r.Method == http.MethodPost {
			gate := make(chan struct{})
			u.mu.Lock()
			prev := g.release
			g.release = func() { prev(); close(gate) }
			u.mu.Unlock()
			g.arrived <- struct{}{}
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		up.Handler().ServeHTTP(w, r)
	}))
	up.URL = front.URL + "/v1"
	t.Cleanup(front.Close)
	t.Cleanup(up.Close)
	t.Cleanup(func() { // first: nothing stays held
		u.mu.Lock()
		defer u.mu.Unlock()
		for _, g := range u.gates {
			g.release()
		}
	})
	return u
}

// hold makes the requests with this input wait at the upstream.
func (u *inputHold) hold(input string) *heldInput {
	u.mu.Lock()
	defer u.mu.Unlock()
	g := &heldInput{arrived: make(chan struct{}, 8), release: func() {}}
	u.gates[input] = g
	return g
}

// releaseAll lets every request held with input go on (once each).
func (u *inputHold) releaseAll(input string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	g := u.gates[input]
	g.release()
	g.release = func() {}
}

// waitArrived waits for a request held by g.
func waitArrived(t *testing.T, g *heldInput) {
	t.Helper()
	select {
	case <-g.arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
}

func deleteKey(t *testing.T, h *harness, name string) {
	t.Helper()
	if resp, b := send(t, h, http.MethodDelete, "/admin/keys/"+name, "", ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete %s: %d %s", name, resp.StatusCode, b)
	}
}

// streamIn sends a streaming request with input in the background; the
// returned function waits for its answer and returns its status.
func streamIn(t *testing.T, h *harness, cred, input string) func() int {
	t.Helper()
	done := make(chan int, 1)
	go func() {
		resp, _ := send(t, h, http.MethodPost, "/v1/responses", cred, `{"model":"gpt-fake-1","input":"`+input+`","stream":true}`)
		done <- resp.StatusCode
	}()
	return func() int {
		select {
		case code := <-done:
			return code
		case <-time.After(10 * time.Second):
			t.Fatal("the stream never ended")
			return 0
		}
	}
}

// checkRecreatedKeyConcurrency: the key "k8" (concurrent: 1) has a stream
// held open on old (a replica) when it is deleted and created again on
// admin; the new key is served on fresh at once, and once the old stream
// ended, its limit of 1 still holds (the old stream released its own slot,
// not the new key's).
func checkRecreatedKeyConcurrency(t *testing.T, up *inputHold, admin, old, fresh *harness) {
	t.Helper()
	const key = `{"name":"k8","limits":{"concurrent":1}}`
	oldSecret := createKey(t, admin, key)
	oldHeld := up.hold("old stream")
	oldEnded := streamIn(t, old, oldSecret, "old stream")
	waitArrived(t, oldHeld)
	resp, b := send(t, old, http.MethodPost, "/v1/responses", oldSecret, simple)
	limit(t, resp, b, gateway.CodeRateLimitExceeded) // the limit holds before the deletion

	deleteKey(t, admin, "k8")
	newSecret := createKey(t, admin, key)
	if resp, b := send(t, fresh, http.MethodPost, "/v1/responses", newSecret, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("the new key while the deleted key's stream is in flight: %d %s", resp.StatusCode, b)
	}

	up.releaseAll("old stream")
	if code := oldEnded(); code != http.StatusOK {
		t.Fatalf("the deleted key's stream: %d", code)
	}
	newHeld := up.hold("new stream")
	newEnded := streamIn(t, fresh, newSecret, "new stream")
	waitArrived(t, newHeld)
	for _, h := range []*harness{old, fresh} {
		resp, b := send(t, h, http.MethodPost, "/v1/responses", newSecret, simple)
		limit(t, resp, b, gateway.CodeRateLimitExceeded)
	}
	up.releaseAll("new stream")
	if code := newEnded(); code != http.StatusOK {
		t.Fatalf("the new key's stream: %d", code)
	}
	if resp, b := send(t, fresh, http.MethodPost, "/v1/responses", newSecret, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("the new key after its stream ended: %d %s", resp.StatusCode, b)
	}
}

func TestRecreatedKeyHasItsOwnConcurrencySlots(t *testing.T) {
	up := newInputHold(t)
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up.Server},
		opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: true, KeyStore: st, Usage: st}}})
	checkRecreatedKeyConcurrency(t, up, h, h, h)
}

func TestRecreatedKeyHasItsOwnConcurrencySlotsAcrossReplicas(t *testing.T) {
	up := newInputHold(t)
	r1, r2, _ := sharedLimitReplicasOf(t, redistest.Start(t), up.Server)
	checkRecreatedKeyConcurrency(t, up, r1, r1, r2)
}

// usageRequests is the requests /admin/usage reports for key today, and
// its rows.
func usageRequests(t *testing.T, h *harness, key string) (int64, int) {
	t.Helper()
	resp, b := send(t, h, http.MethodGet, "/admin/usage?key="+key, "", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("usage: %d %s", resp.StatusCode, b)
	}
	var rep usageReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep.Total.Requests, len(rep.Data)
}

// TestRecreatedKeyHasItsOwnBudget: a key that spent its tokens_per_day is
// deleted and created again under its name: the new key is served, in the
// same process and after a restart on the same Pebble directory (where the
// budget is read back from the usage totals), and its own budget still
// holds, across a restart too. /admin/usage reports the name's requests,
// the deleted keys' included, in one row.
func TestRecreatedKeyHasItsOwnBudget(t *testing.T) {
	dir := t.TempDir()
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	start := func() (*harness, func()) {
		st := openStore(t, dir)
		h := newHarness(t, harnessConfig{servers: map[string]*upstreamtest.Server{"A": up},
			opts: gateway.Options{Accounts: gateway.AccountsOptions{Required: true, KeyStore: st, Usage: st}}})
		return h, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := h.gw.Shutdown(ctx); err != nil { // writes the usage totals
				t.Fatal(err)
			}
			_ = st.Close()
		}
	}
	const key = `{"name":"k8","limits":{"tokens_per_day":5}}`
	spend := func(h *harness, secret, what string) {
		t.Helper()
		if resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, simple); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", what, resp.StatusCode, b)
		}
		resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, simple)
		limit(t, resp, b, gateway.CodeInsufficientQuota)
	}

	h, stop := start()
	spend(h, createKey(t, h, key), "the first key")
	deleteKey(t, h, "k8")
	spend(h, createKey(t, h, key), "the key created again")
	deleteKey(t, h, "k8")
	third := createKey(t, h, key)
	stop()

	h, stop = start()
	spend(h, third, "the key created again, after a restart")
	stop()

	h, _ = start()
	resp, b := send(t, h, http.MethodPost, "/v1/responses", third, simple)
	limit(t, resp, b, gateway.CodeInsufficientQuota) // its own tokens, read back from the store
	if requests, rows := usageRequests(t, h, "k8"); requests != 3 || rows != 1 {
		t.Fatalf("usage of k8: %d requests in %d rows, want 3 in 1", requests, rows)
	}
}

// TestRecreatedKeyHasItsOwnBudgetAcrossReplicas: the same with two
// replicas sharing Redis, the budget counted there and seeded from the
// usage totals in Redis.
func TestRecreatedKeyHasItsOwnBudgetAcrossReplicas(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	t.Cleanup(up.Close)
	r1, r2, _ := sharedLimitReplicasOf(t, redistest.Start(t), up)
	const key = `{"name":"k8","limits":{"tokens_per_day":5}}`
	old := createKey(t, r1, key)
	if resp, b := send(t, r1, http.MethodPost, "/v1/responses", old, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("the first key: %d %s", resp.StatusCode, b)
	}
	for _, h := range []*harness{r1, r2} {
		resp, b := send(t, h, http.MethodPost, "/v1/responses", old, simple)
		limit(t, resp, b, gateway.CodeInsufficientQuota)
	}
	usageRequests(t, r1, "k8") // r1's usage totals are in Redis: a new counter would be seeded from them
	deleteKey(t, r1, "k8")
	fresh := createKey(t, r1, key)
	if resp, b := send(t, r2, http.MethodPost, "/v1/responses", fresh, simple); resp.StatusCode != http.StatusOK {
		t.Fatalf("the key created again: %d %s", resp.StatusCode, b)
	}
	for _, h := range []*harness{r1, r2} {
		resp, b := send(t, h, http.MethodPost, "/v1/responses", fresh, simple)
		limit(t, resp, b, gateway.CodeInsufficientQuota)
	}
	usageRequests(t, r2, "k8")
	if requests, rows := usageRequests(t, r1, "k8"); requests != 2 || rows != 1 {
		t.Fatalf("usage of k8: %d requests in %d rows, want 2 in 1", requests, rows)
	}
}

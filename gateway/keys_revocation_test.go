package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/store"
)

// adminCall is one admin API call from any goroutine: unlike send, it
// reports failures instead of stopping the test.
func adminCall(h *harness, method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func createKey(t *testing.T, h *harness, body string) string {
	t.Helper()
	code, b, err := adminCall(h, http.MethodPost, "/admin/keys", body)
	var created struct{ Key string }
	_ = json.Unmarshal(b, &created)
	if err != nil || code != 201 || created.Key == "" {
		t.Fatalf("POST /admin/keys %s: %d %s %v", body, code, b, err)
	}
	return created.Key
}

// TestKeyDeletedWhilePatchesRaceStaysDeleted: a 204 from DELETE
// /admin/keys/{name} revokes the key, whatever PATCHes of it run at the
// same moment. A PATCH that reads the key before the delete and writes it
// after answers 404 instead of bringing the key back, and no reload that
// read the keys before the delete installs them after it: the old secret
// gets 401 at once and the key is not listed. A fixed number of rounds, no
// timing.
func TestKeyDeletedWhilePatchesRaceStaysDeleted(t *testing.T) {
	h, _ := keyedHarness(t)
	const rounds, patches = 25, 4
	for round := range rounds {
		secret := createKey(t, h, `{"name":"race"}`)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, patches+1)
		for i := range patches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				code, b, err := adminCall(h, http.MethodPatch, "/admin/keys/race", fmt.Sprintf(`{"limits":{"rpm":%d}}`, i+1))
				switch {
				case err != nil:
					errs <- err
				case code == 404 && codeOf(b) != "not_found":
					errs <- fmt.Errorf("PATCH: 404 %s, want code not_found", b)
				case code != 200 && code != 404:
					errs <- fmt.Errorf("PATCH: %d %s, want 200 or 404", code, b)
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if code, b, err := adminCall(h, http.MethodDelete, "/admin/keys/race", ""); err != nil || code != 204 {
				errs <- fmt.Errorf("DELETE: %d %s %v", code, b, err)
			}
		}()
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		// The keys this gateway holds first (GET /admin/keys reloads them
		// from the store), then the store's.
		if resp, b := send(t, h, http.MethodGet, "/v1/models", secret, ""); resp.StatusCode != 401 || codeOf(b) != "invalid_api_key" {
			t.Fatalf("round %d: the deleted key's secret: %d %s, want 401 invalid_api_key", round, resp.StatusCode, b)
		}
		if resp, b := send(t, h, http.MethodGet, "/admin/keys", "", ""); resp.StatusCode != 200 || bytes.Contains(b, []byte(`"name":"race"`)) {
			t.Fatalf("round %d: after DELETE answered 204, GET /admin/keys: %d %s", round, resp.StatusCode, b)
		}
		if resp, b := send(t, h, http.MethodGet, "/v1/models", secret, ""); resp.StatusCode != 401 {
			t.Fatalf("round %d: the deleted key's secret after a reload: %d %s, want 401", round, resp.StatusCode, b)
		}
	}
}

// TestPatchOfAKeyDeletedAndCreatedAgainIs404: a PATCH never writes over a
// key created again under the name of the one it read (rotation is delete
// and create): seen through the store, the new key keeps its own secret,
// models and limits, and the old secret stays revoked.
func TestPatchOfAKeyDeletedAndCreatedAgainIs404(t *testing.T) {
	h, st := keyedHarness(t)
	old := createKey(t, h, `{"name":"rot"}`)
	if code, b, err := adminCall(h, http.MethodDelete, "/admin/keys/rot", ""); err != nil || code != 204 {
		t.Fatalf("DELETE: %d %s %v", code, b, err)
	}
	fresh := createKey(t, h, `{"name":"rot","models":["gpt-fake-*"]}`)
	// What a PATCH that read the old key before the rotation writes.
	err := st.UpdateKey(context.Background(), store.KeyRecord{Name: "rot", SHA256: gateway.HashKey(old), Limits: store.KeyLimits{RPM: 5}})
	if err == nil {
		t.Fatal("UpdateKey of the rotated-away key succeeded")
	}
	if resp, b := send(t, h, http.MethodGet, "/admin/keys", "", ""); resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"models":["gpt-fake-*"]`)) {
		t.Fatalf("GET /admin/keys: %d %s", resp.StatusCode, b)
	}
	if resp, b := send(t, h, http.MethodGet, "/v1/models", old, ""); resp.StatusCode != 401 {
		t.Fatalf("the old secret: %d %s, want 401", resp.StatusCode, b)
	}
	if resp, b := send(t, h, http.MethodGet, "/v1/models", fresh, ""); resp.StatusCode != 200 {
		t.Fatalf("the new secret: %d %s, want 200", resp.StatusCode, b)
	}
	if code, b, err := adminCall(h, http.MethodPatch, "/admin/keys/gone", `{"limits":{"rpm":1}}`); err != nil || code != 404 || codeOf(b) != "not_found" {
		t.Fatalf("PATCH of an unknown key: %d %s %v", code, b, err)
	}
}

// TestWebSocketFramesUseTheKeyAsItIsNow: an open socket does not keep the
// rights its key had at the upgrade. Each response.create is checked
// against the key as it is then: a changed key's models and limits apply
// to the next frame, and a deleted key's frames get 401 invalid_api_key,
// OpenAI-shaped, as the key would over HTTP.
func TestWebSocketFramesUseTheKeyAsItIsNow(t *testing.T) {
	h, _ := keyedHarness(t)
	secret := createKey(t, h, `{"name":"ws","models":["gpt-fake-*"]}`)
	c := h.dialWS(map[string]string{"Authorization": "Bearer " + secret})
	lastOf := func(evs []eventLike) eventLike { return evs[len(evs)-1] }
	patch := func(body string) {
		t.Helper()
		if code, b, err := adminCall(h, http.MethodPatch, "/admin/keys/ws", body); err != nil || code != 200 {
			t.Fatalf("PATCH %s: %d %s %v", body, code, b, err)
		}
	}

	if ev := lastOf(c.turn(createFrame(""))); ev.typ != "response.completed" {
		t.Fatalf("first frame: %s", ev.data)
	}
	patch(`{"models":["other-*"]}`)
	if ev := lastOf(c.turn(createFrame(""))); ev.typ != "error" || ev.code != "model_not_allowed" || !bytes.Contains(ev.data, []byte(`"status":403`)) {
		t.Fatalf("after the key's models changed: %s, want a 403 model_not_allowed error frame", ev.data)
	}
	patch(`{"models":["gpt-fake-*"],"limits":{"rpm":1}}`)
	if ev := lastOf(c.turn(createFrame(""))); ev.typ != "response.completed" {
		t.Fatalf("the first frame under rpm 1: %s", ev.data)
	}
	if ev := lastOf(c.turn(createFrame(""))); ev.typ != "error" || ev.code != "rate_limit_exceeded" || !bytes.Contains(ev.data, []byte(`"status":429`)) {
		t.Fatalf("the second frame under rpm 1: %s, want a 429 rate_limit_exceeded error frame", ev.data)
	}
	if code, b, err := adminCall(h, http.MethodDelete, "/admin/keys/ws", ""); err != nil || code != 204 {
		t.Fatalf("DELETE: %d %s %v", code, b, err)
	}
	for i := range 2 { // every later frame, and the socket stays usable for the answer
		ev := lastOf(c.turn(createFrame("")))
		var frame struct {
			Type   string
			Status int
			Error  map[string]any
		}
		if err := json.Unmarshal(ev.data, &frame); err != nil || frame.Type != "error" || frame.Status != 401 || frame.Error["code"] != "invalid_api_key" ||
			frame.Error["type"] != "invalid_request_error" || frame.Error["message"] == "" || len(frame.Error) != 4 {
			t.Fatalf("frame %d after the key was deleted: %s, want a 401 invalid_api_key error frame", i, ev.data)
		}
	}
	if n := h.ups["A"].RequestCount(); n != 2 {
		t.Fatalf("the upstream saw %d requests, want 2", n)
	}
	if strings.Contains(h.logs.String(), secret) {
		t.Fatal("a secret is in the logs")
	}
}

// TestStoredKeyWithAConfigKeysSecretDoesNotReplaceIt: a key in the store
// with the secret of a config key (one copied into the config, say) never
// takes the config key's place: the config's key, its name, models and
// limits apply to the secret.
func TestStoredKeyWithAConfigKeysSecretDoesNotReplaceIt(t *testing.T) {
	h, st := keyedHarness(t, keyRec("from-config", teamAKey, []string{"gpt-fake-*"}, store.KeyLimits{}))
	if err := st.CreateKey(context.Background(), keyRec("copied", teamAKey, []string{"other-*"}, store.KeyLimits{RPM: 1})); err != nil {
		t.Fatal(err)
	}
	if resp, b := send(t, h, http.MethodGet, "/admin/keys", "", ""); resp.StatusCode != 200 {
		t.Fatalf("GET /admin/keys: %d %s", resp.StatusCode, b)
	}
	for i := range 3 {
		if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
			t.Fatalf("request %d with the config key's secret: %d %s", i, resp.StatusCode, b)
		}
	}
	if access := grepLines(h.logs.String(), "access: request"); strings.Contains(access, "key=copied") || !strings.Contains(access, "key=from-config") {
		t.Fatalf("access log:\n%s", access)
	}
	// The stored key that the config key hides is named in a warning.
	if !strings.Contains(h.logs.String(), "[WARN]") || !strings.Contains(grepLines(h.logs.String(), "[WARN]"), "copied") {
		t.Fatalf("no warning names the hidden stored key:\n%s", h.logs.String())
	}
}

// keysAcrossReplicas is a gateway whose key store another replica also
// writes: the test writes to the store directly, as that replica would.
func keysAcrossReplicas(t *testing.T, required bool, refresh time.Duration) (*harness, *store.PebbleStore) {
	t.Helper()
	st := openStore(t, t.TempDir())
	h := newHarness(t, harnessConfig{opts: gateway.Options{Accounts: gateway.AccountsOptions{
		Required: required, KeyStore: st, Usage: st, KeyRefresh: refresh}}})
	return h, st
}

// A key created on another replica works on this one at once, however
// recently the store was read for some other unknown credential: it is
// never taken for a pass-through credential and forwarded upstream.
func TestKeyCreatedOnAnotherReplicaWorksAtOnce(t *testing.T) {
	h, st := keysAcrossReplicas(t, false, time.Hour)
	// A pass-through client's own key: unknown, it reads the store.
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", "sk-proj-client-own-0123456789", simple); resp.StatusCode != 200 {
		t.Fatalf("pass-through: %d %s", resp.StatusCode, b)
	}
	const secret = "sk-sluice-created-elsewhere-0123456789"
	if err := st.CreateKey(context.Background(), keyRec("elsewhere", secret, []string{"other-*"}, store.KeyLimits{})); err != nil {
		t.Fatal(err)
	}
	// The key may not use the model: identified, it gets 403, and the
	// upstream never sees it.
	resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, simple)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a key just created elsewhere: %d %s", resp.StatusCode, b)
	}
	for _, r := range h.ups["A"].Requests() {
		if strings.Contains(r.Header.Get("Authorization"), secret) {
			t.Fatal("the Sluice key was forwarded upstream")
		}
	}
}

// A key deleted on another replica stops working here once the keys this
// replica holds are older than the refresh interval, even for a replica
// that served nothing meanwhile: the request that finds them stale reads
// them again before it is judged.
func TestKeyDeletedOnAnotherReplicaStopsWithinTheRefresh(t *testing.T) {
	h, st := keysAcrossReplicas(t, true, 50*time.Millisecond)
	const secret = "sk-sluice-deleted-elsewhere-0123456789"
	if err := st.CreateKey(context.Background(), keyRec("gone", secret, nil, store.KeyLimits{})); err != nil {
		t.Fatal(err)
	}
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, simple); resp.StatusCode != 200 {
		t.Fatalf("before the delete: %d %s", resp.StatusCode, b)
	}
	if err := st.DeleteKey(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the keys held are now older than the refresh
	for i := range 3 {
		if resp, b := send(t, h, http.MethodPost, "/v1/responses", secret, simple); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("request %d after the delete: %d %s", i, resp.StatusCode, b)
		}
	}
}

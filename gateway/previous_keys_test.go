package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/store"
)

// keyedContinuityHarness: auth required with keys team-a and team-b, one
// shared upstream that continues any previous_response_id (as a real one
// does for the gateway's single credential), continuity in a Pebble store.
func keyedContinuityHarness(t *testing.T) *harness {
	t.Helper()
	st := openStore(t, t.TempDir())
	return newHarness(t, harnessConfig{opts: gateway.Options{Store: st, Accounts: gateway.AccountsOptions{Required: true,
		Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{}), keyRec("team-b", teamBKey, nil, store.KeyLimits{})}}}})
}

// sendWith sends body to path as key with the extra headers.
func sendWith(t *testing.T, h *harness, method, path, key, body string, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, h.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestKeysCannotUseAnotherKeysPreviousResponse: with Sluice keys, a
// previous_response_id anchored under another key (even one sharing its
// session id) is refused before any upstream sees it, with exactly the
// answer an id Sluice never anchored gets (400 previous_response_not_found,
// JSON or stream request alike), so ids cannot be probed; the key that
// created the response continues it as before.
func TestKeysCannotUseAnotherKeysPreviousResponse(t *testing.T) {
	h := keyedContinuityHarness(t)
	session := map[string]string{"Session_id": "shared-session"}
	status, body := sendWith(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"secret stuff"}`, nil)
	idA := gjson.Get(body, "id").Str
	status2, body2 := sendWith(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"secret stuff"}`, session)
	idSession := gjson.Get(body2, "id").Str
	if status != http.StatusOK || status2 != http.StatusOK || idA == "" || idSession == "" {
		t.Fatalf("team-a's responses: %d %s / %d %s", status, body, status2, body2)
	}
	const unknown = "resp_never_anchored_0123456789"
	up := h.ups["A"]
	for _, stream := range []string{"false", "true"} {
		follow := func(prev string) string {
			return `{"model":"gpt-fake-1","input":"x","stream":` + stream + `,"previous_response_id":"` + prev + `"}`
		}
		before := len(up.Requests())
		stU, bodyU := sendWith(t, h, http.MethodPost, "/v1/responses", teamBKey, follow(unknown), nil)
		if stU != http.StatusBadRequest || gjson.Get(bodyU, "error.code").Str != "previous_response_not_found" ||
			gjson.Get(bodyU, "error.param").Str != "previous_response_id" {
			t.Fatalf("stream=%s: an unknown id: %d %s", stream, stU, bodyU)
		}
		for _, c := range []struct {
			name, id string
			headers  map[string]string
		}{{"another key's id", idA, nil}, {"another key's id in a shared session", idSession, session}} {
			st, b := sendWith(t, h, http.MethodPost, "/v1/responses", teamBKey, follow(c.id), c.headers)
			if st != stU || strings.ReplaceAll(b, c.id, unknown) != bodyU {
				t.Errorf("stream=%s: %s: %d %s; an unknown id: %d %s", stream, c.name, st, b, stU, bodyU)
			}
		}
		if n := len(up.Requests()); n != before {
			t.Errorf("stream=%s: the upstream got %d of team-b's follow-ups", stream, n-before)
		}
		if st, b := sendWith(t, h, http.MethodPost, "/v1/responses", teamAKey, follow(idA), nil); st != http.StatusOK {
			t.Errorf("stream=%s: team-a's own follow-up: %d %s", stream, st, b)
		}
	}

	// The resource API: a shared session id does not lend team-b the owner
	// of team-a's response either.
	before := len(up.Requests())
	stU, bodyU := sendWith(t, h, http.MethodGet, "/v1/responses/"+unknown, teamBKey, "", session)
	st, b := sendWith(t, h, http.MethodGet, "/v1/responses/"+idSession, teamBKey, "", session)
	if stU != http.StatusNotFound || st != stU || strings.ReplaceAll(b, idSession, unknown) != bodyU {
		t.Errorf("GET of team-a's response by team-b: %d %s; an unknown id: %d %s", st, b, stU, bodyU)
	}
	if n := len(up.Requests()); n != before {
		t.Errorf("team-b's GET reached the owner")
	}
}

// TestKeysCannotUseAnotherScopesPreviousResponse: with Sluice keys, a
// follow-up of the same key from another turn state does not see the
// anchor (README, "Anchors are scoped"), so it gets the unknown id's 400
// without any upstream being called, rather than going unpinned to
// whichever upstream selection picks; the scope that created the response
// continues it as before.
func TestKeysCannotUseAnotherScopesPreviousResponse(t *testing.T) {
	h := keyedContinuityHarness(t)
	one := map[string]string{"X-Codex-Turn-State": "ts_one"}
	two := map[string]string{"X-Codex-Turn-State": "ts_two"}
	status, body := sendWith(t, h, http.MethodPost, "/v1/responses", teamAKey, `{"model":"gpt-fake-1","input":"hi"}`, one)
	id := gjson.Get(body, "id").Str
	if status != http.StatusOK || id == "" {
		t.Fatalf("first turn: %d %s", status, body)
	}
	follow := `{"model":"gpt-fake-1","input":"again","previous_response_id":"` + id + `"}`
	up := h.ups["A"]
	before := len(up.Requests())
	st, b := sendWith(t, h, http.MethodPost, "/v1/responses", teamAKey, follow, two)
	if st != http.StatusBadRequest || gjson.Get(b, "error.code").Str != "previous_response_not_found" {
		t.Fatalf("another turn state's follow-up: %d %s", st, b)
	}
	if n := len(up.Requests()); n != before {
		t.Fatalf("the upstream got another turn state's follow-up")
	}
	if st, b := sendWith(t, h, http.MethodPost, "/v1/responses", teamAKey, follow, one); st != http.StatusOK {
		t.Fatalf("the creating turn state's own follow-up: %d %s", st, b)
	}
}

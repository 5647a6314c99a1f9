package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/store"
)

// Traffic without a Sluice key is totalled under the key "": GET
// /admin/usage?anonymous=true selects those totals alone, ?key=NAME the
// key's, and no filter both; a bad value or both filters at once is a 400.
func TestUsageSelectsAnonymousTraffic(t *testing.T) {
	h, _ := storeHarness(t, gateway.AccountsOptions{Keys: []store.KeyRecord{keyRec("team-a", teamAKey, nil, store.KeyLimits{})}})
	if resp, b := send(t, h, http.MethodPost, "/v1/responses", teamAKey, simple); resp.StatusCode != 200 {
		t.Fatalf("keyed: %d %s", resp.StatusCode, b)
	}
	for range 2 {
		if resp, b := send(t, h, http.MethodPost, "/v1/responses", "", simple); resp.StatusCode != 200 {
			t.Fatalf("anonymous: %d %s", resp.StatusCode, b)
		}
	}
	requests := func(query string) (total int64, keys map[string]bool) {
		t.Helper()
		var rep usageReport
		if code := h.getJSON("/admin/usage"+query, &rep); code != 200 {
			t.Fatalf("/admin/usage%s: %d", query, code)
		}
		keys = map[string]bool{}
		for _, r := range rep.Data {
			keys[r.Key] = true
		}
		return rep.Total.Requests, keys
	}
	// Usage is settled just after each request's last byte.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if n, _ := requests(""); n == 3 || time.Now().After(deadline) {
			break
		}
	}
	for _, c := range []struct {
		query string
		want  int64
		keys  []string
	}{
		{"", 3, []string{"", "team-a"}},
		{"?anonymous=true", 2, []string{""}},
		{"?key=team-a", 1, []string{"team-a"}},
		{"?key=team-a&anonymous=false", 1, []string{"team-a"}},
	} {
		n, keys := requests(c.query)
		if n != c.want || len(keys) != len(c.keys) {
			t.Fatalf("/admin/usage%s: %d requests of keys %v, want %d of %q", c.query, n, keys, c.want, c.keys)
		}
		for _, k := range c.keys {
			if !keys[k] {
				t.Fatalf("/admin/usage%s: keys %v, want %q", c.query, keys, c.keys)
			}
		}
	}
	for _, q := range []string{"?anonymous=yes", "?anonymous=true&key=team-a"} {
		var e struct{ Error struct{ Code, Param string } }
		if code := h.getJSON("/admin/usage"+q, &e); code != http.StatusBadRequest || e.Error.Code != "invalid_value" || e.Error.Param != "anonymous" {
			t.Fatalf("/admin/usage%s: %d %+v, want 400 invalid_value on anonymous", q, code, e.Error)
		}
	}
}

package gateway_test

import (
	"net/http"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/store"
)

// GET /admin/usage holds its query string to the rule of the admin bodies:
// a parameter given twice, one it does not take and a query string that
// does not parse are refused with 400 invalid_value naming the parameter,
// not answered for the first value or for today.
func TestAdminUsageRefusesRepeatedAndUnknownParameters(t *testing.T) {
	h, _ := keyedHarness(t, keyRec("u1", teamAKey, nil, store.KeyLimits{}), keyRec("u2", teamBKey, nil, store.KeyLimits{}))
	for _, tc := range []struct{ query, param string }{
		{"key=u1&key=u2", "key"},
		{"from=2026-11-28&from=2026-11-01", "from"},
		{"to=2026-11-28&key=u1&to=2026-11-28", "to"},
		{"anonymous=true&anonymous=true", "anonymous"},
		{"form=2026-11-01", "form"},
		{"key=u1&bogus=1", "bogus"},
		{"Key=u1", "Key"},
		{"key=%zz", ""},
	} {
		resp, b := send(t, h, http.MethodGet, "/admin/usage?"+tc.query, "", "")
		if resp.StatusCode != http.StatusBadRequest || codeOf(b) != "invalid_value" || gjson.GetBytes(b, "error.param").Str != tc.param {
			t.Fatalf("?%s: %d %s, want 400 invalid_value naming %q", tc.query, resp.StatusCode, b, tc.param)
		}
	}
	// The documented parameters, each once, are answered.
	for _, query := range []string{"", "key=u1", "key=u1&from=2026-11-01&to=2026-11-28", "anonymous=true", "key="} {
		if resp, b := send(t, h, http.MethodGet, "/admin/usage?"+query, "", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("?%s: %d %s", query, resp.StatusCode, b)
		}
	}
}

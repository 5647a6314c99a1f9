package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestAdminKeysRefuseNull: null in a POST or PATCH body, for any field or a
// models element, is a 400 invalid_type naming the field, and the message
// says how to lift a limit (0) or allow every model ([]). encoding/json
// would take it as "leave it": the PATCH answered 200 and changed nothing,
// where the client may have meant "lift it". A refused body changes
// nothing; 0 and [] do what the messages say.
func TestAdminKeysRefuseNull(t *testing.T) {
	h, _ := keyedHarness(t)
	admin := func(method, path, body string) (int, []byte) {
		resp, b := send(t, h, method, path, "", body)
		return resp.StatusCode, b
	}
	if code, b := admin(http.MethodPost, "/admin/keys", `{"name":"nl","models":["gpt-*"],"limits":{"rpm":5,"tpm":900}}`); code != 201 {
		t.Fatalf("create: %d %s", code, b)
	}
	for _, tt := range []struct {
		method, path, body, param, hint string // hint: in the message
	}{
		{http.MethodPatch, "/admin/keys/nl", `{"limits":{"rpm":null}}`, "limits.rpm", "0 lifts the limit"},
		{http.MethodPatch, "/admin/keys/nl", `{"limits":{"rpm":3,"tokens_per_month":null}}`, "limits.tokens_per_month", "0 lifts the limit"},
		{http.MethodPatch, "/admin/keys/nl", `{"limits":null}`, "limits", `{"limits":{"rpm":0}}`},
		{http.MethodPatch, "/admin/keys/nl", `{"models":null}`, "models", "[] allows every model"},
		{http.MethodPatch, "/admin/keys/nl", `{"limits":{"rpm":null},"models":null}`, "limits.rpm", "0 lifts the limit"},
		{http.MethodPatch, "/admin/keys/nl", `{"models":[null]}`, "models[0]", "must be a string"},
		{http.MethodPatch, "/admin/keys/nl", `{"models":["gpt-*",null]}`, "models[1]", "must be a string"},
		{http.MethodPatch, "/admin/keys/nl", `{"name":null}`, "name", "must be a string"},
		{http.MethodPost, "/admin/keys", `{"name":null}`, "name", "must be a string"},
		{http.MethodPost, "/admin/keys", `{"name":"nl2","limits":{"tpm":null}}`, "limits.tpm", "0 lifts the limit"},
		{http.MethodPost, "/admin/keys", `{"name":"nl2","limits":null}`, "limits", `{"limits":{"rpm":0}}`},
		{http.MethodPost, "/admin/keys", `{"name":"nl2","models":null}`, "models", "[] allows every model"},
		{http.MethodPost, "/admin/keys", `{"name":"nl2","models":[null]}`, "models[0]", "must be a string"},
	} {
		code, b := admin(tt.method, tt.path, tt.body)
		var e struct {
			Error struct{ Message, Param, Code, Type string }
		}
		_ = json.Unmarshal(b, &e)
		if code != http.StatusBadRequest || e.Error.Param != tt.param || e.Error.Code != "invalid_type" ||
			e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tt.param+" must") || !strings.Contains(e.Error.Message, tt.hint) {
			t.Errorf("%s %s %s: %d %s, want 400 invalid_type naming %q, saying %q", tt.method, tt.path, tt.body, code, b, tt.param, tt.hint)
		}
	}
	code, b := admin(http.MethodGet, "/admin/keys", "")
	if code != 200 || !strings.Contains(string(b), `"models":["gpt-*"]`) || !strings.Contains(string(b), `"rpm":5,"tpm":900`) || strings.Contains(string(b), `"nl2"`) {
		t.Fatalf("a refused body changed the keys: %d %s", code, b)
	}
	// What the messages advise works.
	code, b = admin(http.MethodPatch, "/admin/keys/nl", `{"limits":{"rpm":0},"models":[]}`)
	if code != 200 || !strings.Contains(string(b), `"models":[]`) || !strings.Contains(string(b), `"limits":{"tpm":900}`) {
		t.Fatalf("lifting with 0 and []: %d %s", code, b)
	}
}

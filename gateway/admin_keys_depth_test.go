package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// An admin API body nesting deeper than limits.max_json_depth is a 400
// nesting_too_deep, checked before any parser reads it, as every JSON
// document the gateway reads (SECURITY.md "Limits"); one within the limit
// reaches the field checks. A refused body creates or changes nothing.
func TestAdminKeysBodyDepthIsBounded(t *testing.T) {
	h, _ := keyedHarness(t)
	nested := func(depth int) string { return strings.Repeat("[", depth) + strings.Repeat("]", depth) }
	if resp, b := send(t, h, http.MethodPost, "/admin/keys", "", `{"name":"deep"}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	for _, tc := range []struct {
		name, method, path, body, code string
	}{
		{"POST limits 129", http.MethodPost, "/admin/keys", `{"name":"kd","limits":` + nested(128) + `}`, "nesting_too_deep"},
		{"POST models 200", http.MethodPost, "/admin/keys", `{"name":"kd","models":` + nested(200) + `}`, "nesting_too_deep"},
		{"POST 20000", http.MethodPost, "/admin/keys", `{"name":"kd","limits":` + nested(20000) + `}`, "nesting_too_deep"},
		{"PATCH limits 129", http.MethodPatch, "/admin/keys/deep", `{"limits":` + nested(128) + `}`, "nesting_too_deep"},
		{"POST within the limit", http.MethodPost, "/admin/keys", `{"name":"kd","limits":` + nested(127) + `}`, "invalid_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := send(t, h, tc.method, tc.path, "", tc.body)
			if resp.StatusCode != http.StatusBadRequest || gjson.GetBytes(b, "error.code").Str != tc.code {
				t.Fatalf("%d %s, want 400 %s", resp.StatusCode, b, tc.code)
			}
		})
	}
	resp, b := send(t, h, http.MethodGet, "/admin/keys", "", "")
	if resp.StatusCode != http.StatusOK || !gjson.GetBytes(b, `data.#(name=="deep")`).Exists() || gjson.GetBytes(b, `data.#(name=="kd")`).Exists() {
		t.Fatalf("keys after the refused bodies: %d %s; want deep and no kd", resp.StatusCode, b)
	}
}

// An admin API body over its size limit is a 413 payload_too_large that
// names no param: the key body has no "input" (the model endpoints' 413
// names it). Nothing is created.
func TestAdminKeysOversizeBodyNamesNoInput(t *testing.T) {
	h, _ := keyedHarness(t)
	body := `{"name":"big","models":["` + strings.Repeat("m", 2<<20) + `"]}`
	resp, b := send(t, h, http.MethodPost, "/admin/keys", "", body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || gjson.GetBytes(b, "error.code").Str != "payload_too_large" {
		t.Fatalf("%d %s, want 413 payload_too_large", resp.StatusCode, b)
	}
	if p := gjson.GetBytes(b, "error.param"); p.Type != gjson.Null {
		t.Fatalf("the 413's param is %s, want null: %s", p.Raw, b)
	}
	resp, b = send(t, h, http.MethodGet, "/admin/keys", "", "")
	if resp.StatusCode != http.StatusOK || gjson.GetBytes(b, `data.#(name=="big")`).Exists() {
		t.Fatalf("keys after the refused body: %d %s", resp.StatusCode, b)
	}
}

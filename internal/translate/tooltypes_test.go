package translate

import (
	"strings"
	"testing"
)

// A tool field that is present with the wrong type is reported as a wrong
// type naming its path, as every other field is, not as missing; an absent
// or null one is still missing.
func TestToChatToolFieldTypes(t *testing.T) {
	cases := []struct {
		name, tools, param, code, msg string
	}{
		{"name a number", `[{"type":"function","name":5,"parameters":"x"}]`, "tools[0].name", "invalid_type", "expected a string"},
		{"name an object", `[{"type":"function","name":{"n":"f"}}]`, "tools[0].name", "invalid_type", "expected a string"},
		{"type a number", `[{"type":5}]`, "tools[0].type", "invalid_type", "expected a string"},
		{"second tool's type a boolean", `[{"type":"function","name":"f"},{"type":true,"name":"g"}]`, "tools[1].type", "invalid_type", "expected a string"},
		{"name null", `[{"type":"function","name":null}]`, "tools[0].name", "missing_required_parameter", "Missing required parameter"},
		{"name empty", `[{"type":"function","name":""}]`, "tools[0].name", "missing_required_parameter", "Missing required parameter"},
		{"type null", `[{"type":null,"name":"f"}]`, "tools[0].type", "missing_required_parameter", "Missing required parameter"},
		{"allowed tool's type a number", `[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":5,"name":"f"}]}`,
			"tool_choice.tools[0].type", "invalid_type", "expected a string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"m","input":"q","tools":` + tc.tools + `}`
			chat, _, aerr := ToChat([]byte(body), nil, RequestOptions{})
			if aerr == nil {
				t.Fatalf("accepted: %s", chat)
			}
			if aerr.Status != 400 || aerr.Param != tc.param || aerr.Code != tc.code || !strings.Contains(aerr.Message, tc.msg) {
				t.Errorf("got status %d param %q code %q message %q; want param %q code %q message containing %q",
					aerr.Status, aerr.Param, aerr.Code, aerr.Message, tc.param, tc.code, tc.msg)
			}
		})
	}
}

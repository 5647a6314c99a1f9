package config

import (
	"strings"
	"testing"
)

// TestUnquotedEnvRefInAFlowCollectionIsExplained: ${VAR} unquoted inside
// [...] or {...} (README's flow style) is a YAML syntax error whatever the
// variable holds; the error says so, with the line and key to quote, while
// a quoted reference, a block-style one and one in a comment need no hint.
func TestUnquotedEnvRefInAFlowCollectionIsExplained(t *testing.T) {
	env := func(string) (string, bool) { return "abc-0123456789", true }
	const flow = "listen: 127.0.0.1:1\nupstreams: [{name: a, base_url: http://127.0.0.1:1/v1, api_key: ${VLLM_KEY}}]\n"
	_, err := Parse([]byte(flow), env)
	want := `(an unquoted ${VLLM_KEY} inside [...] or {...} is not valid YAML; quote it: api_key: "${VLLM_KEY}")`
	if err == nil || !strings.HasPrefix(err.Error(), "invalid YAML: line 2: ") || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("error %v, want one ending %s", err, want)
	}
	blockItem := "upstreams:\n  - {name: a, base_url: http://127.0.0.1:1/v1,\n     api_key: ${K:-x}}\n"
	if _, err := Parse([]byte(blockItem), env); err == nil || !strings.Contains(err.Error(), `line 3: did not find expected ',' or '}' (an unquoted ${K:-x} inside`) ||
		!strings.Contains(err.Error(), `quote it: api_key: "${K:-x}"`) {
		t.Fatalf("block sequence of flow mappings: %v", err)
	}

	for name, yaml := range map[string]string{
		"quoted":         "upstreams: [{name: a, base_url: http://127.0.0.1:1/v1, api_key: \"${VLLM_KEY}\"}]\n",
		"single-quoted":  "upstreams: [{name: a, base_url: http://127.0.0.1:1/v1, api_key: '${VLLM_KEY}'}]\n",
		"block style":    "upstreams:\n  - name: a\n    base_url: http://127.0.0.1:1/v1\n    api_key: ${VLLM_KEY}\n",
		"in a comment":   "upstreams: [{name: a, base_url: http://127.0.0.1:1/v1}]  # api_key: {k: ${VLLM_KEY}}\n",
		"other problem":  "listen: [\n",
		"block, then {}": "admin_token: ${VLLM_KEY}\nupstreams: [{name: a, base_url: http://127.0.0.1:1/v1}]\n",
	} {
		_, err := Parse([]byte(yaml), env)
		if err != nil && strings.Contains(err.Error(), "unquoted") {
			t.Errorf("%s: a hint where none is due: %v", name, err)
		}
		if name != "other problem" && err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

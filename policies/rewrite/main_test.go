//go:build !wasip1

package main

import (
	"encoding/json"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/sdk"
)

const body = `{"model":"fast","input":"hi","tools":[{"type":"web_search_preview"},{"type":"function","name":"shell"},{"type":"web_search_preview"}],"tool_choice":{"type":"web_search_preview"},"stream":true}`

func TestRewrite(t *testing.T) {
	h := &sdk.Harness{Config: `{"model_aliases":{"fast":"gpt-5-mini"},"strip_tool_types":["web_search_preview"]}`}
	if err := h.SelfTest(); err != nil {
		t.Fatal(err)
	}
	out, err := h.Rewrite(hostabi.RewriteInput{Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Model      string           `json:"model"`
		Tools      []map[string]any `json:"tools"`
		ToolChoice any              `json:"tool_choice"`
	}
	if err := json.Unmarshal(out.Body, &got); err != nil {
		t.Fatalf("%s: %v", out.Body, err)
	}
	if got.Model != "gpt-5-mini" || len(got.Tools) != 1 || got.Tools[0]["name"] != "shell" || got.ToolChoice != "auto" {
		t.Fatalf("got %s", out.Body)
	}
}

func TestRewriteNoConfigIsNoop(t *testing.T) {
	out, err := (&sdk.Harness{}).Rewrite(hostabi.RewriteInput{Body: []byte(body)})
	if err != nil || out.Body != nil {
		t.Fatalf("%s %v", out.Body, err)
	}
	// Unknown model, no tools array: nothing changes either.
	h := &sdk.Harness{Config: `{"model_aliases":{"x":"y"},"strip_tool_types":["web_search"]}`}
	out, err = h.Rewrite(hostabi.RewriteInput{Body: []byte(`{"model":"gpt-5","messages":[]}`)})
	if err != nil || out.Body != nil {
		t.Fatalf("%s %v", out.Body, err)
	}
}

func TestSelfTestRejectsBadConfig(t *testing.T) {
	for _, cfg := range []string{`[1]`, `{"model_aliases":{"a":1}}`, `{"strip_tool_types":"web_search"}`,
		`{"model_alias":{"fast":"gpt-a"}}`, `{"model_aliases":{},"strip_tool_type":["web_search"]}`} {
		if err := (&sdk.Harness{Config: cfg}).SelfTest(); err == nil {
			t.Errorf("config %s accepted", cfg)
		}
	}
}

package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestStartWithAPolicyFileThatCannotLoad: a configured policy whose file
// cannot load (a wrong ABI version, not Wasm) does not stop the start, as
// the same file without its policies.NAME key does not: the file is
// rejected and reported (ABI.md §10), the embedded default of its name
// serves, and a sluice_fail_closed policy with nothing serving refuses
// requests and readiness with 503 (README "Policies"). Only a policy that
// refuses its config stops the start (TestPolicyConfigProblemsAtStart).
func TestStartWithAPolicyFileThatCannotLoad(t *testing.T) {
	badABI := readPolicyFixture(t, "badabi.wasm")
	base, _ := serveWithPolicyDir(t, map[string][]byte{
		"20-x.wasm":    badABI,
		"20-fc.wasm":   []byte("#!/bin/sh\necho not wasm\n"),
		"rewrite.wasm": badABI,
	}, `  20-x: {a: 1}
  20-fc: {sluice_fail_closed: true}
  rewrite: {model_aliases: {fast: m}}
`)

	var got struct {
		Policies []struct {
			Name, State, Source, LastError string
			SHA256                         string `json:"sha256"`
			RejectedError                  string `json:"rejected_error"`
		} `json:"policies"`
	}
	getJSONInto(t, base+"/admin/policies", &got)
	states := map[string]string{}
	for _, p := range got.Policies {
		states[p.Name] = p.State + "/" + p.Source
		if p.Name == "rewrite" && !strings.Contains(p.RejectedError, "ABI version 99") {
			t.Errorf("rewrite: the rejection is not reported: %+v", p)
		}
	}
	for name, want := range map[string]string{"20-x": "rejected/dir", "20-fc": "rejected/dir", "rewrite": "active/embedded"} {
		if states[name] != want {
			t.Errorf("%s: %q, want %q (all: %v)", name, states[name], want, states)
		}
	}

	if code, body := getBody(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz with a fail-closed policy that cannot load: %d %s", code, body)
	}
	wantPolicyUnavailable(t, base, `{"model":"fast","input":"x"}`)
}

package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// TestStreamingInputRefusesAtOnce: a REST session is refused when the
// answer can be known, not after the whole input was acknowledged. A
// template naming a model the key may not use gets the gateway's 403 at
// create; a chunk that would make the assembled request (template and
// base64 included) larger than limits.max_body_bytes gets 413 at the chunk,
// even within the session's ¾ payload bound. Before, both were accepted
// and failed only at …/result.
func TestStreamingInputRefusesAtOnce(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	const alice, bob = "sk-alice-0123456789abcdef", "sk-bob-0123456789abcdef"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	yaml := "listen: 127.0.0.1:0\nauth: {required: true}\nlimits: {max_body_bytes: 40000}\nupstreams:\n  - {name: A, base_url: " + up.URL + "}\n" +
		"keys:\n  - {name: alice, key: " + alice + "}\n  - {name: bob, key: " + bob + ", models: [\"gpt-fake-1\"]}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	base, stop := startWithEnv(t, nil, "serve", "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	defer func() { _, _ = stop() }()
	do := func(method, path, cred, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+cred)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	create := func(cred, model string) (int, string, string) {
		t.Helper()
		code, b := do("POST", "/v1/streaming_input/sessions", cred,
			`{"endpoint":"/v1/responses","template":{"model":"`+model+`","input":"S: "}}`)
		var s struct {
			SessionID string `json:"session_id"`
		}
		_ = json.Unmarshal([]byte(b), &s)
		return code, b, s.SessionID
	}

	if code, b, _ := create(bob, "gpt-fake-2"); code != http.StatusForbidden || !strings.Contains(b, "model_not_allowed") || !strings.Contains(b, `"template.model"`) {
		t.Fatalf("a session with a model the key may not use: %d %s, want 403 model_not_allowed at create", code, b)
	}
	if code, b, _ := create(bob, "gpt-fake-1"); code != http.StatusOK {
		t.Fatalf("a session with the key's model: %d %s", code, b)
	}

	audio := func(seq, n int, end bool) string {
		p := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("a", n)))
		return `{"sequence_id":` + string(rune('0'+seq)) + `,"modality":"audio","payload":"` + p + `","end_of_input":` + map[bool]string{true: "true", false: "false"}[end] + `}`
	}
	// 29990 bytes are within the session's 30000 (¾ of 40000), but their
	// base64 (39988) and the template are not within 40000.
	code, b, id := create(alice, "gpt-fake-1")
	if code != http.StatusOK {
		t.Fatalf("create: %d %s", code, b)
	}
	if code, b := do("POST", "/v1/streaming_input/sessions/"+id+"/chunks", alice, audio(0, 29990, true)); code != http.StatusRequestEntityTooLarge ||
		!strings.Contains(b, "payload_too_large") || !strings.Contains(b, "40000 bytes") {
		t.Fatalf("a chunk the assembled request cannot hold: %d %s, want 413 naming the limit", code, b)
	}
	if n := len(up.Requests()); n != 0 {
		t.Fatalf("%d upstream requests, want none", n)
	}

	// Split near the limit, what is accepted can be sent.
	code, b, id = create(alice, "gpt-fake-1")
	if code != http.StatusOK {
		t.Fatalf("create: %d %s", code, b)
	}
	if code, b := do("POST", "/v1/streaming_input/sessions/"+id+"/chunks", alice, audio(0, 14000, false)); code != http.StatusAccepted {
		t.Fatalf("chunk 0: %d %s", code, b)
	}
	if code, b := do("POST", "/v1/streaming_input/sessions/"+id+"/chunks", alice, audio(1, 15500, true)); code == http.StatusAccepted {
		if code, b := do("GET", "/v1/streaming_input/sessions/"+id+"/result", alice, ""); code != http.StatusOK {
			t.Fatalf("an accepted session's result: %d %s, want it sent", code, b)
		}
	} else if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunk 1: %d %s", code, b)
	}
	code, b, id = create(alice, "gpt-fake-1")
	if code != http.StatusOK {
		t.Fatalf("create: %d %s", code, b)
	}
	if code, b := do("POST", "/v1/streaming_input/sessions/"+id+"/chunks", alice, audio(0, 29000, true)); code != http.StatusAccepted {
		t.Fatalf("a chunk that fits: %d %s", code, b)
	}
	if code, b := do("GET", "/v1/streaming_input/sessions/"+id+"/result", alice, ""); code != http.StatusOK {
		t.Fatalf("its result: %d %s", code, b)
	}
	if n := len(up.Requests()); n < 1 {
		t.Fatalf("%d upstream requests, want the accepted session's", n)
	}
}

package policycli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTestRefusesMalformedRewriteEvents: a rewrite event the gateway could
// never ask about (a body that is not a JSON object, a surface or endpoint
// it does not have) is refused as a bad line of the events file, naming the
// line and the field, and is not run: FILE is not blamed for it.
func TestTestRefusesMalformedRewriteEvents(t *testing.T) {
	root := repoRoot(t)
	mod := filepath.Join(root, "policies", "rewrite.wasm")
	cfg := `{"model_aliases":{"fast":"gpt-5-mini"}}`
	// The gateway's check of an edited body refuses an unknown endpoint, as
	// gateway.CheckRewrittenBody does: without the event check, such an
	// event was reported as the policy's invalid edit.
	opts := Options{CheckRewrite: func(_ context.Context, endpoint string, _ []byte, _ bool, _ int64) error {
		if !slices.Contains([]string{"/v1/responses", "/v1/chat/completions", "/v1/responses/compact", "/v1/responses/input_tokens"}, endpoint) {
			return fmt.Errorf("unknown endpoint %q", endpoint)
		}
		return nil
	}}
	for _, tc := range []struct {
		name  string
		event string
		field string // "" for an event that runs
	}{
		{"body a string", `{"hook":"rewrite","body":"notanobject","expect":"unchanged"}`, `"body" is a string`},
		{"body an array", `{"hook":"rewrite","body":[{"model":"fast"}]}`, `"body" is an array`},
		{"body null", `{"hook":"rewrite","body":null}`, `"body" is null`},
		{"no body", `{"hook":"rewrite"}`, `no "body"`},
		{"unknown surface", `{"hook":"rewrite","surface":"carrier_pigeon","body":{"model":"fast"}}`, `"surface" "carrier_pigeon"`},
		{"unknown endpoint", `{"hook":"rewrite","endpoint":"/v1/other","body":{"model":"fast"}}`, `"endpoint" "/v1/other"`},
		{"rewrite_request, unknown endpoint", `{"hook":"rewrite_request","endpoint":"/v1/other","body":{"model":"fast"}}`, `"endpoint" "/v1/other"`},
		{"chat", `{"hook":"rewrite","surface":"chat_json","endpoint":"/v1/chat/completions","body":{"model":"fast","messages":[{"role":"user","content":"hi"}]},"expect":"changed"}`, ""},
		{"compact", `{"hook":"rewrite","surface":"responses_json","endpoint":"/v1/responses/compact","body":{"model":"fast","input":"hi"},"expect":"changed"}`, ""},
		{"defaults", `{"hook":"rewrite","body":{"model":"fast","input":"hi"},"expect":"changed"}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := filepath.Join(t.TempDir(), "events.jsonl")
			// The event is on line 2, after a comment.
			if err := os.WriteFile(events, []byte("# one event\n"+tc.event+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := Run(context.Background(), opts, []string{"test", mod, "-events", events, "-config", cfg}, &out, &errb)
			var r result
			if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &r); err != nil {
				t.Fatalf("exit %d: %v\n%s\n%s", code, err, out.String(), errb.String())
			}
			if tc.field == "" {
				if code != 0 || r.Error != "" || r.Verdict == "" {
					t.Fatalf("a well-formed event: exit %d\n%s\n%s", code, out.String(), errb.String())
				}
				return
			}
			if code != 1 || r.Line != 2 || r.Verdict != "" || r.Outcome != "" ||
				!strings.HasPrefix(r.Error, "bad event: ") || !strings.Contains(r.Error, tc.field) ||
				!strings.Contains(errb.String(), "line 2: bad event: ") || !strings.Contains(errb.String(), tc.field) {
				t.Fatalf("exit %d, want 1, an unrun result for line 2 and an error naming %s\nstdout: %s\nstderr: %s",
					code, tc.field, out.String(), errb.String())
			}
		})
	}
}

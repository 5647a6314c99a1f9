package gateway_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway"
	"github.com/sluice-gw/sluice/plugins"
)

// TestRecordingWritesNoCredentialHeaders: a recorded rewrite keeps the
// headers a policy reads but none that is or looks like a credential (README
// "Recorded traffic as tests"): not the hidden ones, and not X-Auth-Token,
// X-Goog-Api-Key, X-Amz-Security-Token, a billing header or any other name
// that says it carries a key, token, secret, password or cookie, nor a
// header whose value is shaped like one (Bearer …, a JWT).
func TestRecordingWritesNoCredentialHeaders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rec")
	rt := fixturePolicies(t, plugins.Options{RecordDir: dir}, map[string]string{"20-model": "rewrite_model"})
	h := newHarness(t, harnessConfig{opts: gateway.Options{Policy: rt}})

	secrets := map[string]string{
		"X-Auth-Token":         "tok-secret-value-1",
		"X-Goog-Api-Key":       "AIzaGoogSecretValue2",
		"X-Amz-Security-Token": "amz-secret-value-3",
		"X-Client-Secret":      "client-secret-value-4",
		"X-Db-Password":        "password-value-5",
		"X-Session-Cookie":     "cookie-value-6",
		"X-Myapikey":           "apikey-value-7",
		"OpenAI-Project":       "proj-secret-value-8",
		"X-Client-Credential":  "credential-value-9",
		"X-Private-Key":        "private-value-10",
		"X-Session-Tok":        "tok-value-11",
		"X-Signature":          "signature-value-12",
		"X-Pass":               "pass-value-13",
		"X-Jwt":                "jwt-value-14",
		"X-Access":             "Bearer access-value-15", // a credential by its value
		"X-Forwarded-Id-Token": "eyJhbGciOiJIUzI1NiJ9.e30.value-16",
		"Api-Key":              "api-key-value-9",
	}
	hdr := map[string]string{"X-Custom-Trace": "kept-value"}
	for k, v := range secrets {
		hdr[k] = v
	}
	resp, _ := postWith(t, h, "/v1/responses", `{"model":"m","input":"x"}`, hdr)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("client got %d", resp.StatusCode)
	}
	recs, text := readRecords(t, dir)
	for k, v := range secrets {
		if strings.Contains(text, v) || strings.Contains(text, strings.ToLower(k)) {
			t.Errorf("the recording holds %s (%q):\n%s", k, v, text)
		}
	}
	if strings.Contains(text, "sk-client-secret") {
		t.Errorf("the recording holds the client's key:\n%s", text)
	}
	for _, rc := range recs {
		if rc.Hook == "rewrite" {
			if rc.Headers["x-custom-trace"] != "kept-value" {
				t.Errorf("recorded headers %v, want x-custom-trace kept", rc.Headers)
			}
			return
		}
	}
	t.Fatalf("no rewrite record:\n%s", text)
}

package hostabi_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
)

var errDialed = errors.New("dialed: net/http accepted the request")

// sendsHeader reports whether net/http's transport would send a request
// with the header name: value (it validates before it dials; the dial here
// never connects).
func sendsHeader(t *testing.T, name, value string) bool {
	t.Helper()
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return nil, errDialed }}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, "http://upstream.invalid/v1/responses", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header[name] = []string{value}
	_, err = tr.RoundTrip(req)
	switch {
	case errors.Is(err, errDialed):
		return true
	case err != nil && strings.Contains(err.Error(), "invalid header"):
		return false
	}
	t.Fatalf("%q: %q: unexpected result %v", name, value, err)
	return false
}

// TestFieldRulesAreNetHTTPs: every byte the host lets a policy put into a
// header name or value is one net/http sends, and every byte it refuses
// net/http refuses too. A value the host accepted but net/http refused
// used to fail the request as if the upstream were unreachable.
func TestFieldRulesAreNetHTTPs(t *testing.T) {
	for b := 0; b < 256; b++ {
		value := "café" + string([]byte{byte(b)}) + "x"
		if got, want := hostabi.ValidFieldValue(value), sendsHeader(t, "X-A", value); got != want {
			t.Errorf("value byte %#02x: ValidFieldValue = %v, net/http sends it: %v", b, got, want)
		}
		name := "x-" + string([]byte{byte(b)}) + "a"
		if got, want := hostabi.ValidFieldName(name), sendsHeader(t, name, "v"); got != want {
			t.Errorf("name byte %#02x: ValidFieldName = %v, net/http sends it: %v", b, got, want)
		}
	}
	if hostabi.ValidFieldName("") || sendsHeader(t, "", "v") {
		t.Error("an empty name must be refused, as net/http does")
	}
}

func TestCheckHeaderEdit(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name, value string
		remove      bool
		wantName    string
		want        int32
	}{
		{"X-Session-Id", "abc", false, "x-session-id", hostabi.CodeOK},
		{"x-a", "café\tau lait ", false, "x-a", hostabi.CodeOK},
		{"x-a", "", false, "x-a", hostabi.CodeOK},
		// Control bytes net/http refuses to send: all of them are bad_value.
		{"x-a", "café\x01", false, "x-a", hostabi.CodeBadValue},
		{"x-a", "a\x7f", false, "x-a", hostabi.CodeBadValue},
		{"x-a", "a\x1fb", false, "x-a", hostabi.CodeBadValue},
		{"x-a", "a\rb", false, "x-a", hostabi.CodeBadValue},
		{"x-a", "a\nb", false, "x-a", hostabi.CodeBadValue},
		{"x-a", "a\x00b", false, "x-a", hostabi.CodeBadValue},
		{"x a", "v", false, "x a", hostabi.CodeBadValue},
		{"", "v", false, "", hostabi.CodeBadValue},
		// Limits (ABI.md §8) are too_large, as §5 says, for names and values alike.
		{long(hostabi.MaxHeaderNameBytes), "v", false, long(hostabi.MaxHeaderNameBytes), hostabi.CodeOK},
		{long(hostabi.MaxHeaderNameBytes + 1), "v", false, long(hostabi.MaxHeaderNameBytes + 1), hostabi.CodeTooLarge},
		{long(hostabi.MaxHeaderNameBytes + 1), "", true, long(hostabi.MaxHeaderNameBytes + 1), hostabi.CodeTooLarge},
		{"x-a", long(hostabi.MaxHeaderBytes), false, "x-a", hostabi.CodeOK},
		{"x-a", long(hostabi.MaxHeaderBytes + 1), false, "x-a", hostabi.CodeTooLarge},
		// A value is not looked at on removal.
		{"x-a", "a\x01", true, "x-a", hostabi.CodeOK},
	}
	for _, tt := range tests {
		gotName, got := hostabi.CheckHeaderEdit(tt.name, tt.value, tt.remove)
		if got != tt.want || gotName != tt.wantName {
			t.Errorf("CheckHeaderEdit(%.20q, %.20q, %v) = %.20q, %d (%s); want %.20q, %d (%s)", tt.name, tt.value, tt.remove,
				gotName, got, hostabi.CodeText(got), tt.wantName, tt.want, hostabi.CodeText(tt.want))
		}
	}
}

// TestPoliciesCannotTouchCredentials: what policies never see they cannot
// set or remove either (SECURITY.md), in any spelling; the billing headers
// they see and may set.
func TestPoliciesCannotTouchCredentials(t *testing.T) {
	for _, name := range []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "API-KEY",
		"host", "Content-Length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer"} {
		for _, remove := range []bool{false, true} {
			if _, code := hostabi.CheckHeaderEdit(name, "v", remove); code != hostabi.CodeBadValue {
				t.Errorf("%s (remove=%v): code %d, want bad_value", name, remove, code)
			}
		}
	}
	for _, name := range []string{"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"} {
		if !hostabi.HiddenHeader(name) || !hostabi.ProtectedHeader(name) || !hostabi.CredentialHeader(name) {
			t.Errorf("%s: hidden=%v protected=%v credential=%v, want all", name,
				hostabi.HiddenHeader(name), hostabi.ProtectedHeader(name), hostabi.CredentialHeader(name))
		}
	}
	for _, name := range []string{"openai-organization", "openai-project"} {
		if hostabi.HiddenHeader(name) || hostabi.ProtectedHeader(name) || !hostabi.CredentialHeader(name) {
			t.Errorf("%s: hidden=%v protected=%v credential=%v, want a visible, settable credential", name,
				hostabi.HiddenHeader(name), hostabi.ProtectedHeader(name), hostabi.CredentialHeader(name))
		}
		if _, code := hostabi.CheckHeaderEdit(name, "org-operator", false); code != hostabi.CodeOK {
			t.Errorf("%s: code %d, want ok", name, code)
		}
	}
}

func TestCheckUpstreamName(t *testing.T) {
	tests := []struct {
		name string
		want int32
	}{
		{"primary", hostabi.CodeOK},
		{strings.Repeat("u", hostabi.MaxUpstreamBytes), hostabi.CodeOK},
		{strings.Repeat("u", hostabi.MaxUpstreamBytes+1), hostabi.CodeTooLarge},
		{"", hostabi.CodeBadValue},
		{"a\nb", hostabi.CodeBadValue},
	}
	for _, tt := range tests {
		if got := hostabi.CheckUpstreamName(tt.name); got != tt.want {
			t.Errorf("CheckUpstreamName(%.20q) = %d, want %d", tt.name, got, tt.want)
		}
	}
}

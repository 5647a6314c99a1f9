package clientkey

import (
	"net/http"
	"strings"
	"testing"
)

func TestHash(t *testing.T) {
	a := Hash(http.Header{"Authorization": {"Bearer sk-a"}})
	if len(a) != 32 || strings.Contains(a, "sk-a") {
		t.Fatalf("hash %q", a)
	}
	if b := Hash(http.Header{"Authorization": {"Bearer sk-b"}}); b == a {
		t.Fatal("different keys hash alike")
	}
	if k := Hash(http.Header{"Api-Key": {"Bearer sk-a"}}); k != a {
		t.Fatal("Api-Key is the same credential as Authorization")
	}
	// One key is one client, however it is sent.
	for _, h := range []http.Header{{"Authorization": {"bearer sk-a"}}, {"Authorization": {"BEARER  sk-a "}}, {"Api-Key": {"sk-a"}}} {
		if got := Hash(h); got != a {
			t.Fatalf("%v hashes to %s, want %s (Authorization: Bearer sk-a)", h, got, a)
		}
	}
	if Hash(http.Header{"Authorization": {"Basic sk-a"}}) == a {
		t.Fatal("another scheme hashes like the Bearer token")
	}
	if Hash(http.Header{}) != "" {
		t.Fatal("no credential must hash to empty")
	}
}

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
	if Hash(http.Header{}) != "" {
		t.Fatal("no credential must hash to empty")
	}
}

package gateway

import (
	"regexp"
	"testing"
)

// TestGatewayResponseIDShape: a response the gateway writes itself (a
// failure before any upstream named one) gets the id resp_sluice_ and 24
// lowercase hex digits, 96 random bits: a client that stores ids keeps one
// shape, and two failures never share an id.
func TestGatewayResponseIDShape(t *testing.T) {
	shape := regexp.MustCompile(`^[0-9a-f]{24}$`)
	a, b := randomHex(24), randomHex(24)
	if !shape.MatchString(a) || !shape.MatchString(b) || a == b {
		t.Fatalf("randomHex(24): %q and %q, want two different 24-digit hex strings", a, b)
	}
}

package gateway_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives its tests (an
// unclosed response body leaves its connection's goroutines behind).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

package store

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives its tests. The
// redis-server the contract tests share is stopped first.
//
// Pebble's disk-health ticker is ignored: pebble.Open wraps the default FS
// with disk-health checks (Options.EnsureDefaults) and, when Open fails after
// touching the disk (a locked directory, a failed recovery), never closes
// that wrapper, so its ticker goroutine outlives the failed Open. A store
// that opened and closed does not leave it behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(stopRedisAfter{m},
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/vfs.(*diskHealthCheckingFS).startTickerLocked.func1"))
}

// stopRedisAfter runs the tests, then stops the shared redis-server.
type stopRedisAfter struct{ m *testing.M }

func (s stopRedisAfter) Run() int {
	defer stopSharedRedis()
	return s.m.Run()
}

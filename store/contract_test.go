package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/internal/redistest"
)

// One contract, two implementations: the table tests of anchors, scopes,
// conversations, input sessions and stream logs (anchors_test.go,
// conversation_test.go, input_test.go, streamlog_test.go, store_test.go)
// run against every backend through forEachBackend. The Redis backend needs
// redis-server: without it those subtests are skipped, except in CI
// (CI=true), where they fail.

// contractStore is what every backend implements.
type contractStore interface {
	Store
	ConversationStore
	InputSessionStore
	StreamLogStore
	Stats() Stats
}

// backend opens a fresh, empty store with a fake clock that the test
// closes when it ends.
type backend struct {
	name string
	open func(tb testing.TB, edit ...func(*Options)) (contractStore, *fakeClock)
}

var (
	pebbleBackend = backend{name: "pebble", open: func(tb testing.TB, edit ...func(*Options)) (contractStore, *fakeClock) {
		return openTest(tb, edit...)
	}}
	redisBackend = backend{name: "redis", open: func(tb testing.TB, edit ...func(*Options)) (contractStore, *fakeClock) {
		s, clk := openRedisTest(tb, edit...)
		return s, clk
	}}
	allBackends = []backend{pebbleBackend, redisBackend}
)

// forEachBackend runs f as a subtest per backend.
func forEachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range allBackends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// The package's tests share one redis-server (started by the first test
// that needs it, stopped by TestMain); each store gets its own key prefix.
var (
	sharedRedisOnce sync.Once
	sharedRedis     *redistest.Server
	sharedRedisErr  error
	sharedRedisDir  string
	redisPrefixes   atomic.Int64
)

func redisServer(tb testing.TB) *redistest.Server {
	tb.Helper()
	bin := redistest.Binary(tb)
	sharedRedisOnce.Do(func() {
		sharedRedisDir, sharedRedisErr = os.MkdirTemp("", "sluice-store-redis-*")
		if sharedRedisErr == nil {
			sharedRedis, sharedRedisErr = redistest.Launch(bin, sharedRedisDir, redistest.Options{})
		}
	})
	if sharedRedisErr != nil {
		tb.Fatalf("starting redis-server: %v", sharedRedisErr)
	}
	return sharedRedis
}

// stopSharedRedis runs after the package's tests.
func stopSharedRedis() {
	if sharedRedis != nil {
		sharedRedis.Stop()
	}
	if sharedRedisDir != "" {
		os.RemoveAll(sharedRedisDir)
	}
}

// openRedisTest opens a RedisStore on the shared server under a key prefix
// of its own, with a fake clock; edit may change the common options.
func openRedisTest(tb testing.TB, edit ...func(*Options)) (*RedisStore, *fakeClock) {
	tb.Helper()
	return openRedisTestOn(tb, redisServer(tb).URL, edit...)
}

func openRedisTestOn(tb testing.TB, url string, edit ...func(*Options)) (*RedisStore, *fakeClock) {
	tb.Helper()
	clk := newFakeClock()
	opts := Options{Now: clk.Now, Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{tb}})}
	for _, e := range edit {
		e(&opts)
	}
	s, err := OpenRedis(context.Background(), RedisOptions{
		URL: url, KeyPrefix: fmt.Sprintf("sluicetest:%d:", redisPrefixes.Add(1)), Options: opts,
	})
	if err != nil {
		tb.Fatalf("OpenRedis: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			tb.Errorf("Close: %v", err)
		}
	})
	return s, clk
}

// redisAvailable reports whether redis-server is installed (benchmarks
// skip without it).
func redisAvailable() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

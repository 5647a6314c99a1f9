package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-gw/sluice/internal/redistest"
	"github.com/sluice-gw/sluice/internal/upstreamtest"
)

// A Redis that answers but refuses the configuration is a config error:
// sluice serve exits 1 naming the cause and the key to fix, where a Redis
// that is down lets it start (TestServeStartsWhileRedisIsDown).
func TestServeExitsOnRedisMisconfiguration(t *testing.T) {
	up := upstreamtest.NewServer(upstreamtest.Options{Name: "A"})
	defer up.Close()
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := admin.ConfigSet(context.Background(), "requirepass", "s3cr3t-pw").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, redis, want string }{
		{"no password", fmt.Sprintf("{url: %q}", srv.URL), "NOAUTH"},
		{"wrong password", fmt.Sprintf("{url: %q, password: wrong}", srv.URL), "fix store.redis.username and store.redis.password"},
		{"database out of range", fmt.Sprintf("{url: %q, password: s3cr3t-pw}", "redis://"+srv.Addr+"/16"), "fix store.redis.url"},
	} {
		cfg := filepath.Join(t.TempDir(), "sluice.yaml")
		yaml := fmt.Sprintf("listen: 127.0.0.1:0\nupstreams: [{name: A, base_url: %q}]\nstore: {backend: redis, redis: %s}\n", up.URL, tt.redis)
		if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code := run(ctx, []string{"serve", "--config", cfg, "--data-dir", t.TempDir()}, &stdout, &stderr)
		cancel()
		if code != 1 || !strings.Contains(stderr.String(), tt.want) || !strings.Contains(stderr.String(), "a configuration error, not an outage") {
			t.Errorf("%s: exit %d, want 1 with %q; stderr:\n%s", tt.name, code, tt.want, stderr.String())
		}
		if strings.Contains(stdout.String(), "listening") || strings.Contains(stderr.String(), "s3cr3t-pw") {
			t.Errorf("%s: served, or showed the password:\n%s%s", tt.name, stdout.String(), stderr.String())
		}
	}
}

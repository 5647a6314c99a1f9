package config

import (
	"strings"
	"testing"
	"time"
)

func TestStoreConfig(t *testing.T) {
	env := map[string]string{"REDIS_PASSWORD": "s3cr3t"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	cfg, err := Parse([]byte("store: {}\n"), lookup)
	if err != nil || cfg.Store.Backend != "pebble" || cfg.Store.Redis.KeyPrefix != "sluice:" || cfg.Store.Redis.Timeout.D() != time.Second {
		t.Fatalf("defaults: %+v, %v", cfg.Store, err)
	}
	cfg, err = Parse([]byte(`store:
  backend: redis
  redis: {url: "rediss://cache.internal:6380/2", key_prefix: "team-a:", password: "${REDIS_PASSWORD}", timeout: 250ms,
          wait_replicas: 1, wait_timeout: 50ms}
`), lookup)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Store.Redis
	if cfg.Store.Backend != "redis" || r.URL != "rediss://cache.internal:6380/2" || r.KeyPrefix != "team-a:" || r.Password != "s3cr3t" ||
		r.Timeout.D() != 250*time.Millisecond || r.WaitReplicas != 1 || r.WaitTimeout.D() != 50*time.Millisecond {
		t.Fatalf("redis store: %+v", cfg.Store)
	}
	// The password may ride in the URL, from the environment too.
	if cfg, err = Parse([]byte(`store: {backend: redis, redis: {url: "redis://:${REDIS_PASSWORD}@127.0.0.1:6379/0"}}`), lookup); err != nil ||
		cfg.Store.Redis.URL != "redis://:s3cr3t@127.0.0.1:6379/0" {
		t.Fatalf("password in the URL: %q, %v", cfg.Store.Redis.URL, err)
	}

	for _, tt := range []struct{ yaml, want string }{
		{`store: {backend: etcd}`, `store.backend: "etcd" is not pebble or redis`},
		{`store: {backend: redis}`, `store.redis.url: is required`},
		{`store: {backend: redis, redis: {url: "http://:hunter2@h:1/0"}}`, `store.redis.url: "http://[redacted]@h:1/0" is not a redis:// or rediss:// URL`},
		{`store: {backend: redis, redis: {url: "redis://:Zm9v/hunter2+cXV4@h:1/0"}}`, `store.redis.url: "redis://[redacted]@h:1/0" does not parse as a URL (percent-encode a / or % in the password)`},
		{`store: {backend: redis, redis: {url: "redis://:hunter2%x@h:1/0"}}`, `store.redis.url: "redis://[redacted]@h:1/0" does not parse as a URL`},
		{`store: {backend: redis, redis: {url: "redis://:hunter2@h:1/abc"}}`, `store.redis.url: "redis://[redacted]@h:1/abc": the path is the database number (/0), not "abc"`},
		{`store: {backend: redis, redis: {url: "redis://:hunter2@h:99999/0"}}`, `store.redis.url: "redis://[redacted]@h:99999/0": port "99999" is not a TCP port (1-65535)`},
		{`store: {backend: redis, redis: {url: "redis://h:0/0"}}`, `store.redis.url: "redis://h:0/0": port "0" is not a TCP port (1-65535)`},
		{`store: {backend: redis, redis: {url: "redis://h:1/0", key_prefix: ""}}`, `store.redis.key_prefix: must not be empty`},
		{`store: {backend: redis, redis: {url: "redis://h:1/0", wait_replicas: -1}}`, `store.redis.wait_replicas: must not be negative`},
		{"store: {backend: redis, redis: {url: \"redis://h:1/0\"}}\ncontinuity: {disabled: true}", `store.backend: redis keeps continuity`},
		{`store: {backend: redis, redis: {ur: "redis://h:1/0"}}`, `store.redis: unknown key "ur" (did you mean "url"?)`},
		{`store: {backend: redis, redis: {url: "redis://h:1/0", timeout: soon}}`, `store.redis.timeout`},
	} {
		_, err := Parse([]byte(tt.yaml), lookup)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.yaml, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error shows the password: %v", tt.yaml, err)
		}
	}
}

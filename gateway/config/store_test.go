package config

import (
	"os"
	"path/filepath"
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

func TestStoreRedisTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	for _, f := range []string{ca, cert, key} {
		if err := os.WriteFile(f, []byte("PEM"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	yaml := func(url, tls string) []byte {
		return []byte("store:\n  backend: redis\n  redis: {url: \"" + url + "\", tls: " + tls + "}\n")
	}
	cfg, err := Parse(yaml("rediss://cache:6380/0", `{ca_file: "`+ca+`", cert_file: "`+cert+`", key_file: "`+key+`", server_name: cache.internal}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Store.Redis.TLS; got != (RedisTLS{CAFile: ca, CertFile: cert, KeyFile: key, ServerName: "cache.internal"}) {
		t.Fatalf("store.redis.tls = %+v", got)
	}
	missing := filepath.Join(dir, "absent.crt")
	for _, tt := range []struct{ url, tls, want string }{
		{"redis://:hunter2@cache:6379/0", `{ca_file: "` + ca + `"}`, `store.redis.tls: applies to a rediss:// URL; "redis://[redacted]@cache:6379/0" is redis://`},
		{"rediss://cache:6380/0", `{ca_file: "` + missing + `"}`, "store.redis.tls.ca_file: open " + missing},
		{"rediss://cache:6380/0", `{ca_file: "` + dir + `"}`, "store.redis.tls.ca_file: read " + dir},
		{"rediss://cache:6380/0", `{cert_file: "` + cert + `"}`, "store.redis.tls.key_file: is required with cert_file"},
		{"rediss://cache:6380/0", `{key_file: "` + key + `"}`, "store.redis.tls.cert_file: is required with key_file"},
		{"rediss://cache:6380/0", `{cert_file: "` + missing + `", key_file: "` + key + `"}`, "store.redis.tls.cert_file: open " + missing},
		{"rediss://cache:6380/0", `{ca: "` + ca + `"}`, `store.redis.tls: unknown key "ca"`},
	} {
		_, err := Parse(yaml(tt.url, tt.tls), nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("url %s, tls %s: error %v, want %q", tt.url, tt.tls, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

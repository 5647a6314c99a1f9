package config

import (
	"net/url"
	"strings"
	"time"
)

// Store is store:: where continuity, conversations, streaming-input
// sessions and shared target health live.
//
//	store: {backend: pebble}                     # default: embedded, in data_dir
//	store: {backend: redis, redis: {url: "redis://127.0.0.1:6379/0", key_prefix: "sluice:"}}
type Store struct {
	Backend string     `yaml:"backend"` // pebble | redis
	Redis   RedisStore `yaml:"redis"`
}

// RedisStore is store.redis:.
type RedisStore struct {
	// URL is redis://[user:password@]host:port/db, or rediss://… (TLS).
	URL string `yaml:"url"`
	// KeyPrefix starts every key; replicas that share state use the same.
	KeyPrefix string `yaml:"key_prefix"`
	// Username and Password replace the URL's (password: ${REDIS_PASSWORD}).
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// Timeout bounds dialing and each command; a slower Redis is treated
	// as unavailable (continuity fails closed).
	Timeout Duration `yaml:"timeout"`
	// WaitReplicas, when positive, makes every acknowledged write wait
	// (WAIT) until that many Redis replicas have it, within WaitTimeout.
	WaitReplicas int      `yaml:"wait_replicas"`
	WaitTimeout  Duration `yaml:"wait_timeout"`
}

func defaultStore() Store {
	return Store{Backend: "pebble", Redis: RedisStore{KeyPrefix: "sluice:", Timeout: Duration(time.Second), WaitTimeout: Duration(time.Second)}}
}

// validateStore checks store:.
func (c *Config) validateStore(bad func(key, format string, args ...any)) {
	switch c.Store.Backend {
	case "pebble":
	case "redis":
		r := c.Store.Redis
		if r.URL == "" {
			bad("store.redis.url", "is required with backend: redis (redis://host:6379/0, or rediss:// for TLS)")
		} else if u, err := url.Parse(r.URL); err != nil {
			bad("store.redis.url", "%q does not parse as a URL (percent-encode a / or %% in the password)", redactURL(r.URL))
		} else if (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			bad("store.redis.url", "%q is not a redis:// or rediss:// URL", redactURL(r.URL))
		} else if db := strings.TrimPrefix(u.Path, "/"); db != "" && !isDecimal(db) {
			bad("store.redis.url", "%q: the path is the database number (/0), not %q", redactURL(r.URL), db)
		} else if p := u.Port(); p != "" && (!isDecimal(p) || len(p) > 5 || atoiPort(p) < 1 || atoiPort(p) > 65535) {
			bad("store.redis.url", "%q: port %q is not a TCP port (1-65535)", redactURL(r.URL), p)
		}
		if r.KeyPrefix == "" {
			bad("store.redis.key_prefix", "must not be empty")
		}
		if r.Timeout <= 0 {
			bad("store.redis.timeout", "must be positive")
		}
		if r.WaitReplicas < 0 {
			bad("store.redis.wait_replicas", "must not be negative")
		}
		if r.WaitReplicas > 0 && r.WaitTimeout <= 0 {
			bad("store.redis.wait_timeout", "must be positive with wait_replicas")
		}
		if c.Continuity.Disabled {
			bad("store.backend", "redis keeps continuity, which continuity.disabled turns off")
		}
	default:
		bad("store.backend", "%q is not pebble or redis", c.Store.Backend)
	}
}

// isDecimal reports whether s is digits only.
func isDecimal(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// atoiPort is the value of p, a string of at most 5 decimal digits.
func atoiPort(p string) int {
	n := 0
	for _, c := range p {
		n = n*10 + int(c-'0')
	}
	return n
}

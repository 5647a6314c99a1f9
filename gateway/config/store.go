package config

import (
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-gw/sluice/internal/httpx"
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
	// TLS adds to what a rediss:// URL sets up: the CA that signed the
	// server's certificate, a client certificate for a server that asks for
	// one, and the name to verify the server's certificate against.
	TLS RedisTLS `yaml:"tls"`
}

// RedisTLS is store.redis.tls:. Every field is optional; paths are PEM files.
type RedisTLS struct {
	// CAFile is the CA bundle the server's certificate is verified against
	// (instead of the system roots).
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate and its key, for a
	// server with tls-auth-clients yes; one needs the other.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the server's certificate must carry, when it
	// is not the URL's host.
	ServerName string `yaml:"server_name"`
}

// IsZero reports whether no TLS setting is given.
func (t RedisTLS) IsZero() bool { return t == RedisTLS{} }

func defaultStore() Store {
	return Store{Backend: "pebble", Redis: RedisStore{KeyPrefix: "sluice:", Timeout: Duration(time.Second), WaitTimeout: Duration(time.Second)}}
}

// validateStore checks store:. redisWritten says the file wrote a
// store.redis block (a Config built in code has one when it differs from
// the default).
func (c *Config) validateStore(redisWritten bool, bad func(key, format string, args ...any)) {
	switch c.Store.Backend {
	case "pebble":
		if redisWritten || c.Store.Redis != defaultStore().Redis {
			// Pebble would serve and the block do nothing: replicas
			// meant to share a Redis would each keep their own state.
			bad("store.redis", "is used only with store.backend: redis, and the backend is pebble (the default): set store.backend: redis to use it, or remove the block")
		}
	case "redis":
		r := c.Store.Redis
		if r.URL == "" {
			bad("store.redis.url", "is required with backend: redis (redis://host:6379/0, or rediss:// for TLS)")
		} else if u, err := url.Parse(r.URL); err != nil {
			bad("store.redis.url", "%q does not parse as a URL (percent-encode a / or %% in the password)", httpx.RedactURL(r.URL))
		} else if (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			bad("store.redis.url", "%q is not a redis:// or rediss:// URL", httpx.RedactURL(r.URL))
		} else if db := strings.TrimPrefix(u.Path, "/"); db != "" && !isDecimal(db) {
			bad("store.redis.url", "%q: the path is the database number (/0), not %q", httpx.RedactURL(r.URL), db)
		} else if p := u.Port(); p != "" && (!isDecimal(p) || len(p) > 5 || atoiPort(p) < 1 || atoiPort(p) > 65535) {
			bad("store.redis.url", "%q: port %q is not a TCP port (1-65535)", httpx.RedactURL(r.URL), p)
		} else if _, err := redis.ParseURL(r.URL); err != nil {
			// The query's options (dial_timeout=5s, …) are read by the
			// store's own call (store/redis.go redisClientOptions): checked
			// here with it, so that a bad one is reported with the file's
			// other problems. The error never shows the URL's password.
			for _, err := range redisURLProblems(u, err) {
				msg := strings.ReplaceAll(err.Error(), r.URL, httpx.RedactURL(r.URL))
				bad("store.redis.url", "%q: %s", httpx.RedactURL(r.URL), strings.TrimPrefix(msg, "redis: "))
			}
		}
		validateRedisTLS(r, bad)
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

// validateRedisTLS checks store.redis.tls: at load, so that a file the
// gateway cannot read is a config error rather than a Redis that seems down.
func validateRedisTLS(r RedisStore, bad func(key, format string, args ...any)) {
	t := r.TLS
	if t.IsZero() {
		return
	}
	if u, err := url.Parse(r.URL); err == nil && u.Scheme == "redis" {
		bad("store.redis.tls", "applies to a rediss:// URL; %q is redis:// (plain TCP)", httpx.RedactURL(r.URL))
	}
	for _, f := range []struct{ key, path string }{
		{"store.redis.tls.ca_file", t.CAFile}, {"store.redis.tls.cert_file", t.CertFile}, {"store.redis.tls.key_file", t.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		if err := readable(f.path); err != nil {
			bad(f.key, "%v", err)
		}
	}
	if t.CertFile != "" && t.KeyFile == "" {
		bad("store.redis.tls.key_file", "is required with cert_file (the client certificate's private key)")
	}
	if t.KeyFile != "" && t.CertFile == "" {
		bad("store.redis.tls.cert_file", "is required with key_file (the client certificate)")
	}
}

// readable reports why the file at path cannot be read, if it cannot (PEM
// files are small: reading one whole is the check that holds).
func readable(path string) error {
	_, err := os.ReadFile(path)
	return err
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

// redisURLProblems is every problem of u's query options, err being what
// redis.ParseURL said of the whole URL: it stops at the first bad option,
// so each option is given to it alone, in the order written, and every one
// it refuses is reported in the same run. When no option alone is refused
// (an option written twice, say), err is the problem.
func redisURLProblems(u *url.URL, err error) []error {
	var problems []error
	for _, option := range strings.Split(u.RawQuery, "&") {
		if option == "" {
			continue
		}
		alone := *u
		alone.RawQuery = option
		if _, optErr := redis.ParseURL(alone.String()); optErr != nil {
			problems = append(problems, optErr)
		}
	}
	if len(problems) == 0 {
		return []error{err}
	}
	return problems
}

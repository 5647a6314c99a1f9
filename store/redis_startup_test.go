package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-gw/sluice/internal/redistest"
)

// replyError is a reply error as go-redis returns it (redis.Error).
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

func TestClassifyRedisStartError(t *testing.T) {
	for _, tt := range []struct {
		name    string
		err     error
		setting string // "": an outage, the gateway starts anyway
	}{
		{"NOAUTH", replyError("NOAUTH Authentication required."), "store.redis.password"},
		{"WRONGPASS", replyError("WRONGPASS invalid username-password pair or user is disabled."), "store.redis.username and store.redis.password"},
		{"NOPERM", replyError("NOPERM User sluice has no permissions to run the 'set' command"), "store.redis.username"},
		{"DB index", replyError("ERR DB index is out of range"), "store.redis.url"},
		{"key layout", fmt.Errorf("key layout version %q: %w", "9", ErrCorrupt), "store.redis.key_prefix"},
		{"unknown CA", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, "store.redis.tls.ca_file"},
		{"expired", &tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}}, "store.redis.tls.ca_file"},
		{"host name", &tls.CertificateVerificationError{Err: x509.HostnameError{Host: "cache"}}, "store.redis.tls.server_name"},
		{"certificate required", &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, "store.redis.tls.cert_file"},
		{"bad certificate", &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}, "store.redis.tls.cert_file"},

		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, ""},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, ""},
		{"EOF", io.EOF, ""},
		{"timeout", context.DeadlineExceeded, ""},
		{"pool timeout", redis.ErrPoolTimeout, ""},
		{"other TLS alert", &net.OpError{Op: "remote error", Err: errors.New("tls: internal error")}, ""},
		{"loading", replyError("LOADING Redis is loading the dataset in memory"), ""},
		{"busy", replyError("BUSY Redis is busy running a script."), ""},
		{"read-only", replyError("READONLY You can't write against a read only replica."), ""},
		{"masterdown", replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), ""},
		{"none", nil, ""},
	} {
		m, ok := classifyRedisStartError(tt.err)
		if ok != (tt.setting != "") || !strings.HasPrefix(m.setting, tt.setting) {
			t.Errorf("%s: %+v, %v; want setting %q", tt.name, m, ok, tt.setting)
		}
		if ok && m.cause == "" {
			t.Errorf("%s: no cause", tt.name)
		}
	}
}

// TestOpenRedisMisconfigured: a Redis that answers but refuses the
// configuration fails OpenRedis with a config error naming the setting,
// where an unreachable Redis does not (TestOpenRedisErrors).
func TestOpenRedisMisconfigured(t *testing.T) {
	srv := redistest.Start(t)
	admin := rawClient(t, srv.URL)
	ctx := context.Background()
	for _, cmd := range [][]any{
		{"ACL", "SETUSER", "readonly", "on", ">r3ad", "~*", "+ping", "+get", "+info", "+config|get"},
		// Keys and plain commands, but no scripts: every write is one.
		{"ACL", "SETUSER", "noscripts", "on", ">n0scr", "~*", "+ping", "+set", "+setnx", "+get", "+info", "+config|get", "+hget", "+del", "+xread"},
		{"CONFIG", "SET", "requirepass", "hunter2"},
	} {
		if err := admin.Do(ctx, cmd...).Err(); err != nil {
			t.Fatalf("%v: %v", cmd, err)
		}
	}
	for _, tt := range []struct {
		name string
		opts RedisOptions
		want string
	}{
		{"no password", RedisOptions{URL: srv.URL}, "NOAUTH"},
		{"wrong password", RedisOptions{URL: srv.URL, Password: "wrong"}, "WRONGPASS"},
		{"no permission", RedisOptions{URL: srv.URL, Username: "readonly", Password: "r3ad"}, "NOPERM"},
		{"no scripts", RedisOptions{URL: srv.URL, Username: "noscripts", Password: "n0scr"}, "NOPERM"},
		{"DB index", RedisOptions{URL: "redis://" + srv.Addr + "/16", Password: "hunter2"}, "DB index is out of range"},
	} {
		tt.opts.KeyPrefix, tt.opts.Timeout = "sluicetest:misconfigured:", 2*time.Second
		s, err := OpenRedis(ctx, tt.opts)
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "fix store.redis.") ||
			strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "r3ad") {
			t.Errorf("%s: OpenRedis = %v, want a config error with %q naming the setting", tt.name, err, tt.want)
		}
	}
	// The right password opens it.
	s, err := OpenRedis(ctx, RedisOptions{URL: srv.URL, Password: "hunter2", KeyPrefix: "sluicetest:misconfigured:"})
	if err != nil {
		t.Fatalf("OpenRedis with the password: %v", err)
	}
	s.Close()
}

// TestRedisWaitReplicasWarning: wait_replicas above the connected replicas
// is warned about at open, with what clients see meanwhile; enough
// replicas (none asked for) is not.
func TestRedisWaitReplicasWarning(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendFsyncAlways: true})
	_, logs := openRedisPrivate(t, srv, RedisOptions{WaitReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	got := logs.String()
	for _, want := range []string{"[WARN]", "0 connected replicas, fewer than store.redis.wait_replicas (2)", "503 store_unavailable", "connected_replicas=0"} {
		if !strings.Contains(got, want) {
			t.Errorf("logs lack %q:\n%s", want, got)
		}
	}
	_, logs = openRedisPrivate(t, srv, RedisOptions{})
	if got := logs.String(); strings.Contains(got, "replicas") {
		t.Errorf("warned without wait_replicas:\n%s", got)
	}
}

// TestRedisRefusalAfterStartIsNamed: a Redis that starts refusing the
// store's credentials after it opened (here: its password changed, every
// connection dropped) is reported unavailable, and the log says once what
// to fix, not that Redis is unreachable.
func TestRedisRefusalAfterStartIsNamed(t *testing.T) {
	srv := redistest.Start(t)
	admin := rawClient(t, srv.URL)
	ctx := context.Background()
	s, logs := openRedisPrivate(t, srv, RedisOptions{HealthInterval: 20 * time.Millisecond, KeyPrefix: "sluicetest:refusal:"})
	if err := admin.ConfigSet(ctx, "requirepass", "changed").Err(); err != nil {
		t.Fatal(err)
	}
	_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err() // the admin's own connection goes too
	const line = "redis refuses the configuration; it counts as unavailable until fixed"
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(logs.String(), line); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no line names the refusal:\n%s", logs.String())
		}
	}
	if s.Health() == nil {
		t.Fatal("healthy while Redis refuses the password")
	}
	time.Sleep(200 * time.Millisecond) // several more pings, refused alike
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Fatalf("the refusal was logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "fix=\"store.redis.password") || strings.Contains(logs.String(), "redis unreachable") {
		t.Fatalf("the log does not name what to fix, or calls it an outage:\n%s", logs.String())
	}
}

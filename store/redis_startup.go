package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisMisconfiguration is what a start-up ping's failure says about the
// configuration.
type redisMisconfiguration struct {
	cause   string // what is wrong, for the operator
	setting string // the config key (store.redis.…) to fix
}

// redisConfigError is OpenRedis's error for a Redis that refuses the
// configuration. It is ErrInvalid, and the server's or TLS's error.
type redisConfigError struct {
	addr string
	m    redisMisconfiguration
	err  error
}

func (e *redisConfigError) Error() string {
	return fmt.Sprintf("redis at %s: %s (%v); a configuration error, not an outage: fix %s", e.addr, e.m.cause, e.err, e.m.setting)
}

func (e *redisConfigError) Unwrap() []error { return []error{e.err, ErrInvalid} }

// classifyRedisStartError tells a start-up ping's failure that no waiting
// heals (the server answered and refused the configuration: credentials,
// ACL, database number, another Sluice's key layout under the prefix, or a
// TLS trust failure) from an outage (refused, timed out, cut, a server still
// loading), for which ok is false: a replica that starts while Redis is down
// starts anyway (README "When Redis is unreachable").
func classifyRedisStartError(err error) (m redisMisconfiguration, ok bool) {
	var (
		verify   *tls.CertificateVerificationError
		hostname x509.HostnameError
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		op       *net.OpError
	)
	switch {
	case err == nil:
		return m, false
	case redis.HasErrorPrefix(err, "NOAUTH"):
		return redisMisconfiguration{"the server requires a password and none was given",
			"store.redis.password (or the URL's :password@)"}, true
	case redis.HasErrorPrefix(err, "WRONGPASS"):
		return redisMisconfiguration{"the server rejected the username or password",
			"store.redis.username and store.redis.password (or the URL's user:password@)"}, true
	case redis.HasErrorPrefix(err, "NOPERM"):
		return redisMisconfiguration{"the server's ACL does not let this user run a command Sluice needs",
			"store.redis.username (or that user's ACL on the server)"}, true
	case redis.HasErrorPrefix(err, "DB index is out of range"): // HasErrorPrefix drops the ERR
		return redisMisconfiguration{"the server has no database with the URL's number",
			"store.redis.url (its /db path; the server's databases setting bounds it)"}, true
	case errors.Is(err, ErrCorrupt):
		return redisMisconfiguration{"another Sluice version's keys are under this prefix",
			"store.redis.key_prefix"}, true
	case errors.As(err, &hostname):
		return redisMisconfiguration{"the server's TLS certificate is not for this host name",
			"store.redis.tls.server_name (or the URL's host)"}, true
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &invalid):
		return redisMisconfiguration{"the server's TLS certificate could not be verified",
			"store.redis.tls.ca_file (the CA that signed the server's certificate)"}, true
	case errors.As(err, &op) && op.Op == "remote error" && strings.Contains(op.Err.Error(), "certificate"):
		// A TLS alert from the server about our certificate: none given
		// where one is required, or one it does not trust.
		return redisMisconfiguration{"the server refused the client's TLS certificate, or that none was given",
			"store.redis.tls.cert_file and store.redis.tls.key_file"}, true
	}
	return m, false
}

// connectedReplicas is connected_slaves from INFO replication.
func (s *RedisStore) connectedReplicas(ctx context.Context) (int, error) {
	info, err := s.c.Info(ctx, "replication").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(info) {
		if v, found := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); found {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO replication has no connected_slaves")
}

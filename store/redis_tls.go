package store

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"
)

// RedisTLS adds to the TLS a rediss:// URL sets up. Every field is
// optional; the files are PEM.
type RedisTLS struct {
	// CAFile holds the CA certificates the server's certificate is
	// verified against, instead of the system roots (a private CA).
	CAFile string
	// CertFile and KeyFile are a client certificate and its key, for a
	// server that asks for one (tls-auth-clients yes, Redis's default).
	CertFile, KeyFile string
	// ServerName is the name the server's certificate is verified against
	// when it is not the URL's host.
	ServerName string
}

func (t RedisTLS) isZero() bool { return t == RedisTLS{} }

// apply sets t on ro's TLS config, which ParseURL built from a rediss://
// URL; on a redis:// URL (no TLS) a setting is an error rather than ignored.
func (t RedisTLS) apply(ro *redis.Options) error {
	if t.isZero() {
		return nil
	}
	if ro.TLSConfig == nil {
		return fmt.Errorf("store: redis: TLS settings need a rediss:// URL: %w", ErrInvalid)
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return fmt.Errorf("store: redis: reading the TLS CA file: %v: %w", err, ErrInvalid)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("store: redis: the TLS CA file %s holds no PEM certificate: %w", t.CAFile, ErrInvalid)
		}
		ro.TLSConfig.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return fmt.Errorf("store: redis: loading the TLS client certificate: %v: %w", err, ErrInvalid)
		}
		ro.TLSConfig.Certificates = []tls.Certificate{cert}
	}
	if t.ServerName != "" {
		ro.TLSConfig.ServerName = t.ServerName
	}
	return nil
}

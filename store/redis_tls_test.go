package store

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/internal/redistest"
)

// Tests of rediss:// against a real redis-server with TLS: a private CA
// named by ca_file, a client certificate for a server that requires one,
// and the trust failures that are configuration errors rather than an
// outage. The certificates are made here, for the test only.

// testPKI is a throwaway CA with a server and a client certificate it
// signed, and a self-signed server certificate, as PEM files in dir.
type testPKI struct {
	dir                                 string
	caCert                              string
	serverCert, serverKey               string
	clientCert, clientKey               string
	selfSignedServerCert, selfSignedKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	p := testPKI{dir: t.TempDir()}
	caKey, caDER := makeCert(t, "sluice test CA", nil, nil, true)
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p.caCert = writePEM(t, p.dir, "ca.crt", "CERTIFICATE", caDER)
	key, der := makeCert(t, "redis", ca, caKey, false)
	p.serverCert, p.serverKey = writePEM(t, p.dir, "server.crt", "CERTIFICATE", der), writeKey(t, p.dir, "server.key", key)
	key, der = makeCert(t, "sluice", ca, caKey, false)
	p.clientCert, p.clientKey = writePEM(t, p.dir, "client.crt", "CERTIFICATE", der), writeKey(t, p.dir, "client.key", key)
	key, der = makeCert(t, "redis self-signed", nil, nil, false)
	p.selfSignedServerCert, p.selfSignedKey = writePEM(t, p.dir, "self.crt", "CERTIFICATE", der), writeKey(t, p.dir, "self.key", key)
	return p
}

// makeCert makes a certificate for 127.0.0.1 and localhost, signed by
// parent (self-signed when parent is nil).
func makeCert(t *testing.T, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		BasicConstraintsValid: true,
	}
	if isCA {
		tmpl.IsCA, tmpl.KeyUsage, tmpl.ExtKeyUsage, tmpl.IPAddresses, tmpl.DNSNames = true, x509.KeyUsageCertSign, nil, nil, nil
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeKey(t *testing.T, dir, name string, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name, "EC PRIVATE KEY", der)
}

// startTLSRedis runs redis-server with TLS only (no plain port) on a free
// loopback port, and returns its rediss:// URL. clientAuth is Redis's
// tls-auth-clients. It skips t when the build has no TLS.
func startTLSRedis(t *testing.T, cert, key, ca string, clientAuth bool) string {
	t.Helper()
	bin := redistest.Binary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	auth := "no"
	if clientAuth {
		auth = "yes"
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", t.TempDir(),
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no", "--logfile", "", "--loglevel", "warning",
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", auth)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-exited:
			if strings.Contains(out.String(), "TLS") && strings.Contains(strings.ToLower(out.String()), "not") {
				t.Skipf("this redis-server has no TLS: %s", out.String())
			}
			t.Fatalf("redis-server with TLS exited: %s", out.String())
		default:
		}
		// Listening is enough to start: the handshake is the test's.
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return "rediss://" + addr + "/0"
		}
	}
	t.Fatalf("redis-server with TLS did not listen on %s: %s", addr, out.String())
	return ""
}

func openTLSRedis(t *testing.T, url string, tlsOpts RedisTLS) (*RedisStore, error) {
	t.Helper()
	s, err := OpenRedis(context.Background(), RedisOptions{URL: url, KeyPrefix: "sluicetest:tls:", Timeout: 2 * time.Second, TLS: tlsOpts,
		Options: Options{Logger: testLogger(t)}})
	if err == nil {
		t.Cleanup(func() { _ = s.Close() })
	}
	return s, err
}

func TestRedisTLSPrivateCA(t *testing.T) {
	p := newTestPKI(t)
	url := startTLSRedis(t, p.serverCert, p.serverKey, p.caCert, false)

	s, err := openTLSRedis(t, url, RedisTLS{CAFile: p.caCert})
	if err != nil {
		t.Fatalf("OpenRedis with ca_file: %v", err)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health with ca_file: %v", err)
	}
	if err := s.PutAnchor(context.Background(), anchor("r1", "up1", "s1")); err != nil {
		t.Fatalf("PutAnchor over TLS: %v", err)
	}

	// Without ca_file the server's certificate is not trusted: a config
	// error naming tls.ca_file, not an outage.
	_, err = openTLSRedis(t, url, RedisTLS{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "store.redis.tls.ca_file") {
		t.Fatalf("OpenRedis without ca_file: %v, want a config error naming store.redis.tls.ca_file", err)
	}
	// A server name the certificate does not carry names tls.server_name.
	_, err = openTLSRedis(t, url, RedisTLS{CAFile: p.caCert, ServerName: "cache.example"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "store.redis.tls.server_name") {
		t.Fatalf("OpenRedis with another server_name: %v, want a config error naming store.redis.tls.server_name", err)
	}
}

func TestRedisTLSClientCertificate(t *testing.T) {
	p := newTestPKI(t)
	url := startTLSRedis(t, p.serverCert, p.serverKey, p.caCert, true)

	s, err := openTLSRedis(t, url, RedisTLS{CAFile: p.caCert, CertFile: p.clientCert, KeyFile: p.clientKey})
	if err != nil {
		t.Fatalf("OpenRedis with a client certificate: %v", err)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health with a client certificate: %v", err)
	}
	// The server requires a certificate and none is given.
	_, err = openTLSRedis(t, url, RedisTLS{CAFile: p.caCert})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "store.redis.tls.cert_file") {
		t.Fatalf("OpenRedis without a client certificate: %v, want a config error naming store.redis.tls.cert_file", err)
	}
}

func TestRedisTLSSelfSignedAndSkipVerify(t *testing.T) {
	p := newTestPKI(t)
	url := startTLSRedis(t, p.selfSignedServerCert, p.selfSignedKey, p.selfSignedServerCert, false)

	_, err := openTLSRedis(t, url, RedisTLS{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("OpenRedis against a self-signed server: %v, want a config error", err)
	}
	// skip_verify=true connects, and says at start that nothing is verified.
	logs := &syncBuffer{}
	s, err := OpenRedis(context.Background(), RedisOptions{URL: url + "?skip_verify=true", KeyPrefix: "sluicetest:tls:",
		Options: Options{Logger: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: logs})}})
	if err != nil {
		t.Fatalf("OpenRedis with skip_verify=true: %v", err)
	}
	defer s.Close()
	if err := s.Health(); err != nil {
		t.Fatalf("Health with skip_verify=true: %v", err)
	}
	if got := logs.String(); !strings.Contains(got, "[WARN]") || !strings.Contains(got, "certificate is not verified") {
		t.Fatalf("no warning that the certificate is not verified:\n%s", got)
	}
}

func TestRedisTLSOptionsErrors(t *testing.T) {
	p := newTestPKI(t)
	for _, tt := range []struct {
		name string
		url  string
		tls  RedisTLS
		want string
	}{
		{"tls on redis://", "redis://127.0.0.1:1/0", RedisTLS{CAFile: p.caCert}, "need a rediss:// URL"},
		{"missing CA file", "rediss://127.0.0.1:1/0", RedisTLS{CAFile: filepath.Join(p.dir, "absent.crt")}, "reading the TLS CA file"},
		{"CA file without PEM", "rediss://127.0.0.1:1/0", RedisTLS{CAFile: p.clientKey}, "holds no PEM certificate"},
		{"cert without key", "rediss://127.0.0.1:1/0", RedisTLS{CertFile: p.clientCert}, "loading the TLS client certificate"},
	} {
		_, err := OpenRedis(context.Background(), RedisOptions{URL: tt.url, TLS: tt.tls})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", tt.name, err, tt.want)
		}
	}
}

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})
}

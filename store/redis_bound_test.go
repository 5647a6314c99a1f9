package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// freezableProxy stands between the store and Redis: it counts the
// connections it accepts and, once frozen, swallows what it is sent and
// answers nothing, as a Redis that stopped (SIGSTOP, a full disk) does.
type freezableProxy struct {
	ln       net.Listener
	target   string
	accepted atomic.Int32
	frozen   atomic.Bool
	wg       sync.WaitGroup
}

func newFreezableProxy(t *testing.T, target string) *freezableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezableProxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *freezableProxy) serve(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		defer up.Close()
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if n > 0 && !p.frozen.Load() {
				if _, werr := up.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	_, _ = io.Copy(c, up)
}

// A command against a Redis that stopped answering fails within the
// store's timeout: it is not retried on fresh connections (each retry of
// a read timeout used to dial again and wait a whole timeout more).
func TestRedisCommandIsBoundedByTheTimeout(t *testing.T) {
	srv := redisServer(t)
	p := newFreezableProxy(t, srv.Addr)
	url := "redis://" + p.ln.Addr().String() + "/0"
	s, err := OpenRedis(context.Background(), RedisOptions{URL: url, KeyPrefix: "sluicetest:bound:", Timeout: 300 * time.Millisecond,
		HealthInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutAnchor(context.Background(), anchor("r1", "up1", "s1")); err != nil {
		t.Fatalf("PutAnchor while Redis answers: %v", err)
	}
	p.frozen.Store(true)
	before := p.accepted.Load()
	_, err = s.GetAnchor(context.Background(), "r1")
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("GetAnchor from a Redis that answers nothing: %v", err)
	}
	// The command ends at its bound (the context's deadline), not at the read
	// timeout of a retry on a fresh connection, which each retry would dial
	// and wait a whole timeout more on. One dial may still begin as the
	// deadline passes, before the context's timer reports it (a loaded
	// machine, the race detector), and is abandoned at once; two are retries
	// the bound did not stop.
	if !strings.Contains(err.Error(), context.DeadlineExceeded.Error()) { // the store keeps the cause's text, not its chain
		t.Fatalf("the command ended with %v, want its bound's deadline: its timeouts were retried", err)
	}
	if dials := p.accepted.Load() - before; dials > 1 {
		t.Fatalf("one command dialled %d more times: its timeouts were retried", dials)
	}
}

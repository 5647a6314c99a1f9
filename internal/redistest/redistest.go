// Package redistest runs a real redis-server for tests, on a free loopback
// port, in a temporary directory, and stops it when the test ends.
//
// Tests that need Redis call Start. Where redis-server is not installed
// they are skipped, except in CI (CI=true, or any value but empty, 0 or
// false), where they fail: CI installs it (.ci/run: the Debian package
// redis-server).
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ciVar is the variable CI sets (a test helper's, not the gateway's).
const ciVar = "CI"

// inCI reports whether CI is set (any value but empty, 0 or false, as
// scripts/e2e-lib.sh reads it).
func inCI() bool {
	switch os.Getenv(ciVar) {
	case "", "0", "false":
		return false
	}
	return true
}

// Options configure Start.
type Options struct {
	// AppendFsyncAlways runs Redis with appendonly yes and appendfsync
	// always: every write it acknowledged is on disk, so a Redis killed
	// with SIGKILL and started again (Restart) still has it. Without it,
	// Redis keeps nothing on disk.
	AppendFsyncAlways bool
}

// Server is one redis-server process.
type Server struct {
	// URL is redis://127.0.0.1:<port>/0; Addr is 127.0.0.1:<port>.
	URL, Addr string
	// Dir is the server's working directory (its AOF lives there).
	Dir string

	tb   testing.TB
	bin  string
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Binary returns the path of redis-server, or skips tb (fails it when
// CI=true) when it is not installed.
func Binary(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if inCI() {
			tb.Fatalf("this test needs redis-server (CI installs the Debian package redis-server): %v", err)
		}
		tb.Skipf("this test needs redis-server (apt-get install redis-server): %v", err)
	}
	return bin
}

// Start runs redis-server on a free loopback port and stops it when tb
// ends.
func Start(tb testing.TB, opts ...Options) *Server {
	tb.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	s, err := Launch(Binary(tb), tb.TempDir(), o)
	if err != nil {
		tb.Fatalf("starting redis-server: %v", err)
	}
	s.tb = tb
	tb.Cleanup(s.Stop)
	return s
}

// Launch runs bin (redis-server) in dir on a free loopback port, for a
// server that outlives one test (stop it with Stop). Most tests use Start.
func Launch(bin, dir string, o Options) (*Server, error) {
	s := &Server{bin: bin, Dir: dir}
	var lastErr error
	for range 5 { // a free port can be taken between choosing and binding it
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.Addr = "127.0.0.1:" + strconv.Itoa(port)
		s.URL = "redis://" + s.Addr + "/0"
		s.args = []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", s.Dir, "--save", "",
			"--protected-mode", "no", "--daemonize", "no", "--logfile", "", "--loglevel", "warning"}
		if o.AppendFsyncAlways {
			s.args = append(s.args, "--appendonly", "yes", "--appendfsync", "always")
		} else {
			s.args = append(s.args, "--appendonly", "no")
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) start() error {
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.Dir
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server exited: %v: %s", err, out.String())
		default:
		}
		if Ping(s.Addr) == nil {
			s.mu.Lock()
			s.cmd = cmd
			s.mu.Unlock()
			go func() { <-exited }()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis-server did not answer on %s: %s", s.Addr, out.String())
}

// Ping sends PING to addr and expects PONG.
func Ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// Kill stops the server with SIGKILL (no shutdown save) and waits until
// its port is closed.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop stops the server with SIGTERM. It is safe to call twice.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
			return
		}
		if c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond); err != nil {
			// Closed port: give the process a moment to be reaped.
			time.Sleep(20 * time.Millisecond)
			return
		} else {
			_ = c.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
}

// Restart starts the server again on the same port and directory (after
// Kill or Stop).
func (s *Server) Restart() {
	var err error
	for range 50 { // the old socket may linger a moment
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s.tb != nil {
		s.tb.Fatalf("restarting redis-server: %v", err)
	}
	panic("redistest: restarting redis-server: " + err.Error())
}

// AOF returns the paths of the server's append-only files (for a test that
// wants to show they exist).
func (s *Server) AOF() []string {
	m, _ := filepath.Glob(filepath.Join(s.Dir, "appendonlydir", "*"))
	return m
}

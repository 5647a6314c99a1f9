package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one helper process of the benchmark (fake upstream, bare
// proxy or Sluice). It is killed when its parent dies (Pdeathsig), when its
// stdin pipe closes (the test binary's own roles), and by stop.
type process struct {
	name     string
	cmd      *exec.Cmd
	url      string // http://127.0.0.1:PORT, from its "listening on" line
	stdin    io.Closer
	stderr   *tailBuffer
	done     chan struct{} // closed when the process has exited
	waitErr  error
	graceful bool // stop sends SIGTERM and waits a little before SIGKILL
}

// pid is the process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// startProcess starts cmd and waits for its "listening on http://ADDR" line.
func startProcess(name string, cmd *exec.Cmd, graceful bool) (*process, error) {
	p := &process{name: name, cmd: cmd, stderr: &tailBuffer{max: 16 << 10}, done: make(chan struct{}), graceful: graceful}
	addr := make(chan string, 1)
	cmd.Stdout = &lineWatcher{fn: func(line string) {
		if i := strings.Index(line, "listening on http://"); i >= 0 {
			select {
			case addr <- strings.TrimSpace(line[i+len("listening on "):]):
			default:
			}
		}
	}}
	cmd.Stderr = p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p.stdin = stdin
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	select {
	case u := <-addr:
		p.url = u
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited before listening (%v); stderr:\n%s", name, p.waitErr, p.stderr)
	case <-time.After(60 * time.Second):
		p.stop()
		return nil, fmt.Errorf("%s did not report its address within 60s; stderr:\n%s", name, p.stderr)
	}
}

// alive reports whether the process is still running.
func (p *process) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop ends the process (SIGTERM first when graceful, then SIGKILL) and
// waits for it. It is idempotent.
func (p *process) stop() {
	_ = p.stdin.Close()
	if p.graceful && p.alive() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
	}
	if p.alive() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// signal sends sig to the process.
func (p *process) signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// rssKiB is the process's resident set size (VmRSS) in KiB.
func (p *process) rssKiB() (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid()))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) >= 1 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, errors.New("no VmRSS line in /proc/PID/status")
}

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// cpuTime is the CPU time (user + system, all threads) the process has used.
func (p *process) cpuTime() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid()))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14 and stime 15.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(utime+stime) * clockTick
}

// kernelCounters is what the kernel counts for a process beyond its CPU
// time: the split of that time, the read and write system calls (syscr and
// syscw of /proc/PID/io: read, write and their vector forms, which is how
// Go moves socket bytes) and the context switches of all its threads. The
// stamped benchmark prints them per stream, to tell whether a path's extra
// CPU is its own code or the kernel's.
type kernelCounters struct {
	user, sys      time.Duration
	reads, writes  int64
	voluntary, inv int64
}

// counters reads the process's kernelCounters; a field it cannot read is 0.
func (p *process) counters() kernelCounters {
	var c kernelCounters
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid())); err == nil {
		if i := bytes.LastIndexByte(b, ')'); i >= 0 {
			if f := strings.Fields(string(b[i+1:])); len(f) >= 13 {
				u, _ := strconv.ParseInt(f[11], 10, 64)
				s, _ := strconv.ParseInt(f[12], 10, 64)
				c.user, c.sys = time.Duration(u)*clockTick, time.Duration(s)*clockTick
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", p.pid())); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "syscr: "); ok {
				c.reads, _ = strconv.ParseInt(v, 10, 64)
			} else if v, ok := strings.CutPrefix(line, "syscw: "); ok {
				c.writes, _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.pid()))
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", p.pid(), t.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				c.voluntary += n
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				c.inv += n
			}
		}
	}
	return c
}

// sub is c − o, field by field.
func (c kernelCounters) sub(o kernelCounters) kernelCounters {
	return kernelCounters{c.user - o.user, c.sys - o.sys, c.reads - o.reads, c.writes - o.writes, c.voluntary - o.voluntary, c.inv - o.inv}
}

// add is c + o, field by field.
func (c kernelCounters) add(o kernelCounters) kernelCounters {
	return kernelCounters{c.user + o.user, c.sys + o.sys, c.reads + o.reads, c.writes + o.writes, c.voluntary + o.voluntary, c.inv + o.inv}
}

// fds is the number of open file descriptors of the process.
func (p *process) fds() int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.pid()))
	if err != nil {
		return -1
	}
	return len(ents)
}

// procSet stops every process it holds, last started first.
type procSet struct {
	mu    sync.Mutex
	procs []*process
}

// add registers p to be stopped by stopAll.
func (s *procSet) add(p *process) {
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
}

// stopAll stops every registered process.
func (s *procSet) stopAll() {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(p.stop)
	}
	wg.Wait()
}

// selfRole is a command re-executing this test binary as role.
func selfRole(role string, env ...string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), append([]string{envRole + "=" + role}, env...)...)
	return cmd, nil
}

// goTool is the go command: on PATH, else under GOROOT.
func goTool() (string, error) {
	tool, err := exec.LookPath("go")
	if err != nil {
		if goroot := os.Getenv("GOROOT"); goroot != "" {
			return filepath.Join(goroot, "bin", "go"), nil
		}
		return "", fmt.Errorf("the go tool is not on PATH: %w", err)
	}
	return tool, nil
}

// buildSluice builds ./cmd/sluice into dir and returns the binary's path.
// `go build` picks up cmd/sluice/default.pgo, as every build of the binary
// does.
func buildSluice(dir string) (string, error) {
	tool, err := goTool()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sluice")
	out, err := exec.Command(tool, "build", "-o", bin, "github.com/sluice-gw/sluice/cmd/sluice").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
	}
	return bin, nil
}

// waitReady polls url until it answers 200.
func waitReady(ctx context.Context, url string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	var last string
	for {
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %s", url, last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// raiseNoFile raises RLIMIT_NOFILE's soft limit to want (and the hard
// limit with it, which needs CAP_SYS_RESOURCE), or else to the hard limit,
// and returns the resulting soft and hard limits. Children inherit it: an
// explicit Setrlimit also stops os/exec from restoring the original soft
// limit in them.
func raiseNoFile(want uint64) (soft, hard uint64) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, 0
	}
	if want > r.Max {
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: want}) == nil {
			return want, want
		}
	}
	r.Cur = r.Max
	_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r)
	return r.Cur, r.Max
}

// lineWatcher is an io.Writer calling fn for each complete line written.
type lineWatcher struct {
	mu   sync.Mutex
	buf  []byte
	fn   func(string)
	seen int
}

func (w *lineWatcher) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		if w.seen < 100 { // only the first lines matter
			w.fn(string(w.buf[:i]))
			w.seen++
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 {
		w.buf = w.buf[:0]
	}
	return len(b), nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

// String returns the kept tail.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

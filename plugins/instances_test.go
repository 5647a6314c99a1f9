package plugins

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sluice-gw/sluice/hostabi"
)

// initGate sees every message a runtime logs (hclog's Exclude runs before a
// line is written) and can hold or fail the log call a guest's _initialize
// makes (testdata/init_log.wat logs "init…"): the guest is then held in, or
// trapped by, the host function, with no clock involved. Lines are kept.
type initGate struct {
	mu   sync.Mutex
	hold chan struct{} // non-nil: hold the next init message until closed
	held chan struct{} // closed once that message is held
	fail bool          // every init message makes the host function fail
	out  bytes.Buffer
}

func (g *initGate) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: g, Exclude: g.exclude})
}

func (g *initGate) exclude(_ hclog.Level, msg string, _ ...any) bool {
	if !strings.HasPrefix(msg, "policy: init") {
		return false
	}
	g.mu.Lock()
	hold, held, fail := g.hold, g.held, g.fail
	g.hold = nil
	g.mu.Unlock()
	if hold != nil {
		close(held)
		<-hold
	}
	if fail {
		panic("the log host function failed (test)") // wazero makes it the guest's error
	}
	return false
}

// holdNext holds the next _initialize in its log call; release lets it go on.
func (g *initGate) holdNext() (held <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.hold, g.held = make(chan struct{}), make(chan struct{})
	hold := g.hold
	var once sync.Once
	return g.held, func() { once.Do(func() { close(hold) }) }
}

func (g *initGate) failAll() {
	g.mu.Lock()
	g.fail = true
	g.mu.Unlock()
}

func (g *initGate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.out.Write(p)
}

func (g *initGate) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.out.String()
}

// TestInstanceCreationDoesNotOutlastTheCall: a call that needs a new
// instance waits for it only until its own deadline (ABI.md §8), then gets
// the built-in default; the instance, still being created, joins the pool
// and answers the next call.
func TestInstanceCreationDoesNotOutlastTheCall(t *testing.T) {
	gate := &initGate{}
	r := newRuntime(t, Options{Embedded: map[string][]byte{"slow.wasm": fixture(t, "init_log")},
		Logger: gate.logger(), PoolSize: 1, CallTimeout: time.Minute})
	held, release := gate.holdNext()
	t.Cleanup(release) // before the runtime's Close, also when the test fails

	in := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "u", Code: "x"}
	ctx, cancel := context.WithCancel(context.Background())
	type answer struct {
		out hostabi.RecoverOutput
		tr  Trace
	}
	answered := make(chan answer, 1)
	go func() {
		out, tr := r.RecoverTrace(ctx, in)
		answered <- answer{out, tr}
	}()
	<-held   // the call's instance is being created: _initialize is held
	cancel() // the call's deadline passes
	var a answer
	select {
	case a = <-answered:
	case <-time.After(time.Minute): // a guard against hanging, not a measure
		t.Fatal("the call still waits for the instance being created, past its deadline")
	}
	if a.out != hostabi.DefaultRecover(in) || a.tr.Outcome != outBusy.String() {
		t.Fatalf("call past its deadline: %+v %+v", a.out, a.tr)
	}

	release() // _initialize ends; the instance joins the pool (PoolSize 1: no other is made)
	if out, tr := r.RecoverTrace(context.Background(), in); out.Verdict != hostabi.RecoverRecover || tr.Outcome != "decided" {
		t.Fatalf("the next call: %+v %+v", out, tr)
	}
	if st, _ := statusOf(r, "slow"); st.Faults != 0 || st.Errors != 1 || st.Calls != 1 {
		t.Fatalf("status %+v", st)
	}
	const warning = "policy call got the built-in default: no instance was ready in time: policy=slow"
	for deadline := time.Now().Add(time.Minute); !strings.Contains(gate.String(), warning); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) { // written off the call's path
			t.Fatalf("the call that got the default is not logged:\n%s", gate.String())
		}
	}
}

// TestInstanceCreationOutlastsTheCallDeadline: a call waits for the
// instance created for it past its own deadline (up to instanceWait), so a
// first call on a loaded machine gets the policy's answer, not the
// built-in default; the call's deadline starts once it has the instance.
func TestInstanceCreationOutlastsTheCallDeadline(t *testing.T) {
	gate := &initGate{}
	const callTimeout = 20 * time.Millisecond
	r := newRuntime(t, Options{Embedded: map[string][]byte{"slow.wasm": fixture(t, "init_log")},
		Logger: gate.logger(), PoolSize: 1, CallTimeout: callTimeout})
	held, release := gate.holdNext()
	t.Cleanup(release)

	in := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "u", Code: "x"}
	type answer struct {
		out hostabi.RecoverOutput
		tr  Trace
	}
	answered := make(chan answer, 1)
	go func() {
		out, tr := r.RecoverTrace(context.Background(), in)
		answered <- answer{out, tr}
	}()
	<-held
	time.Sleep(3 * callTimeout) // the call's deadline has passed; instanceWait (1 s) has not
	release()
	a := <-answered
	if a.out.Verdict != hostabi.RecoverRecover || a.tr.Outcome != "decided" {
		t.Fatalf("a call whose instance took longer than its deadline: %+v %+v", a.out, a.tr)
	}
}

// TestFailedInstantiationIsAFault: an instance that cannot be created after
// the load (here: a host function _initialize calls fails) is a fault
// (ABI.md §7): logged with the policy and its version, counted, shown as
// last_error, and it trips the policy after FaultsBeforeRollback in a row.
func TestFailedInstantiationIsAFault(t *testing.T) {
	gate := &initGate{}
	r := newRuntime(t, Options{Embedded: map[string][]byte{"flaky.wasm": fixture(t, "init_log")},
		Logger: gate.logger(), FaultsBeforeRollback: 2, CallTimeout: time.Minute})
	gate.failAll()
	in := hostabi.RecoverInput{Surface: "responses_stream", Upstream: "u", Code: "x"}
	for i := 1; i <= 2; i++ {
		out, tr := r.RecoverTrace(context.Background(), in)
		if out != hostabi.DefaultRecover(in) || tr.Outcome != outFault.String() || !strings.Contains(tr.Steps[0].Error, "init") {
			t.Fatalf("call %d: %+v %+v", i, out, tr)
		}
		st, _ := statusOf(r, "flaky")
		if st.Faults != int64(i) || !strings.Contains(st.LastError, "init trap") || !strings.Contains(st.LastError, "log host function failed") {
			t.Fatalf("after call %d: %+v", i, st)
		}
	}
	if st, _ := statusOf(r, "flaky"); !strings.Contains(st.LastError, "2 faults in a row") {
		t.Fatalf("the second fault in a row did not trip the policy: %+v", st)
	}
	if _, tr := r.RecoverTrace(context.Background(), in); tr.Outcome != outTripped.String() {
		t.Fatalf("after the trip: %+v", tr)
	}
	if n := counterValue(t, r, "sluice_policy_faults_total", map[string]string{"policy": "flaky", "hook": "init", "kind": "trap"}); n != 2 {
		t.Fatalf("faults_total{hook=init} = %v", n)
	}
	waitFor(t, func() bool { st, _ := statusOf(r, "flaky"); return st.State == StateTripped })
	var warned int
	for _, line := range strings.Split(gate.String(), "\n") {
		if strings.Contains(line, "[WARN]") && strings.Contains(line, "policy fault") &&
			strings.Contains(line, "policy=flaky") && strings.Contains(line, "version=1") && strings.Contains(line, "hook=init") {
			warned++
		}
	}
	if warned != 2 {
		t.Fatalf("%d warnings naming the policy and its version, want 2; log:\n%s", warned, gate.String())
	}
}

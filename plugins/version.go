package plugins

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/logtext"
)

// compiled is one compiled module, shared by every version with its bytes.
type compiled struct {
	sha   string
	cm    wazero.CompiledModule // set before ready closes
	err   error                 // the compile error, set before ready closes
	ready chan struct{}
	refs  int // guarded by Runtime.cmu
}

// version is one loaded policy file: a compiled module, its checked exports
// and a bounded pool of instances. Versions are immutable once published;
// a swap publishes a new one and retires the old after its calls drain.
type version struct {
	rt      *Runtime
	name    string
	source  string    // "embedded" or "dir"
	data    []byte    // the module bytes (kept for rollback)
	art     *artifact // what v was built from: marked when v trips (Runtime.rollback)
	comp    *compiled // what was loaded (its sha); instances come from live
	dormant bool      // no hook to call: no instance, compiled module released
	// live is the compiled module instances are made from, holding one
	// reference; nil when dormant, and while parked (standIn set).
	live     atomic.Pointer[compiled]
	standIn  StandIn
	pmu      sync.Mutex
	unpark   chan struct{} // closed when the compile in progress ends; nil when none
	unerr    error         // the last unpark's error, under pmu
	hooks    hostabi.Hook
	abi      int32 // the ABI version the module declares (ABI.md §12)
	loadedAt time.Time
	gen      uint64
	config   []byte
	st       *stats

	idle   chan *instance
	tokens chan struct{}

	refs     atomic.Int64 // in-flight users; -1 once closed
	retiring atomic.Bool
	closed   chan struct{}

	busyLog logtext.Every // spaces logBusy's warnings

	consecutive atomic.Int32 // faults in a row
	tripped     atomic.Bool  // every call falls back to the built-in default (set once, with the rollback started)
	fmu         sync.Mutex   // orders fault bookkeeping with the trip (fault)

	// completed is the largest input each hook completed, for the trip
	// rule (completedInputs.inputsFault).
	completed completedInputs

	hm [5]*hookMetrics // by hookIndex
}

// hook indexes into per-hook arrays.
const (
	hRecover = iota
	hReplay
	hRewrite
	hSelfTest
	hStreamEvent
)

var hookNames = [5]string{"recover", "replay", "rewrite_request", "self_test", "stream_event"}
var hookBits = [5]hostabi.Hook{hostabi.HookRecover, hostabi.HookReplay, hostabi.HookRewrite, hostabi.HookSelfTest, hostabi.HookStreamEvent}

// stats are what a version books: its own counters (GET /admin/policies
// shows those of the version it shows, so a rollback does not credit the
// restored version with the calls and faults of the one it replaced) and
// its policy name's last error, shared by the name's versions.
type stats struct {
	calls, faults, errors atomic.Int64
	lastErr               *atomic.Pointer[string]
}

// newStats are a policy name's first stats: zero counters (the entry's own
// never count; its versions' do) and the name's last error.
func newStats() *stats { return &stats{lastErr: new(atomic.Pointer[string])} }

// forVersion are zero counters for a new version of s's name, sharing its
// last error.
func (s *stats) forVersion() *stats { return &stats{lastErr: s.lastErr} }

func (s *stats) setErr(msg string) { s.lastErr.Store(&msg) }

// clearErr forgets the last error once a version loads and serves.
func (s *stats) clearErr() { s.lastErr.Store(nil) }

// instance is one instantiated module with its exports resolved.
type instance struct {
	mod   api.Module
	mem   api.Memory
	alloc api.Function
	fns   [5]api.Function
	stack []uint64
	tail  *tailWriter
	inPtr uint32 // the input region from the last sluice_alloc
	inCap uint32
}

func (i *instance) close() {
	if i.mod != nil {
		_ = i.mod.Close(context.Background())
	}
}

// acquire takes a reference; false means the version is closed.
func (v *version) acquire() bool {
	for {
		n := v.refs.Load()
		if n < 0 {
			return false
		}
		if v.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (v *version) release() {
	if v.refs.Add(-1) == 0 && v.retiring.Load() {
		v.tryClose()
	}
}

// retire marks the version as replaced; it closes once no call uses it.
func (v *version) retire() {
	v.retiring.Store(true)
	v.tryClose()
}

func (v *version) tryClose() {
	if !v.refs.CompareAndSwap(0, -1) {
		return
	}
	for {
		select {
		case i := <-v.idle:
			i.close()
			continue
		default:
		}
		break
	}
	if c := v.live.Swap(nil); c != nil {
		v.rt.releaseCompiled(c)
	}
	close(v.closed)
}

// waitClosed waits for a retired version to drain and close.
func (v *version) waitClosed(ctx context.Context) error {
	select {
	case <-v.closed:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errPoolBusy = errors.New("no policy instance was free or ready in time")

// instanceWait bounds how long a call waits for an instance being created
// for it. Creating one takes a few ms (README), far more on a loaded
// machine; it is the cost of keeping no instance after the load, not the
// policy's time, so it is not held to the call's deadline: a first call
// that gave up at 50 ms would skip an operator's rewrite (model aliases,
// guards) unnoticed.
const instanceWait = time.Second

// get takes an idle instance, or has one created when the pool has room, or
// waits for one to be put back. It waits for a free instance or room in the
// pool until callCtx, the call's deadline, and for the instance created for
// it until instanceWait has passed or ctx, the request, ends (ABI.md §8); an
// instance it stopped waiting for is still created in the background
// (bounded by initTimeout) and joins the pool for the next call. The error
// is errPoolBusy, or an *initFault when the instance created for this call
// failed (booked as a fault already).
func (v *version) get(ctx, callCtx context.Context) (*instance, error) {
	select {
	case i := <-v.idle:
		return i, nil
	default:
	}
	var b *birth
	select {
	case i := <-v.idle:
		return i, nil
	case <-v.tokens:
		b = v.spawn()
	case <-callCtx.Done():
		return nil, errPoolBusy
	}
	bctx, cancel := context.WithTimeout(ctx, max(v.rt.opts.CallTimeout, instanceWait))
	defer cancel()
	select {
	case <-b.done:
		return b.inst, b.err
	case i := <-v.idle: // another call put one back first
		v.abandon(b)
		return i, nil
	case <-bctx.Done():
		v.abandon(b)
		return nil, errPoolBusy
	}
}

// birth is an instance being created in the background for a call that
// may stop waiting for it.
type birth struct {
	mu      sync.Mutex
	waiting bool          // the call still waits for it
	done    chan struct{} // closed once inst or err is handed to the waiting call
	inst    *instance
	err     error
}

// spawn creates an instance in the background with a token the caller took:
// a failure gives the token back, a success keeps it.
func (v *version) spawn() *birth {
	b := &birth{waiting: true, done: make(chan struct{})}
	if !v.acquire() {
		v.tokens <- struct{}{}
		b.err = ErrClosed
		close(b.done)
		return b
	}
	started := v.rt.background(func() {
		defer v.release()
		i, err := v.instantiate()
		if err != nil {
			v.tokens <- struct{}{}
		}
		b.mu.Lock()
		if b.waiting {
			b.inst, b.err = i, err
			close(b.done)
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if i != nil {
			v.idle <- i // the reference held keeps v open: its close frees i
		}
	})
	if !started { // the runtime is closing
		v.tokens <- struct{}{}
		v.release()
		b.err = ErrClosed
		close(b.done)
	}
	return b
}

// abandon tells a birth that its call stopped waiting: the instance joins
// the pool when ready, or now when it was handed over meanwhile.
func (v *version) abandon(b *birth) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiting = false
	select {
	case <-b.done:
		if b.inst != nil {
			v.idle <- b.inst
			b.inst = nil
		}
	default:
	}
}

// put returns a healthy instance to the pool or discards a broken one (a
// replacement is created in the background).
func (v *version) put(i *instance, healthy bool) {
	if healthy {
		v.idle <- i
		return
	}
	i.close()
	v.tokens <- struct{}{}
	v.warm(1)
}

// warm creates up to n idle instances in the background, one after the
// other.
func (v *version) warm(n int) {
	if n <= 0 || !v.acquire() {
		return
	}
	go func() {
		defer v.release()
		for ; n > 0 && !v.retiring.Load() && !v.tripped.Load(); n-- {
			select {
			case <-v.tokens:
			default:
				return
			}
			i, err := v.instantiate()
			if err != nil {
				v.tokens <- struct{}{}
				return
			}
			v.idle <- i
		}
	}()
}

// initTimeout bounds _initialize, and at load _initialize and the load-time
// calls after it together (sluice_abi_version, sluice_hooks,
// sluice_self_test: ABI.md §8).
const initTimeout = 10 * time.Second

// initFault is an instantiation that failed after the load: booked as a
// fault of the hook "init" (ABI.md §7).
type initFault struct{ msg string }

func (f *initFault) Error() string { return f.msg }

// instantiate creates an instance after the load, bounded by initTimeout
// (and by the runtime's Close, which is not the module's fault). A failed
// instantiation is a fault (version.fault), though the load checks passed:
// _initialize trapped, exited or ran past initTimeout (it may depend on the
// clock, or fail only sometimes).
func (v *version) instantiate() (*instance, error) {
	ctx, cancel := context.WithTimeout(v.rt.life, v.rt.opts.initTimeout)
	defer cancel()
	i, err := v.newInstance(ctx)
	var ie *instantiateError
	if err == nil || !errors.As(err, &ie) || v.rt.life.Err() != nil {
		// Not the guest's doing: a parked module's compile failed (logged
		// by startUnpark), or the runtime is closing.
		return i, err
	}
	kind := v.classify(ie.err, ie.stderr, nil)
	msg := faultMessage("init", kind, err, ie.stderr)
	v.fault("init", kind, msg)
	return nil, &initFault{msg: msg}
}

// instantiateError is a failed instantiation with what the guest wrote to
// stderr meanwhile.
type instantiateError struct {
	err    error
	stderr string
}

func (e *instantiateError) Error() string {
	if e.stderr != "" {
		return fmt.Sprintf("instantiate: %v (stderr: %s)", e.err, e.stderr)
	}
	return "instantiate: " + e.err.Error()
}

func (e *instantiateError) Unwrap() error { return e.err }

// newInstance instantiates the module and resolves its exports.
func (v *version) newInstance(ctx context.Context) (*instance, error) {
	if v.dormant {
		return nil, errors.New("the policy has no hook to call (its compiled module was released)")
	}
	tail := &tailWriter{}
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions(hostabi.ExportInitialize).
		WithStdout(io.Discard).
		WithStderr(tail)
	ictx := withState(ctx, &callState{v: v, hook: "init"})
	if _, ok := ictx.Deadline(); !ok {
		var cancel context.CancelFunc
		ictx, cancel = context.WithTimeout(ictx, v.rt.opts.initTimeout)
		defer cancel()
	}
	comp := v.live.Load()
	if comp == nil {
		var err error
		if comp, err = v.unparked(ictx); err != nil {
			return nil, err
		}
	}
	mod, err := v.rt.wrt.InstantiateModule(ictx, comp.cm, cfg)
	if err != nil {
		return nil, &instantiateError{err: err, stderr: tail.String()}
	}
	i := &instance{mod: mod, mem: mod.Memory(), tail: tail, stack: make([]uint64, 2)}
	i.alloc = mod.ExportedFunction(hostabi.ExportAlloc)
	for h := range hookNames {
		if v.hooks&hookBits[h] != 0 {
			i.fns[h] = mod.ExportedFunction(hookBits[h].Export())
		}
	}
	if i.mem == nil || i.alloc == nil {
		_ = mod.Close(context.Background())
		return nil, errors.New("instance lacks memory or sluice_alloc")
	}
	return i, nil
}

// parked reports whether v's stand-in answers now: v is parked and its
// module has not been compiled again yet.
func (v *version) parked() bool {
	return v.standIn.hooks() != 0 && v.live.Load() == nil
}

// unparked compiles v's module again, or waits for the compile in progress,
// and returns it. Only one compile runs at a time; a failed one is retried
// by the next caller.
func (v *version) unparked(ctx context.Context) (*compiled, error) {
	done := v.startUnpark()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c := v.live.Load(); c != nil {
		return c, nil
	}
	v.pmu.Lock()
	defer v.pmu.Unlock()
	if v.unerr != nil {
		return nil, v.unerr
	}
	return nil, errors.New("the policy was replaced while its module was being compiled")
}

// startUnpark starts compiling v's module again unless that is under way
// or done; the channel closes when it has ended.
func (v *version) startUnpark() <-chan struct{} {
	v.pmu.Lock()
	defer v.pmu.Unlock()
	if v.unpark != nil {
		return v.unpark
	}
	done := make(chan struct{})
	if v.live.Load() != nil || !v.acquire() {
		close(done) // compiled already, or closed
		return done
	}
	v.unpark = done
	started := v.rt.background(func() {
		defer v.release()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), initTimeout)
		c, err := v.rt.getCompiled(ctx, &artifact{source: v.source, data: v.data, sha: v.comp.sha})
		cancel()
		if err == nil {
			v.live.Store(c)
			v.rt.log.Info("parked policy compiled on first use", "policy", v.name, "took", time.Since(start).Round(time.Millisecond))
			v.warm(1)
		} else {
			v.rt.log.Warn("parked policy did not compile; its stand-in keeps answering", "policy", v.name, "error", err)
		}
		v.pmu.Lock()
		v.unerr, v.unpark = err, nil
		close(done)
		v.pmu.Unlock()
	})
	if !started { // the runtime is closing
		v.unpark = nil
		v.release()
		close(done)
	}
	return done
}

// tailWriter keeps the start and the end of what a guest writes to stderr
// during one call (a Go guest's panic message comes before a long goroutine
// dump).
type tailWriter struct {
	mu      sync.Mutex
	head    []byte
	tail    []byte
	dropped bool
}

const (
	headMax = 1 << 10
	tailMax = 3 << 10
)

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if room := headMax - len(t.head); room > 0 {
		k := min(room, len(p))
		t.head = append(t.head, p[:k]...)
		p = p[k:]
	}
	t.tail = append(t.tail, p...)
	if len(t.tail) > tailMax {
		t.tail = append(t.tail[:0], t.tail[len(t.tail)-tailMax:]...)
		t.dropped = true
	}
	return n, nil
}

func (t *tailWriter) reset() {
	t.mu.Lock()
	t.head, t.tail, t.dropped = t.head[:0], t.tail[:0], false
	t.mu.Unlock()
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dropped {
		return string(t.head) + "\n…\n" + string(t.tail)
	}
	return string(t.head) + string(t.tail)
}

package plugins

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetratelabs/wazero/api"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/jsonx"
	"github.com/sluice-gw/sluice/internal/logtext"
)

// callState is what the host functions of one call may touch. It travels in
// the call's context.
type callState struct {
	v    *version
	hook string
	rw   *rewriteCall // nil outside rewrite_request

	logged int // lines this call has written to the gateway's log (logLinesPerCall)

	lastPath string // doc_get retry cache
	lastVal  []byte
	lastOK   bool
}

// rewriteCall is one module's part of a rewrite chain.
type rewriteCall struct {
	doc      *jsonx.Document
	headers  []headerEdit
	upstream string
	reject   *hostabi.RejectError
}

type headerEdit struct {
	name, value string
	remove      bool
}

type stateKey struct{}

func withState(ctx context.Context, st *callState) context.Context {
	return context.WithValue(ctx, stateKey{}, st)
}

func stateOf(ctx context.Context) *callState {
	st, _ := ctx.Value(stateKey{}).(*callState)
	return st
}

// loadLog keeps what a module logs during its load checks (_initialize,
// sluice_abi_version, sluice_hooks, sluice_self_test), so that a rejection
// gives the reason in the policy's own words: the Go SDK logs why a
// self-test failed (ABI.md §3.4), and /admin/policies and `sluice policy
// check` show the rejection where the gateway's log is not at hand. The
// load calls run one after the other on the loading goroutine, so it needs
// no lock.
type loadLog struct {
	lines []string // the latest loadLogLines messages, each cut to loadLogLineBytes
}

const (
	loadLogLines     = 8
	loadLogLineBytes = 512
)

type loadLogKey struct{}

func withLoadLog(ctx context.Context, l *loadLog) context.Context {
	return context.WithValue(ctx, loadLogKey{}, l)
}

func loadLogOf(ctx context.Context) *loadLog {
	l, _ := ctx.Value(loadLogKey{}).(*loadLog)
	return l
}

func (l *loadLog) add(msg string) {
	if len(msg) > loadLogLineBytes {
		msg = strings.ToValidUTF8(msg[:loadLogLineBytes], "") + "…"
	}
	if len(l.lines) == loadLogLines {
		l.lines = append(l.lines[:0], l.lines[1:]...)
	}
	l.lines = append(l.lines, msg)
}

// explain appends the logged lines to a load error.
func (l *loadLog) explain(err error) error {
	if len(l.lines) == 0 {
		return err
	}
	return fmt.Errorf("%w; the policy logged: %s", err, strings.Join(l.lines, " | "))
}

var i32 = api.ValueTypeI32
var i64 = api.ValueTypeI64

// instantiateHost registers the "sluice" host module (ABI.md §5).
func (r *Runtime) instantiateHost(ctx context.Context) error {
	b := r.wrt.NewHostModuleBuilder(hostabi.ImportModule)
	fn := func(name string, f api.GoModuleFunc, params, results []api.ValueType) {
		b.NewFunctionBuilder().WithGoModuleFunction(f, params, results).WithName(name).Export(name)
	}
	fn(hostabi.ImportLog, r.hostLog, []api.ValueType{i32, i32, i32}, nil)
	fn(hostabi.ImportConfig, hostConfig, []api.ValueType{i32, i32}, []api.ValueType{i32})
	fn(hostabi.ImportNowMillis, hostNow, nil, []api.ValueType{i64})
	fn(hostabi.ImportDocGet, hostDocGet, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32})
	fn(hostabi.ImportDocSet, hostDocSet, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32})
	fn(hostabi.ImportDocDelete, hostDocDelete, []api.ValueType{i32, i32}, []api.ValueType{i32})
	fn(hostabi.ImportHeaderSet, hostHeaderSet, []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i32})
	fn(hostabi.ImportHeaderRemove, hostHeaderRemove, []api.ValueType{i32, i32}, []api.ValueType{i32})
	fn(hostabi.ImportUseUpstream, hostUseUpstream, []api.ValueType{i32, i32}, []api.ValueType{i32})
	fn(hostabi.ImportReject, hostReject, []api.ValueType{i32, i32}, []api.ValueType{i32})
	_, err := b.Instantiate(ctx)
	return err
}

// hostImports is the set of functions the host module exports, for load-time
// import checks.
var hostImports = map[string]bool{
	hostabi.ImportLog: true, hostabi.ImportConfig: true, hostabi.ImportNowMillis: true,
	hostabi.ImportDocGet: true, hostabi.ImportDocSet: true, hostabi.ImportDocDelete: true,
	hostabi.ImportHeaderSet: true, hostabi.ImportHeaderRemove: true, hostabi.ImportUseUpstream: true,
	hostabi.ImportReject: true,
}

func ret(stack []uint64, code int32) { stack[0] = api.EncodeI32(code) }

// read returns guest memory [ptr, ptr+n) (a view, valid during the call).
func read(mod api.Module, ptr, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	return mod.Memory().Read(ptr, n)
}

func (r *Runtime) hostLog(ctx context.Context, mod api.Module, stack []uint64) {
	level, ptr, n := uint32(stack[0]), uint32(stack[1]), uint32(stack[2])
	if n > hostabi.MaxLogBytes {
		n = hostabi.MaxLogBytes
	}
	msg, ok := read(mod, ptr, n)
	if !ok {
		return
	}
	name, hook := "?", "?"
	st := stateOf(ctx)
	if st != nil {
		name, hook = st.v.name, st.hook
	}
	var l hclog.Level
	switch level {
	case hostabi.LevelTrace:
		l = hclog.Trace
	case hostabi.LevelDebug:
		l = hclog.Debug
	case hostabi.LevelWarn:
		l = hclog.Warn
	case hostabi.LevelError:
		l = hclog.Error
	default:
		l = hclog.Info
	}
	if ll := loadLogOf(ctx); ll != nil {
		// Kept whatever the log budget: a rejection gives the policy's
		// last words, and the load log is bounded on its own.
		ll.add(logText(msg))
	}
	if l < r.log.GetLevel() {
		return // not written, so not charged to the budget
	}
	if !r.allowLogLine(st, name, hook) {
		return
	}
	r.log.Log(l, "policy: "+logText(msg), "policy", name, "hook", hook)
}

// The budget of what a policy may write to the gateway's log (ABI.md §5):
// without it a policy that logs in a loop, a bug or a hostile module,
// writes a line of up to 4 KiB per iteration until its deadline, on every
// call (a megabyte of log per request), and one that logs a thousand lines
// and returns normally is never even tripped. A call may write
// logLinesPerCall lines; all calls of a policy share a bucket of
// logLinesBurst lines refilled at logLinesPerSecond. That leaves a
// debugging policy a dozen lines per call at tens of calls per second, and
// bounds a runaway one to about 200 KiB/s. Lines past either limit are
// dropped and counted.
const (
	logLinesPerCall   = 16
	logLinesPerSecond = 50
	logLinesBurst     = 200
)

// logBudget is one policy's share of the gateway's log: a token bucket of
// lines, shared by its versions (a swap does not refill it), and the count
// and warning of what it dropped.
type logBudget struct {
	mu     sync.Mutex
	tokens float64
	at     time.Time

	dropped prometheus.Counter // sluice_policy_log_dropped_total{policy}
	warn    logtext.Every      // spaces the "lines dropped" warnings
}

func newLogBudget(dropped prometheus.Counter, now time.Time) *logBudget {
	return &logBudget{tokens: logLinesBurst, at: now, dropped: dropped, warn: logtext.Every{Interval: 10 * time.Second}}
}

// take takes one line from the bucket at now; false means none is left.
func (b *logBudget) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if dt := now.Sub(b.at).Seconds(); dt > 0 {
		b.tokens = math.Min(logLinesBurst, b.tokens+dt*logLinesPerSecond)
		b.at = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// allowLogLine charges one line of the call st (nil: none known) to its
// policy's budget. A dropped line is counted and, at most once per 10 s per
// policy, warned about with the number dropped since the last warning.
func (r *Runtime) allowLogLine(st *callState, name, hook string) bool {
	now := time.Now()
	b := r.m.logBudget(name, now)
	if (st == nil || st.logged < logLinesPerCall) && b.take(now) {
		if st != nil {
			st.logged++
		}
		return true
	}
	b.dropped.Inc()
	if n, ok := b.warn.Allow(now); ok {
		// dropped: since the last such warning, this line included; the
		// metric has them all.
		r.log.Warn("policy log lines dropped: over the policy's log budget (sluice_policy_log_dropped_total)",
			"policy", name, "hook", hook, "dropped", n,
			"per_call", logLinesPerCall, "per_second", logLinesPerSecond, "burst", logLinesBurst)
	}
	return false
}

// logText makes a guest's log message safe for a text log line (a policy,
// or a client whose text a policy logs, could otherwise forge or garble log
// lines). It has no length cap: log already cuts a message at
// hostabi.MaxLogBytes.
func logText(msg []byte) string { return logtext.Printable(string(msg)) }

// give writes val to the guest buffer (buf, cap) following the ABI's
// "length, write if it fits" rule.
func give(mod api.Module, stack []uint64, val []byte, buf, capacity uint32) {
	if len(val) > 1<<31-1 {
		ret(stack, hostabi.CodeTooLarge)
		return
	}
	n := uint32(len(val))
	if n <= capacity && n > 0 {
		if !mod.Memory().Write(buf, val) {
			ret(stack, hostabi.CodeBadPointer)
			return
		}
	}
	ret(stack, int32(n))
}

func hostConfig(ctx context.Context, mod api.Module, stack []uint64) {
	buf, capacity := uint32(stack[0]), uint32(stack[1])
	st := stateOf(ctx)
	if st == nil {
		ret(stack, hostabi.CodeUnavailable)
		return
	}
	give(mod, stack, st.v.config, buf, capacity)
}

func hostNow(_ context.Context, _ api.Module, stack []uint64) {
	stack[0] = uint64(time.Now().UnixMilli())
}

// rewriteState returns the call's rewrite state or sets the "unavailable" code.
func rewriteState(ctx context.Context, stack []uint64) (*callState, bool) {
	st := stateOf(ctx)
	if st == nil || st.rw == nil {
		ret(stack, hostabi.CodeUnavailable)
		return nil, false
	}
	return st, true
}

// guestBytes reads n bytes at ptr from guest memory. Past max it answers
// overCode, out of range CodeBadPointer; either way ok is false.
func guestBytes(mod api.Module, stack []uint64, ptr, n, max uint32, overCode int32) ([]byte, bool) {
	if n > max {
		ret(stack, overCode)
		return nil, false
	}
	b, ok := read(mod, ptr, n)
	if !ok {
		ret(stack, hostabi.CodeBadPointer)
		return nil, false
	}
	return b, true
}

func readPath(mod api.Module, stack []uint64, ptr, n uint32) (string, bool) {
	b, ok := guestBytes(mod, stack, ptr, n, hostabi.MaxPathBytes, hostabi.CodeTooLarge)
	return string(b), ok
}

func hostDocGet(ctx context.Context, mod api.Module, stack []uint64) {
	pp, pn, buf, capacity := uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])
	st, ok := rewriteState(ctx, stack)
	if !ok {
		return
	}
	path, ok := readPath(mod, stack, pp, pn)
	if !ok {
		return
	}
	var val []byte
	if st.lastOK && path == st.lastPath {
		val = st.lastVal
	} else {
		v, err := st.rw.doc.Get(path)
		if err != nil {
			st.lastOK = false
			ret(stack, hostabi.CodeOf(err))
			return
		}
		val = v
		st.lastPath, st.lastVal, st.lastOK = path, v, true
	}
	give(mod, stack, val, buf, capacity)
}

func hostDocSet(ctx context.Context, mod api.Module, stack []uint64) {
	pp, pn, vp, vn := uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])
	st, ok := rewriteState(ctx, stack)
	if !ok {
		return
	}
	path, ok := readPath(mod, stack, pp, pn)
	if !ok {
		return
	}
	val, ok := guestBytes(mod, stack, vp, vn, math.MaxUint32, hostabi.CodeTooLarge)
	if !ok {
		return
	}
	st.lastOK = false
	ret(stack, hostabi.CodeOf(st.rw.doc.Set(path, val)))
}

func hostDocDelete(ctx context.Context, mod api.Module, stack []uint64) {
	pp, pn := uint32(stack[0]), uint32(stack[1])
	st, ok := rewriteState(ctx, stack)
	if !ok {
		return
	}
	path, ok := readPath(mod, stack, pp, pn)
	if !ok {
		return
	}
	st.lastOK = false
	ret(stack, hostabi.CodeOf(st.rw.doc.Delete(path)))
}

func headerName(mod api.Module, stack []uint64, ptr, n uint32) (string, bool) {
	b, ok := guestBytes(mod, stack, ptr, n, hostabi.MaxHeaderNameBytes, hostabi.CodeTooLarge)
	if !ok {
		return "", false
	}
	name, code := hostabi.CheckHeaderEdit(string(b), "", true)
	if code != hostabi.CodeOK {
		ret(stack, code)
		return "", false
	}
	return name, true
}

func hostHeaderSet(ctx context.Context, mod api.Module, stack []uint64) {
	np, nn, vp, vn := uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])
	st, ok := rewriteState(ctx, stack)
	if !ok {
		return
	}
	name, ok := headerName(mod, stack, np, nn)
	if !ok {
		return
	}
	vb, ok := guestBytes(mod, stack, vp, vn, hostabi.MaxHeaderBytes, hostabi.CodeTooLarge)
	if !ok {
		return
	}
	val := string(vb)
	if _, code := hostabi.CheckHeaderEdit(name, val, false); code != hostabi.CodeOK {
		ret(stack, code)
		return
	}
	st.rw.headers = append(st.rw.headers, headerEdit{name: name, value: val})
	ret(stack, hostabi.CodeOK)
}

func hostHeaderRemove(ctx context.Context, mod api.Module, stack []uint64) {
	np, nn := uint32(stack[0]), uint32(stack[1])
	st, ok := rewriteState(ctx, stack)
	if !ok {
		return
	}
	name, ok := headerName(mod, stack, np, nn)
	if !ok {
		return
	}
	st.rw.headers = append(st.rw.headers, headerEdit{name: name, remove: true})
	ret(stack, hostabi.CodeOK)
}

func hostUseUpstream(ctx context.Context, mod api.Module, stack []uint64) {
	p, n := uint32(stack[0]), uint32(stack[1])
	st, ok := rewriteState(ctx, stack)
	if !ok {
		return
	}
	if n == 0 {
		ret(stack, hostabi.CodeBadValue)
		return
	}
	b, ok := guestBytes(mod, stack, p, n, hostabi.MaxUpstreamBytes, hostabi.CodeTooLarge)
	if !ok {
		return
	}
	name := string(b)
	if code := hostabi.CheckUpstreamName(name); code != hostabi.CodeOK {
		ret(stack, code)
		return
	}
	st.rw.upstream = name
	ret(stack, hostabi.CodeOK)
}

func hostReject(ctx context.Context, mod api.Module, stack []uint64) {
	p, n := uint32(stack[0]), uint32(stack[1])
	st, ok := rewriteState(ctx, stack)
	if !ok {
		return
	}
	b, ok := guestBytes(mod, stack, p, n, hostabi.MaxOutputBytes, hostabi.CodeTooLarge)
	if !ok {
		return
	}
	e, err := hostabi.DecodeRejectError(b)
	if err != nil {
		ret(stack, hostabi.CodeBadValue)
		return
	}
	st.rw.reject = &e
	ret(stack, hostabi.CodeOK)
}

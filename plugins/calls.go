package plugins

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/jsonx"
)

// Trace tells how a hook decision was taken (for logs, `sluice policy test`
// and tests).
type Trace struct {
	// Policy is the module whose answer was used (recover, replay), or that
	// rejected the request or chose an upstream the caller does not know
	// (rewrite); "" when the built-in default decided.
	Policy string `json:"policy,omitempty"`
	// Outcome: "decided" (a module answered), "default" (no module answered:
	// none exports the hook or all deferred), "fault", "error", "tripped",
	// "canceled", "busy" (the built-in default was used because of that), and
	// for rewrite "done" (every module ran or deferred), "rejected", "error"
	// (Policy chose an upstream the caller does not know: RewriteChecks.KnownUpstream), or
	// the first module's "fault", "error", "busy", "canceled" or "tripped"
	// when its edits were dropped (Policy names it).
	Outcome string `json:"outcome"`
	// FailedClosed: the rewrite chain stopped at Policy, a module the caller
	// holds to its edits (RewriteChecks.FailClosed), which could not
	// complete its rewrite; the caller fails the request instead of sending
	// it on without that module's edits.
	FailedClosed bool `json:"failed_closed,omitempty"`
	// UnknownUpstream: the rewrite chain stopped at Policy, whose
	// use_upstream named an upstream the caller does not know
	// (RewriteChecks.KnownUpstream); the caller fails the request, so none
	// of the chain's edits reach an upstream (RewriteTraceVerdict).
	UnknownUpstream bool `json:"unknown_upstream,omitempty"`
	// Steps lists every module asked, in order.
	Steps []TraceStep `json:"steps,omitempty"`
}

// TraceStep is one module's part in a decision.
type TraceStep struct {
	Policy string `json:"policy"`
	// Outcome: ok, defer, error, fault, canceled, busy, tripped, skipped
	// (a version-1 module is not asked about a failure of a phase version 1
	// did not ask about; ABI.md §12), or stand_in (a parked embedded module's
	// native twin answered; Options.StandIns).
	Outcome  string        `json:"outcome"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns"`
}

// outcome of one module call.
type outcome uint8

const (
	outOK outcome = iota
	outDefer
	outError
	outFault
	outCanceled
	outBusy
	outTripped
	outSkipped
	outStandIn
)

var outcomeNames = [...]string{"ok", "defer", "error", "fault", "canceled", "busy", "tripped", "skipped", "stand_in"}

func (o outcome) String() string { return outcomeNames[o] }

// fallbackReason is the fallback metric's reason for an outcome.
func (o outcome) fallbackReason() string {
	switch o {
	case outBusy, outCanceled:
		return "canceled"
	}
	return o.String()
}

var errBadAlloc = errors.New("sluice_alloc returned an address outside memory")

// minInputRegion is the smallest input region the host asks sluice_alloc for.
const minInputRegion = 4 << 10

// callContext bounds a call by CallTimeout (or the request's deadline when
// sooner).
func (r *Runtime) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= r.opts.CallTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, r.opts.CallTimeout)
}

// invoke runs one hook on one instance of v. decode reads the result while
// the instance is still held.
func (v *version) invoke(ctx context.Context, h int, input []byte, rw *rewriteCall,
	decode func(r uint64, mem memView) (resultKind, error)) TraceStep {
	start := time.Now()
	hm := v.hookMetrics(h)
	step := TraceStep{Policy: v.name}
	// Waiting for a free instance is bounded like a call, waiting for one
	// created for this call by instanceWait (get); the call's own deadline
	// starts once it has one, so a lazily created instance (a few ms, far
	// more under load) does not eat the call's time.
	wctx, wcancel := v.rt.callContext(ctx)
	inst, err := v.get(ctx, wctx)
	wcancel()
	cctx, cancel := v.rt.callContext(ctx)
	defer cancel()
	cctx = withState(cctx, &callState{v: v, hook: hookNames[h], rw: rw})
	if err != nil {
		step.Duration = time.Since(start)
		var f *initFault
		if errors.As(err, &f) { // booked by instantiate
			hm.faulted.Inc()
			step.Outcome, step.Error = outFault.String(), f.msg
			return step
		}
		v.st.errors.Add(1)
		hm.canceled.Inc()
		v.logBusy(hookNames[h], err)
		step.Outcome, step.Error = outBusy.String(), err.Error()
		return step
	}
	if v.tripped.Load() {
		// Tripped while this call waited: no call runs v's code after the
		// fault that tripped it.
		v.put(inst, true)
		hm.tripped.Inc()
		step.Outcome, step.Duration = outTripped.String(), time.Since(start)
		return step
	}
	kind, err := inst.run(cctx, h, input, decode)
	step.Duration = time.Since(start)
	hm.duration.Observe(step.Duration.Seconds())
	v.st.calls.Add(1)
	if err == nil {
		v.put(inst, true)
		v.consecutive.Store(0)
		v.completed.note(h, len(input))
		switch kind {
		case resDefer:
			hm.deferred.Inc()
			step.Outcome = outDefer.String()
		case resError:
			hm.errored.Inc()
			v.st.errors.Add(1)
			v.st.setErr(hookNames[h] + ": the policy returned its error result")
			step.Outcome, step.Error = outError.String(), "the policy returned its error result"
		default:
			hm.ok.Inc()
			step.Outcome = outOK.String()
		}
		return step
	}
	if ctx.Err() != nil { // the caller gave up: not the policy's fault
		v.put(inst, false)
		hm.canceled.Inc()
		v.st.errors.Add(1)
		step.Outcome, step.Error = outCanceled.String(), ctx.Err().Error()
		return step
	}
	stderr := inst.tail.String()
	fk := v.classify(err, stderr, inst.mem)
	msg := faultMessage(hookNames[h], fk, err, stderr)
	hm.faulted.Inc()
	uncounted := ""
	if fk != "timeout" { // a loop is the version's whatever its input
		uncounted = v.completed.inputsFault(h, len(input))
	}
	v.bookFault(hookNames[h], fk, msg, uncounted)
	v.put(inst, false)
	step.Outcome, step.Error = outFault.String(), msg
	return step
}

// faultMessage describes a fault for logs and last_error: the hook ("init"
// for an instantiation), its kind, the error's first line and the useful
// part of what the guest wrote to stderr.
func faultMessage(hook, kind string, err error, stderr string) string {
	msg := fmt.Sprintf("%s %s: %s", hook, kind, firstLine(err.Error()))
	if t := strings.TrimSpace(stderr); t != "" && !strings.Contains(msg, "(stderr: ") {
		msg += " (stderr: " + stderrExcerpt(t) + ")"
	}
	return msg
}

// logBusy warns that a call of v got the built-in default because no
// instance was ready in time: for a rewrite it means the request went on
// without the policy's edits. Under overload that can be every call, so
// the warning comes at most once per 10 s per version (v.busyLog), with the
// number of such calls, and is written off the request path; each call is
// counted in the metrics.
func (v *version) logBusy(hook string, err error) {
	n, ok := v.busyLog.Allow(time.Now())
	if !ok {
		return
	}
	v.rt.background(func() {
		v.rt.log.Warn("policy call got the built-in default: no instance was ready in time", "policy", v.name,
			"version", v.gen, "hook", hook, "calls", n, "error", err)
	})
}

// fault books one fault of v that counts towards its trip (bookFault).
func (v *version) fault(hook, kind, msg string) { v.bookFault(hook, kind, msg, "") }

// bookFault books one fault of v, a hook call's or an instantiation's: it
// is counted, logged and becomes the policy's last_error. uncounted, when
// not "", says why the fault is the input's rather than v's
// (completedInputs.inputsFault): it does not count towards the trip and
// leaves the run of faults as it was, neither longer nor reset. The
// FaultsBeforeRollback-th counted fault in a row trips v before bookFault
// returns, so no call that starts later runs v's code (ABI.md §7), and
// starts the rollback to the previous version in the background; the trip
// stays the last_error until the rollback says how it ended.
func (v *version) bookFault(hook, kind, msg, uncounted string) {
	v.st.faults.Add(1)
	if !v.retiring.Load() {
		// A replaced version's series may be gone (publish): a fault of a
		// call still under way must not bring one back for good.
		v.rt.m.faults.WithLabelValues(v.name, hook, kind).Inc()
	}
	fields := []any{"policy", v.name, "version", v.gen, "sha256", short(v.comp.sha), "hook", hook, "kind", kind, "error", msg}
	if uncounted != "" {
		fields = append(fields, "not_counted_towards_trip", uncounted)
	}
	v.rt.log.Warn("policy fault: "+v.fallbackWording(hook), fields...)
	v.fmu.Lock()
	defer v.fmu.Unlock()
	if v.tripped.Load() {
		return // a call that was under way when v tripped: the trip stays the news
	}
	if uncounted != "" {
		v.st.setErr(msg + " (not counted towards the trip: " + uncounted + ")")
		return
	}
	v.st.setErr(msg)
	if n := v.rt.opts.FaultsBeforeRollback; n < 0 || int(v.consecutive.Add(1)) < n {
		return // n < 0: never rolled back (policy test)
	}
	v.tripped.Store(true)
	v.st.setErr(v.fallbackWording("") + " after " + v.rt.faultsInARow(v, msg))
	v.rt.background(func() { v.rt.rollback(v, msg) })
}

// fallbackWording says what a call gets when v's code cannot serve it, for
// hook ("" when it is every hook's case: a trip). That is the built-in
// default, except for a rewrite the gateway holds to its edits
// (sluice_fail_closed, README "Policies"), whose request is refused. The
// runtime does not know that choice, the caller's per call
// (RewriteChecks.FailClosed), so for the rewrite hook both are named.
func (v *version) fallbackWording(hook string) string {
	if hook == hookNames[hRecover] || hook == hookNames[hReplay] || hook == hookNames[hStreamEvent] ||
		v.hooks&hostabi.HookRewrite == 0 {
		return "the built-in default applies"
	}
	return "the built-in default applies, or the request is refused where the policy fails closed (sluice_fail_closed)"
}

// completedInputs is, for each hook of a version, one more than the size
// of the largest input a call of it completed without a fault (0: none
// yet): the trip rule's measure of what the version can hold
// (inputsFault).
type completedInputs [len(hookNames)]atomic.Int64

// note records that a call of hook h completed on an input of n bytes.
func (c *completedInputs) note(h, n int) {
	for {
		old := c[h].Load()
		if int64(n)+1 <= old || c[h].CompareAndSwap(old, int64(n)+1) {
			return
		}
	}
}

// inputsFault says why a fault of hook h on an input of n bytes is the
// input's, not the version's, or "" when it is the version's. It is the
// input's when h has completed a call without a fault, but none on an input
// this large: the size of an input is its sender's choice (for rewrite the
// client's headers, ABI.md §3.3), and a guest may refuse one it cannot hold by
// trapping (ABI.md §2), so one client's oversized requests must not trip
// the policy for every client (ABI.md §7). Until h has completed a call,
// a fault on an input over freshInputBytes is the input's too (a version
// just loaded, by a restart or a deploy, must not be tripped or rolled back
// by the first oversized requests), and one on a smaller input is the
// version's: a version that never works still trips on ordinary inputs.
func (c *completedInputs) inputsFault(h, n int) string {
	largest := c[h].Load() - 1
	switch {
	case largest < 0 && n > freshInputBytes:
		return fmt.Sprintf("its input of %d bytes is over %d bytes and this version's %s has completed no call yet", n, freshInputBytes, hookNames[h])
	case largest < 0 || int64(n) <= largest:
		return ""
	}
	return fmt.Sprintf("its input of %d bytes is larger than any this version's %s completed (%d bytes)", n, hookNames[h], largest)
}

// freshInputBytes is the input size over which a fault of a hook that has
// completed no call is not counted toward the trip (inputsFault): the 64 KiB
// a guest's fixed input buffer commonly holds (the ABI.md §11 example's),
// well over what an ordinary request's rewrite input needs.
const freshInputBytes = 64 << 10

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// stderrExcerpt picks the useful part of a guest's stderr: from the first
// "panic:" or "fatal error:" line (Go guests print a goroutine dump after
// it), else the end.
func stderrExcerpt(s string) string {
	const n = 400
	i := strings.Index(s, "panic: ")
	if j := strings.Index(s, "fatal error: "); j >= 0 && (i < 0 || j < i) {
		i = j
	}
	if i >= 0 {
		s = s[i:]
		if len(s) > n {
			s = s[:n] + "…"
		}
		return s
	}
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// classify names a fault for metrics: timeout, memory, exit, invalid_output,
// invalid_alloc or trap. tail is the guest's stderr; mem is nil when the
// instance was never made.
func (v *version) classify(err error, tail string, mem api.Memory) string {
	memFull := false
	if mem != nil {
		limit := uint64(v.rt.opts.MemoryLimitPages) << 16
		slack := min(limit/4, 8<<20)
		memFull = uint64(mem.Size())+slack >= limit
	}
	var ee *sys.ExitError
	switch {
	case errors.As(err, &ee):
		switch ee.ExitCode() {
		case sys.ExitCodeDeadlineExceeded, sys.ExitCodeContextCanceled:
			return "timeout"
		}
		if memFull || strings.Contains(tail, "out of memory") {
			return "memory"
		}
		return "exit"
	case errors.Is(err, errInvalidOutput):
		return "invalid_output"
	case errors.Is(err, errBadAlloc):
		return "invalid_alloc"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case memFull || strings.Contains(tail, "out of memory"):
		return "memory"
	}
	return "trap"
}

// run copies the input in, calls the hook and decodes its result.
func (i *instance) run(ctx context.Context, h int, input []byte, decode func(uint64, memView) (resultKind, error)) (resultKind, error) {
	i.tail.reset()
	var ptr uint32
	if len(input) > 0 {
		// The region from sluice_alloc stays ours until the next
		// sluice_alloc (ABI.md §2): reuse it while inputs fit.
		if uint32(len(input)) > i.inCap {
			size := max(uint32(len(input)), minInputRegion)
			i.stack[0] = uint64(size)
			if err := i.alloc.CallWithStack(ctx, i.stack); err != nil {
				return 0, fmt.Errorf("sluice_alloc: %w", err)
			}
			i.inPtr, i.inCap = uint32(i.stack[0]), size
			if i.inPtr == 0 || uint64(i.inPtr)+uint64(size) > uint64(i.mem.Size()) {
				i.inCap = 0
				return 0, errBadAlloc
			}
		}
		ptr = i.inPtr
		if !i.mem.Write(ptr, input) {
			return 0, errBadAlloc
		}
	}
	i.stack[0], i.stack[1] = uint64(ptr), uint64(len(input))
	if err := i.fns[h].CallWithStack(ctx, i.stack); err != nil {
		return 0, err
	}
	return decode(i.stack[0], i.mem)
}

func (r *Runtime) fallback(hook int, reason string) {
	r.m.fallbacks.WithLabelValues(hookNames[hook], reason).Inc()
}

// Recover asks the recover policies about an upstream error. It never fails:
// without a policy answer it returns hostabi.DefaultRecover(in).
func (r *Runtime) Recover(ctx context.Context, in hostabi.RecoverInput) hostabi.RecoverOutput {
	out, tr := r.RecoverTrace(ctx, in)
	if r.recording.Load() {
		r.recordRecover(ctx, in, out, tr)
	}
	return out
}

// RecoverTrace is Recover that also tells who decided.
//
// Each module gets the input of the ABI version it declares (ABI.md §12): a
// module older than version 3 never gets the version-3 members, may not
// answer rehydrate, and is not asked an owner_unavailable question at all
// (it is skipped, as if it had deferred).
func (r *Runtime) RecoverTrace(ctx context.Context, in hostabi.RecoverInput) (hostabi.RecoverOutput, Trace) {
	var inputs [hostabi.ABIVersion + 1][]byte // by ABI version
	var out hostabi.RecoverOutput
	owner := in.OwnerQuestion()
	tr, decided := r.decide(ctx, hRecover, func(v *version) []byte {
		if v.abi < 3 && owner {
			return nil // not asked
		}
		abi := min(max(v.abi, hostabi.MinABIVersion), hostabi.ABIVersion)
		if inputs[abi] == nil {
			inputs[abi] = hostabi.AppendRecoverInputVersion(make([]byte, 0, 256), in, abi)
		}
		return inputs[abi]
	}, func(v *version) bool {
		if v.standIn.Recover == nil {
			return false
		}
		out = v.standIn.Recover(in, v.config)
		return true
	}, func(v *version, res uint64, mem memView) (resultKind, error) {
		var kind resultKind
		var err error
		out, kind, err = decodeRecoverResult(res, mem, v.abi)
		return kind, err
	})
	if !decided {
		return hostabi.DefaultRecover(in), tr
	}
	return out, tr
}

// Replay asks the replay policies whether a failed request may be sent
// again. Without a policy answer it returns hostabi.DefaultReplay(in).
func (r *Runtime) Replay(ctx context.Context, in hostabi.ReplayInput) hostabi.ReplayOutput {
	out, tr := r.ReplayTrace(ctx, in)
	if r.recording.Load() {
		r.recordReplay(ctx, in, out, tr)
	}
	return out
}

// ReplayTrace is Replay that also tells who decided.
//
// Each module gets the input of the ABI version it declares (ABI.md §12): a
// version-1 module gets exactly the version-1 members and may answer only
// the version-1 verdicts, and it is asked only about what version 1 asked
// about, failures before content (Phase "" or PhaseBeforeContent); for
// before_headers and after_content failures it is skipped, as if it had
// deferred.
func (r *Runtime) ReplayTrace(ctx context.Context, in hostabi.ReplayInput) (hostabi.ReplayOutput, Trace) {
	var inputs [hostabi.ABIVersion + 1][]byte // by ABI version
	var out hostabi.ReplayOutput
	tr, decided := r.decide(ctx, hReplay, func(v *version) []byte {
		if v.abi < 2 && in.Phase != "" && in.Phase != hostabi.PhaseBeforeContent {
			return nil // not asked
		}
		abi := min(max(v.abi, hostabi.MinABIVersion), hostabi.ABIVersion)
		if inputs[abi] == nil {
			inputs[abi] = hostabi.AppendReplayInputVersion(make([]byte, 0, 512), in, abi)
		}
		return inputs[abi]
	}, func(v *version) bool {
		if v.standIn.Replay == nil {
			return false
		}
		out = v.standIn.Replay(in, v.config)
		return true
	}, func(v *version, res uint64, mem memView) (resultKind, error) {
		var kind resultKind
		var err error
		out, kind, err = decodeReplayResult(res, mem, v.abi)
		return kind, err
	})
	if !decided {
		return hostabi.DefaultReplay(in), tr
	}
	return out, tr
}

// decide asks the modules exporting hook h in order until one decides. It
// reports false when the built-in default must be used. input returns a
// module's input, nil when the module is not to be asked (skipped like a
// defer); native answers with a parked module's stand-in (false when it has
// none for h); decode reads a module's result.
func (r *Runtime) decide(ctx context.Context, h int, input func(v *version) []byte, native func(v *version) bool,
	decode func(v *version, r uint64, mem memView) (resultKind, error)) (Trace, bool) {
	var tr Trace
	asked := 0
	for attempt := 0; attempt < 4; attempt++ {
		set := r.active.Load()
		tr.Steps = tr.Steps[:0]
		asked = 0
		retry := false
		for _, v := range set.byHook[h] {
			if !v.acquire() { // swapped out since we loaded the set
				retry = true
				break
			}
			b := input(v)
			if b == nil {
				v.release()
				tr.Steps = append(tr.Steps, TraceStep{Policy: v.name, Outcome: outSkipped.String()})
				continue
			}
			asked++
			if v.tripped.Load() {
				v.release()
				v.hookMetrics(h).tripped.Inc()
				tr.Steps = append(tr.Steps, TraceStep{Policy: v.name, Outcome: outTripped.String()})
				tr.Policy, tr.Outcome = v.name, outTripped.String()
				r.fallback(h, outTripped.fallbackReason())
				return tr, false
			}
			if v.parked() && native(v) {
				// Parked: its stand-in decides as the module would
				// while the module is compiled again (Options.StandIns).
				v.startUnpark()
				v.release()
				v.hookMetrics(h).standIn.Inc()
				tr.Steps = append(tr.Steps, TraceStep{Policy: v.name, Outcome: outStandIn.String()})
				tr.Policy, tr.Outcome = v.name, "decided"
				return tr, true
			}
			step := v.invoke(ctx, h, b, nil, func(res uint64, mem memView) (resultKind, error) { return decode(v, res, mem) })
			v.release()
			tr.Steps = append(tr.Steps, step)
			switch step.Outcome {
			case "ok":
				tr.Policy, tr.Outcome = v.name, "decided"
				return tr, true
			case "defer":
				continue
			}
			tr.Policy, tr.Outcome = v.name, step.Outcome
			r.fallback(h, step.Outcome)
			return tr, false
		}
		if !retry {
			break
		}
	}
	tr.Outcome = "default"
	if asked == 0 {
		r.fallback(h, "no_policy")
	} else {
		r.fallback(h, "deferred")
	}
	return tr, false
}

// Rewrite runs every rewrite_request policy in order on the request; each
// sees the previous edits and a reject stops the chain. A policy that faults
// or errs has its own edits dropped. Body is nil when nothing changed.
func (r *Runtime) Rewrite(ctx context.Context, in hostabi.RewriteInput) hostabi.RewriteOutput {
	out, _ := r.RewriteWith(ctx, in, RewriteChecks{})
	return out
}

// RewriteChecks are the caller's judgements applied while the rewrite chain
// runs (RewriteWith); a nil member judges nothing.
type RewriteChecks struct {
	// Body judges the body a module leaves when it returns having changed
	// it (ABI.md §3.3): a body it refuses counts as the module's error
	// result, so all of its edits are dropped, and the chain goes on from
	// the edits before it. It gets a body that is not modified afterwards.
	Body func(body []byte) error
	// KnownUpstream judges each module's use_upstream choice when it
	// returns: a name it does not know is a misconfiguration no later edit
	// should hide (ABI.md §3.3), so it counts as the module's error, is
	// logged naming the module, and stops the chain with that name as the
	// output's Upstream, for the caller to fail the request.
	KnownUpstream func(name string) bool
	// FailClosed names the modules the caller holds to their edits: when
	// one of them cannot complete its rewrite (no instance in time, a
	// fault, tripped, its error result, an edited body Body refuses), the
	// chain stops there with Trace.FailedClosed, counted as the fallback
	// reason "failed_closed", rather than going on without its edits
	// (README "Policies": a guardrail must not be bypassed under load).
	FailClosed func(policy string) bool
}

// RewriteGuarded is Rewrite with the checks Body (check), KnownUpstream
// and FailClosed; it also holds the modules failClosed
// names to their edits (RewriteChecks.FailClosed): policy is the module
// that could not complete its rewrite and stopped the chain, why says how
// (its outcome, and its error when it has one); both are "" when none did.
func (r *Runtime) RewriteGuarded(ctx context.Context, in hostabi.RewriteInput, check func(body []byte) error,
	knownUpstream, failClosed func(name string) bool) (out hostabi.RewriteOutput, policy, why string) {
	out, tr := r.RewriteWith(ctx, in, RewriteChecks{Body: check, KnownUpstream: knownUpstream, FailClosed: failClosed})
	if !tr.FailedClosed {
		return out, "", ""
	}
	why = tr.Outcome
	if last := tr.Steps[len(tr.Steps)-1]; last.Error != "" {
		why += ": " + last.Error
	}
	return out, tr.Policy, why
}

// RewriteWith is Rewrite with checks, telling what each
// policy did; the call is recorded like Rewrite's.
func (r *Runtime) RewriteWith(ctx context.Context, in hostabi.RewriteInput, checks RewriteChecks) (hostabi.RewriteOutput, Trace) {
	out, tr := r.rewriteTrace(ctx, in, checks)
	if r.recording.Load() {
		r.recordRewrite(in, out, tr)
	}
	return out, tr
}

// RewriteActive reports whether any loaded policy implements the rewrite
// hook now; when none does, callers may skip building a RewriteInput.
func (r *Runtime) RewriteActive() bool {
	return len(r.active.Load().byHook[hRewrite]) > 0
}

// RewriteServes reports whether a version of the policy name that
// implements the rewrite hook serves now (a tripped one counts: its calls
// fail, which RewriteChecks.FailClosed judges). A caller that holds name to
// its edits refuses requests while none does: a refused or missing file is
// no reason to send them on unrewritten.
func (r *Runtime) RewriteServes(name string) bool {
	return r.active.Load().find(name, hRewrite) != nil
}

// RewriteRefusedUnserved counts a request the caller refused because a
// rewrite policy it holds to its edits has no version serving
// (RewriteServes false): a decision the built-in default did not take, as
// a chain stopped at such a policy is counted (fallback reason
// failed_closed; README "Observability").
func (r *Runtime) RewriteRefusedUnserved() {
	r.fallback(hRewrite, rewriteFailedClosed)
}

// RewriteReady reports whether a version of the policy name that implements
// the rewrite hook serves now and has not tripped: a tripped version with
// nothing to roll back to answers every call with the built-in default,
// which a caller holding name to its edits refuses, until a new file loads
// (README "Policies"), so it is not ready.
func (r *Runtime) RewriteReady(name string) bool {
	v := r.active.Load().find(name, hRewrite)
	return v != nil && !v.tripped.Load()
}

// RewriteTrace is Rewrite that also tells what each policy did.
func (r *Runtime) RewriteTrace(ctx context.Context, in hostabi.RewriteInput) (hostabi.RewriteOutput, Trace) {
	return r.rewriteTrace(ctx, in, RewriteChecks{})
}

func (r *Runtime) rewriteTrace(ctx context.Context, in hostabi.RewriteInput, checks RewriteChecks) (hostabi.RewriteOutput, Trace) {
	check, knownUpstream := checks.Body, checks.KnownUpstream
	failClosed := func(v *version) bool { return checks.FailClosed != nil && checks.FailClosed(v.name) }
	var out hostabi.RewriteOutput
	tr := Trace{Outcome: "done"}
	set := r.active.Load()
	mods := set.byHook[hRewrite]
	if len(mods) == 0 {
		tr.Outcome = "default"
		return out, tr
	}
	doc := jsonx.NewDocument(in.Body)
	headers := visibleHeaders(in.Headers)
	var buf []byte
	for _, v := range mods {
		if !v.acquire() {
			// Swapped out since we loaded the set: use its successor.
			v = r.active.Load().find(v.name, hRewrite)
			if v == nil || !v.acquire() {
				continue
			}
		}
		if v.tripped.Load() {
			v.release()
			v.hookMetrics(hRewrite).tripped.Inc()
			tr.Steps = append(tr.Steps, TraceStep{Policy: v.name, Outcome: outTripped.String()})
			if failClosed(v) {
				r.fallback(hRewrite, rewriteFailedClosed)
				tr.Policy, tr.Outcome, tr.FailedClosed = v.name, outTripped.String(), true
				break
			}
			r.fallback(hRewrite, outTripped.String())
			continue
		}
		cp := doc.Checkpoint()
		before := doc.Bytes() // kept as it is: the next edit copies (Checkpoint)
		buf = hostabi.AppendRewriteContext(buf[:0], rewriteContext(in, doc, headers))
		rw := &rewriteCall{doc: doc}
		var invalid error        // check refused the module's body
		var unknownUpstream bool // knownUpstream refused the module's use_upstream
		step := v.invoke(ctx, hRewrite, buf, rw, func(res uint64, _ memView) (resultKind, error) {
			kind, err := decodeRewriteResult(res)
			if err == nil && kind != resError && check != nil && !bytes.Equal(doc.Bytes(), before) {
				if invalid = check(doc.Bytes()); invalid != nil {
					return resError, nil // counted as the module's error (invoke)
				}
			}
			if err == nil && kind != resError && knownUpstream != nil && rw.upstream != "" && !knownUpstream(rw.upstream) {
				unknownUpstream = true
				return resError, nil // counted as the module's error (invoke)
			}
			return kind, err
		})
		v.release()
		if invalid != nil {
			step.Error = "its edited body is not a valid request: " + invalid.Error()
			v.st.setErr(hookNames[hRewrite] + ": " + step.Error)
			r.log.Error("rewrite policy produced an invalid request; its edits are discarded", "policy", v.name, "error", invalid.Error())
		}
		if unknownUpstream {
			step.Error = fmt.Sprintf("use_upstream named %q, which is not a configured upstream", rw.upstream)
			v.st.setErr(hookNames[hRewrite] + ": " + step.Error)
			r.log.Warn("rewrite policy chose an upstream that is not configured; the request fails", "policy", v.name,
				"version", v.gen, "upstream", rw.upstream)
			tr.Steps = append(tr.Steps, step)
			out.Upstream = rw.upstream
			tr.Policy, tr.Outcome, tr.UnknownUpstream = v.name, outError.String(), true
			break
		}
		tr.Steps = append(tr.Steps, step)
		if step.Outcome != "ok" && step.Outcome != "defer" {
			doc.Restore(cp)
			if failClosed(v) {
				r.fallback(hRewrite, rewriteFailedClosed)
				tr.Policy, tr.Outcome, tr.FailedClosed = v.name, step.Outcome, true
				break
			}
			r.fallback(hRewrite, outcomeFrom(step.Outcome).fallbackReason())
			continue
		}
		for _, he := range rw.headers {
			if he.remove {
				delete(out.SetHeaders, he.name)
				out.RemoveHeaders = appendOnce(out.RemoveHeaders, he.name)
				continue
			}
			if out.SetHeaders == nil {
				out.SetHeaders = map[string]string{}
			}
			out.SetHeaders[he.name] = he.value
			out.RemoveHeaders = removeName(out.RemoveHeaders, he.name)
		}
		if rw.upstream != "" {
			out.Upstream = rw.upstream
		}
		if rw.reject != nil {
			out.Reject = rw.reject
			tr.Policy, tr.Outcome = v.name, "rejected"
			break
		}
	}
	if tr.Outcome == "done" {
		// The chain went on past modules whose edits were dropped: the
		// first names the outcome, as for the other hooks.
		for _, st := range tr.Steps {
			if st.Outcome != outOK.String() && st.Outcome != outDefer.String() {
				tr.Policy, tr.Outcome = st.Policy, st.Outcome
				break
			}
		}
	}
	if tr.FailedClosed {
		return hostabi.RewriteOutput{}, tr // nothing of the chain applies: the request fails
	}
	if doc.Changed() {
		out.Body = doc.Bytes()
	}
	return out, tr
}

// rewriteFailedClosed is the fallback reason of a rewrite chain stopped at
// a module its caller holds to its edits (RewriteChecks.FailClosed).
const rewriteFailedClosed = "failed_closed"

func outcomeFrom(s string) outcome {
	for i, n := range outcomeNames {
		if n == s {
			return outcome(i)
		}
	}
	return outFault
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

func removeName(list []string, s string) []string {
	out := list[:0]
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// find returns the serving version named name that exports hook h.
func (s *activeSet) find(name string, h int) *version {
	for _, v := range s.byHook[h] {
		if v.name == name {
			return v
		}
	}
	return nil
}

// visibleHeaders lower-cases names and drops credentials.
func visibleHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		lk := strings.ToLower(k)
		if hostabi.HiddenHeader(lk) {
			continue
		}
		out[lk] = v
	}
	return out
}

// rewriteContext is the rewrite hook's input for the document's current state.
func rewriteContext(in hostabi.RewriteInput, doc *jsonx.Document, headers map[string]string) hostabi.RewriteContext {
	c := hostabi.RewriteContext{Surface: in.Surface, Endpoint: in.Endpoint, BodyBytes: doc.Len(), Headers: headers}
	if raw, err := doc.Get("model"); err == nil {
		if s, ok := jsonx.Unquote(raw); ok {
			c.Model = s
		}
	}
	if raw, err := doc.Get("stream"); err == nil && string(raw) == "true" {
		c.Stream = true
	}
	return c
}

// StreamHookActive reports whether any loaded policy implements the
// stream_event hook now. The gateway asks once per stream: without one it
// never builds a StreamEventInput (the no-hook path costs nothing).
func (r *Runtime) StreamHookActive() bool {
	return len(r.active.Load().byHook[hStreamEvent]) > 0
}

// StreamEvent runs every stream_event policy in order on one stream event;
// each sees the previous one's replacement, and a drop stops the chain. A
// module that defers, errs or faults passes the event on as it got it. The
// result is StreamPass when nothing changed, StreamDrop, or StreamReplace
// with the final delta/text in out.
func (r *Runtime) StreamEvent(ctx context.Context, in hostabi.StreamEventInput) hostabi.StreamEventOutput {
	if !r.recording.Load() {
		// The per-event path builds no trace: with the hook on, every text
		// delta of every stream comes here.
		return r.streamEvent(ctx, in, nil)
	}
	var tr Trace
	out := r.streamEvent(ctx, in, &tr)
	r.recordStreamEvent(in, out, tr)
	return out
}

// StreamEventTrace is StreamEvent that also tells who decided: the module
// whose answer the output is (a drop, the last replacement, else the first
// module that answered), with Outcome "decided"; without one, "default", or
// the first module's fault, error, busy or tripped outcome.
func (r *Runtime) StreamEventTrace(ctx context.Context, in hostabi.StreamEventInput) (hostabi.StreamEventOutput, Trace) {
	var tr Trace
	out := r.streamEvent(ctx, in, &tr)
	return out, tr
}

// streamEvent is StreamEvent, filling tr when it is not nil.
func (r *Runtime) streamEvent(ctx context.Context, in hostabi.StreamEventInput, tr *Trace) hostabi.StreamEventOutput {
	out := hostabi.StreamEventOutput{Verdict: hostabi.StreamPass}
	if tr != nil {
		tr.Outcome = "default"
	}
	// note adds a module's step to tr. decided makes a module that
	// answered the decider when its answer changed the event (a drop or a
	// replacement) or when no module has decided yet (a pass).
	var failed TraceStep // the first module that could not answer
	note := func(step TraceStep) {
		if tr == nil {
			return
		}
		tr.Steps = append(tr.Steps, step)
		switch step.Outcome {
		case outOK.String(), outDefer.String():
		default:
			if failed.Policy == "" {
				failed = step
			}
		}
	}
	decided := func(v *version, changed bool) {
		if tr != nil && (changed || tr.Outcome != "decided") {
			tr.Policy, tr.Outcome = v.name, "decided"
		}
	}
	mods := r.active.Load().byHook[hStreamEvent]
	if len(mods) == 0 {
		return out
	}
	var buf []byte
	for _, v := range mods {
		if !v.acquire() {
			if v = r.active.Load().find(v.name, hStreamEvent); v == nil || !v.acquire() {
				continue
			}
		}
		if v.tripped.Load() {
			v.release()
			v.hookMetrics(hStreamEvent).tripped.Inc()
			r.fallback(hStreamEvent, outTripped.String())
			note(TraceStep{Policy: v.name, Outcome: outTripped.String()})
			continue
		}
		buf = hostabi.AppendStreamEventInput(buf[:0], in)
		var res hostabi.StreamEventOutput
		step := v.invoke(ctx, hStreamEvent, buf, nil, func(x uint64, mem memView) (resultKind, error) {
			var kind resultKind
			var err error
			res, kind, err = decodeStreamEventResult(x, mem)
			return kind, err
		})
		v.release()
		note(step)
		if step.Outcome != outOK.String() {
			if step.Outcome != outDefer.String() {
				r.fallback(hStreamEvent, outcomeFrom(step.Outcome).fallbackReason())
			}
			continue
		}
		changed := false
		switch res.Verdict {
		case hostabi.StreamDrop:
			if in.HasDelta {
				decided(v, true)
				return hostabi.StreamEventOutput{Verdict: hostabi.StreamDrop}
			}
		case hostabi.StreamReplace:
			if res.HasDelta && in.HasDelta && res.Delta != in.Delta {
				in.Delta, out.Delta, out.HasDelta, out.Verdict = res.Delta, res.Delta, true, hostabi.StreamReplace
				changed = true
			}
			if res.HasText && in.HasText && res.Text != in.Text {
				in.Text, out.Text, out.HasText, out.Verdict = res.Text, res.Text, true, hostabi.StreamReplace
				changed = true
			}
		}
		decided(v, changed)
	}
	if tr != nil && tr.Outcome == "default" && failed.Policy != "" {
		tr.Policy, tr.Outcome = failed.Policy, failed.Outcome
	}
	return out
}

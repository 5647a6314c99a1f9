//go:build !wasip1

package sdk

import (
	"errors"
	"sync"
	"time"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/jsonx"
)

// nativePlatform serves Log, Config and Now outside Wasm: from the Harness
// running a call, else Log is dropped, Config is "" and Now is time.Now.
type nativePlatform struct {
	mu  sync.Mutex
	cur *Harness
}

var native = &nativePlatform{}

var platform platformAPI = native

func (p *nativePlatform) harness() *Harness {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

func (p *nativePlatform) log(level Level, msg string) {
	if h := p.harness(); h != nil {
		h.Logs = append(h.Logs, LogEntry{Level: level, Message: msg})
	}
}

func (p *nativePlatform) config() string {
	if h := p.harness(); h != nil {
		return h.Config
	}
	return ""
}

func (p *nativePlatform) nowMillis() int64 {
	if h := p.harness(); h != nil && h.Now != nil {
		return h.Now().UnixMilli()
	}
	return time.Now().UnixMilli()
}

// LogEntry is one message a policy logged under a Harness.
type LogEntry struct {
	Level   Level
	Message string
}

// Harness runs a policy's handlers natively with the host's semantics: the
// inputs and outputs go through the ABI encodings, and a rewrite edits an
// in-memory document with the host's path engine (jsonx.Document). Use it
// from `go test` in the policy's package:
//
//	h := &sdk.Harness{Config: `{"model_aliases":{"fast":"gpt-5-mini"}}`}
//	res, err := h.Rewrite(hostabi.RewriteInput{Body: []byte(`{"model":"fast"}`)})
//
// Calls on Harnesses are serialized (the package-level Log and Config are
// routed to the Harness running a call).
type Harness struct {
	// Policy to run; the zero value runs the handlers registered with Register.
	Policy Policy
	// Config is what Config() returns during calls.
	Config string
	// Now, when set, is the host clock.
	Now func() time.Time
	// Logs collects what the policy logged.
	Logs []LogEntry
}

var harnessMu sync.Mutex

func (h *Harness) enter() Policy {
	harnessMu.Lock()
	native.mu.Lock()
	native.cur = h
	native.mu.Unlock()
	p := h.Policy
	if p.hooks() == 0 {
		p = registered
	}
	return p
}

func (h *Harness) leave() {
	native.mu.Lock()
	native.cur = nil
	native.mu.Unlock()
	harnessMu.Unlock()
}

// ErrHookError is returned by Harness when the handler failed (the host would
// use its built-in default).
var ErrHookError = errors.New("sdk: the handler returned an error (the host would use its built-in default)")

// hookAnswer reads a verdict-or-output hook result as the host would: a
// defer, the handler's error, a bare verdict (checked), or an output to decode.
func hookAnswer[T any](r hookResult, valid func(uint32) bool, verdict func(uint32) T, decode func([]byte) (T, error)) (out T, deferred bool, err error) {
	switch r.kind {
	case hostabi.ResultKindDefer:
		return out, true, nil
	case hostabi.ResultKindError:
		return out, false, ErrHookError
	case hostabi.ResultKindVerdict:
		if !valid(r.verdict) {
			return out, false, hostabi.ErrBadVerdict
		}
		return verdict(r.verdict), false, nil
	}
	out, err = decode(r.out)
	return out, false, err
}

// Recover runs the recover handler. deferred is true when the policy has no
// recover handler or returned ErrDefer.
func (h *Harness) Recover(in RecoverInput) (out RecoverOutput, deferred bool, err error) {
	p := h.enter()
	defer h.leave()
	r := dispatchRecover(p, hostabi.AppendRecoverInput(nil, in), nil)
	return hookAnswer(r, hostabi.ValidRecoverVerdict,
		func(v uint32) RecoverOutput { return RecoverOutput{Verdict: RecoverVerdict(v)} }, hostabi.DecodeRecoverOutput)
}

// Replay runs the replay handler (see Recover).
func (h *Harness) Replay(in ReplayInput) (out ReplayOutput, deferred bool, err error) {
	p := h.enter()
	defer h.leave()
	r := dispatchReplay(p, hostabi.AppendReplayInput(nil, in), nil)
	return hookAnswer(r, hostabi.ValidReplayVerdict,
		func(v uint32) ReplayOutput { return ReplayOutput{Verdict: ReplayVerdict(v)} }, hostabi.DecodeReplayOutput)
}

// Rewrite runs the rewrite handler on in, as the host would for one policy:
// the result's Body is nil when the body did not change. On a handler error
// the edits are dropped and ErrHookError is returned.
func (h *Harness) Rewrite(in hostabi.RewriteInput) (hostabi.RewriteOutput, error) {
	p := h.enter()
	defer h.leave()
	var out hostabi.RewriteOutput
	if in.Surface == "" {
		in.Surface = hostabi.SurfaceResponsesStream
	}
	if in.Endpoint == "" {
		in.Endpoint = "/v1/responses"
	}
	doc := jsonx.NewDocument(in.Body)
	c := hostabi.RewriteContext{Surface: in.Surface, Endpoint: in.Endpoint, BodyBytes: len(in.Body)}
	if raw, err := doc.Get("model"); err == nil {
		c.Model, _ = jsonx.Unquote(raw)
	}
	if raw, err := doc.Get("stream"); err == nil && string(raw) == "true" {
		c.Stream = true
	}
	for k, v := range in.Headers {
		if c.Headers == nil {
			c.Headers = map[string]string{}
		}
		if lk := lower(k); !hostabi.HiddenHeader(lk) {
			c.Headers[lk] = v
		}
	}
	b := &memBackend{doc: doc}
	switch dispatchRewrite(p, hostabi.AppendRewriteContext(nil, c), b) {
	case hostabi.ResultError:
		return out, ErrHookError
	}
	for _, e := range b.headers {
		if e.remove {
			delete(out.SetHeaders, e.name)
			out.RemoveHeaders = append(out.RemoveHeaders, e.name)
			continue
		}
		if out.SetHeaders == nil {
			out.SetHeaders = map[string]string{}
		}
		out.SetHeaders[e.name] = e.value
	}
	out.Upstream, out.Reject = b.upstream, b.rejected
	if doc.Changed() {
		out.Body = append([]byte(nil), doc.Bytes()...)
	}
	return out, nil
}

// StreamEvent runs the stream_event handler on one event (see Recover).
// A zero OutputIndex/ContentIndex in ev is sent as 0; set -1 for absent.
func (h *Harness) StreamEvent(ev StreamEvent) (out StreamVerdict, deferred bool, err error) {
	p := h.enter()
	defer h.leave()
	r := dispatchStreamEvent(p, hostabi.AppendStreamEventInput(nil, ev), nil)
	return hookAnswer(r, hostabi.ValidStreamVerdict,
		func(v uint32) StreamVerdict { return StreamVerdict{Verdict: hostabi.StreamVerdict(v)} }, hostabi.DecodeStreamEventOutput)
}

// SelfTest runs the self-test handler.
func (h *Harness) SelfTest() error {
	p := h.enter()
	defer h.leave()
	if p.SelfTest == nil {
		return nil
	}
	return p.SelfTest()
}

func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// memBackend is a Request over an in-memory document, with the host's checks.
type memBackend struct {
	doc      *jsonx.Document
	headers  []headerEdit
	upstream string
	rejected *RejectError
}

type headerEdit struct {
	name, value string
	remove      bool
}

func (b *memBackend) get(path string) (string, int32) {
	v, err := b.doc.Get(path)
	if err != nil {
		return "", hostabi.CodeOf(err)
	}
	return string(v), int32(len(v))
}

func (b *memBackend) set(path, raw string) int32 {
	return hostabi.CodeOf(b.doc.Set(path, []byte(raw)))
}

func (b *memBackend) del(path string) int32 { return hostabi.CodeOf(b.doc.Delete(path)) }

func (b *memBackend) setHeader(name, value string) int32 {
	n, code := hostabi.CheckHeaderEdit(name, value, false)
	if code == hostabi.CodeOK {
		b.headers = append(b.headers, headerEdit{name: n, value: value})
	}
	return code
}

func (b *memBackend) removeHeader(name string) int32 {
	n, code := hostabi.CheckHeaderEdit(name, "", true)
	if code == hostabi.CodeOK {
		b.headers = append(b.headers, headerEdit{name: n, remove: true})
	}
	return code
}

func (b *memBackend) useUpstream(name string) int32 {
	code := hostabi.CheckUpstreamName(name)
	if code == hostabi.CodeOK {
		b.upstream = name
	}
	return code
}

func (b *memBackend) reject(raw []byte) int32 {
	e, err := hostabi.DecodeRejectError(raw)
	if err != nil {
		return hostabi.CodeBadValue
	}
	b.rejected = &e
	return hostabi.CodeOK
}

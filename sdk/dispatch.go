//lint:file-ignore U1000 used by the //go:wasmexport functions (wasip1) and the Harness (native)

package sdk

import (
	"errors"

	"github.com/sluice-gw/sluice/hostabi"
)

// hookResult is a handler's answer before the platform encodes it.
type hookResult struct {
	kind    hostabi.ResultKind
	verdict uint32
	out     []byte // for ResultKindOutput
}

var (
	deferResult = hookResult{kind: hostabi.ResultKindDefer}
	errorResult = hookResult{kind: hostabi.ResultKindError}
)

func failed(hook string, err error) hookResult {
	Log(LevelError, hook+": "+err.Error())
	return errorResult
}

func dispatchRecover(p Policy, input, outbuf []byte) hookResult {
	if p.Recover == nil {
		return deferResult
	}
	in, err := hostabi.DecodeRecoverInput(input)
	if err != nil {
		return failed("recover input", err)
	}
	out, err := p.Recover(in)
	if errors.Is(err, ErrDefer) {
		return deferResult
	}
	if err != nil {
		return failed("recover", err)
	}
	if out.Code == "" && out.Message == "" {
		return hookResult{kind: hostabi.ResultKindVerdict, verdict: uint32(out.Verdict)}
	}
	return hookResult{kind: hostabi.ResultKindOutput, out: hostabi.AppendRecoverOutput(outbuf[:0], out)}
}

func dispatchReplay(p Policy, input, outbuf []byte) hookResult {
	if p.Replay == nil {
		return deferResult
	}
	in, err := hostabi.DecodeReplayInput(input)
	if err != nil {
		return failed("replay input", err)
	}
	out, err := p.Replay(in)
	if errors.Is(err, ErrDefer) {
		return deferResult
	}
	if err != nil {
		return failed("replay", err)
	}
	if out.PenaltyMillis == 0 {
		return hookResult{kind: hostabi.ResultKindVerdict, verdict: uint32(out.Verdict)}
	}
	return hookResult{kind: hostabi.ResultKindOutput, out: hostabi.AppendReplayOutput(outbuf[:0], out)}
}

// dispatchRewrite runs the rewrite handler; the result is 0, ResultDefer or
// ResultError as ABI.md §4 defines for rewrite_request.
func dispatchRewrite(p Policy, input []byte, b backend) uint64 {
	if p.Rewrite == nil {
		return hostabi.ResultDefer
	}
	c, headers, err := hostabi.DecodeRewriteContextLazy(input)
	if err != nil {
		failed("rewrite input", err)
		return hostabi.ResultError
	}
	err = p.Rewrite(&Request{ctx: c, rawHeaders: headers, b: b})
	switch {
	case err == nil:
		return 0
	case errors.Is(err, ErrDefer):
		return hostabi.ResultDefer
	}
	failed("rewrite", err)
	return hostabi.ResultError
}

// dispatchStreamEvent runs the stream_event handler: a bare pass or drop,
// or a replace as an output object.
func dispatchStreamEvent(p Policy, input, outbuf []byte) hookResult {
	if p.StreamEvent == nil {
		return deferResult
	}
	in, err := hostabi.DecodeStreamEventInput(input)
	if err != nil {
		return failed("stream_event input", err)
	}
	out, err := p.StreamEvent(in)
	if errors.Is(err, ErrDefer) {
		return deferResult
	}
	if err != nil {
		return failed("stream_event", err)
	}
	if out.Verdict != hostabi.StreamReplace {
		return hookResult{kind: hostabi.ResultKindVerdict, verdict: uint32(out.Verdict)}
	}
	return hookResult{kind: hostabi.ResultKindOutput, out: hostabi.AppendStreamEventOutput(outbuf[:0], out)}
}

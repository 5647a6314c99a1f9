package plugins

import (
	"errors"
	"fmt"

	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/internal/jsonx"
)

// memView is the part of api.Memory the decoders need; tests and fuzzers use
// a byte slice.
type memView interface {
	Read(offset, byteCount uint32) ([]byte, bool)
}

// byteMem is a memView over a byte slice.
type byteMem []byte

func (m byteMem) Read(off, n uint32) ([]byte, bool) {
	end := uint64(off) + uint64(n)
	if end > uint64(len(m)) {
		return nil, false
	}
	return m[off:end], true
}

// resultKind is how a hook answered.
type resultKind uint8

const (
	resDecided resultKind = iota // a verdict (or rewrite done)
	resDefer                     // no opinion
	resError                     // the guest's deliberate error result
)

// errInvalidOutput wraps every malformed hook result: a fault.
var errInvalidOutput = errors.New("invalid hook output")

// readOutput returns the output bytes a result points at.
func readOutput(mem memView, ptr, n uint32) ([]byte, error) {
	if n > hostabi.MaxOutputBytes {
		return nil, fmt.Errorf("%w: %d bytes exceed the %d byte limit", errInvalidOutput, n, hostabi.MaxOutputBytes)
	}
	b, ok := mem.Read(ptr, n)
	if !ok {
		return nil, fmt.Errorf("%w: output [%d,+%d) outside guest memory", errInvalidOutput, ptr, n)
	}
	// The decoders read the members they know and skip the others' values
	// without checking them; ABI.md §4 decodes output strictly, so the whole
	// output is checked first (a raw control character in an unknown key, a
	// number written 00, are faults).
	if valid, _ := jsonx.ScanTop(b, 0, func([]byte, int, int) {}); !valid {
		return nil, fmt.Errorf("%w: output is malformed JSON", errInvalidOutput)
	}
	return b, nil
}

// outputError is the fault for a hook output b that its decoder refused
// with err. Well-formed JSON that is not an object (`[1]`, `null`) fails
// the decoders' object scan as a syntax error; the author is told what
// ABI.md §4 asks for instead.
func outputError(b []byte, err error) error {
	if valid, object := jsonx.ScanTop(b, 0, func([]byte, int, int) {}); valid && !object {
		return fmt.Errorf("%w: output must be a JSON object, got %s", errInvalidOutput, jsonx.Kind(b))
	}
	return fmt.Errorf("%w: %v", errInvalidOutput, err)
}

// decodeRecoverResult decodes a recover hook's i64 result from a module of
// ABI version abi (versions before 3 define fewer verdicts).
func decodeRecoverResult(r uint64, mem memView, abi int32) (hostabi.RecoverOutput, resultKind, error) {
	kind, ptr, n := hostabi.UnpackResult(r)
	switch kind {
	case hostabi.ResultKindDefer:
		return hostabi.RecoverOutput{}, resDefer, nil
	case hostabi.ResultKindError:
		return hostabi.RecoverOutput{}, resError, nil
	case hostabi.ResultKindVerdict:
		if !hostabi.ValidRecoverVerdictVersion(n, abi) {
			return hostabi.RecoverOutput{}, resDecided, fmt.Errorf("%w: recover verdict %d", errInvalidOutput, n)
		}
		return hostabi.RecoverOutput{Verdict: hostabi.RecoverVerdict(n)}, resDecided, nil
	}
	b, err := readOutput(mem, ptr, n)
	if err != nil {
		return hostabi.RecoverOutput{}, resDecided, err
	}
	out, err := hostabi.DecodeRecoverOutputVersion(b, abi)
	if err != nil {
		return hostabi.RecoverOutput{}, resDecided, outputError(b, err)
	}
	return out, resDecided, nil
}

// decodeReplayResult decodes a replay hook's i64 result from a module of
// ABI version abi (version 1 defines fewer verdicts).
func decodeReplayResult(r uint64, mem memView, abi int32) (hostabi.ReplayOutput, resultKind, error) {
	kind, ptr, n := hostabi.UnpackResult(r)
	switch kind {
	case hostabi.ResultKindDefer:
		return hostabi.ReplayOutput{}, resDefer, nil
	case hostabi.ResultKindError:
		return hostabi.ReplayOutput{}, resError, nil
	case hostabi.ResultKindVerdict:
		if !hostabi.ValidReplayVerdictVersion(n, abi) {
			return hostabi.ReplayOutput{}, resDecided, fmt.Errorf("%w: replay verdict %d (ABI version %d)", errInvalidOutput, n, abi)
		}
		return hostabi.ReplayOutput{Verdict: hostabi.ReplayVerdict(n)}, resDecided, nil
	}
	b, err := readOutput(mem, ptr, n)
	if err != nil {
		return hostabi.ReplayOutput{}, resDecided, err
	}
	out, err := hostabi.DecodeReplayOutputVersion(b, abi)
	if err != nil {
		return hostabi.ReplayOutput{}, resDecided, outputError(b, err)
	}
	return out, resDecided, nil
}

// decodeRewriteResult decodes a rewrite hook's i64 result.
func decodeRewriteResult(r uint64) (resultKind, error) {
	switch r {
	case 0:
		return resDecided, nil
	case hostabi.ResultDefer:
		return resDefer, nil
	case hostabi.ResultError:
		return resError, nil
	}
	return resDecided, fmt.Errorf("%w: rewrite result %#x", errInvalidOutput, r)
}

// decodeStreamEventResult decodes a stream_event hook's i64 result: a bare
// pass (0) or drop (1), or an output object (a replace).
func decodeStreamEventResult(r uint64, mem memView) (hostabi.StreamEventOutput, resultKind, error) {
	kind, ptr, n := hostabi.UnpackResult(r)
	switch kind {
	case hostabi.ResultKindDefer:
		return hostabi.StreamEventOutput{}, resDefer, nil
	case hostabi.ResultKindError:
		return hostabi.StreamEventOutput{}, resError, nil
	case hostabi.ResultKindVerdict:
		if !hostabi.ValidStreamVerdict(n) {
			return hostabi.StreamEventOutput{}, resDecided, fmt.Errorf("%w: stream_event verdict %d", errInvalidOutput, n)
		}
		return hostabi.StreamEventOutput{Verdict: hostabi.StreamVerdict(n)}, resDecided, nil
	}
	b, err := readOutput(mem, ptr, n)
	if err != nil {
		return hostabi.StreamEventOutput{}, resDecided, err
	}
	out, err := hostabi.DecodeStreamEventOutput(b)
	if err != nil {
		return hostabi.StreamEventOutput{}, resDecided, outputError(b, err)
	}
	return out, resDecided, nil
}

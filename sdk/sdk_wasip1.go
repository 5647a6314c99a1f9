//go:build wasip1

//lint:file-ignore U1000 the exports are roots through //go:wasmexport, which staticcheck does not see

package sdk

import (
	"runtime"
	"unsafe"

	"github.com/sluice-gw/sluice/hostabi"
)

// The host functions (ABI.md §5).

//go:wasmimport sluice log
func hostLog(level uint32, ptr unsafe.Pointer, n uint32)

//go:wasmimport sluice config
func hostConfig(buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport sluice now_ms
func hostNowMillis() int64

//go:wasmimport sluice doc_get
func hostDocGet(path unsafe.Pointer, pathLen uint32, buf unsafe.Pointer, capacity uint32) int32

//go:wasmimport sluice doc_set
func hostDocSet(path unsafe.Pointer, pathLen uint32, val unsafe.Pointer, valLen uint32) int32

//go:wasmimport sluice doc_delete
func hostDocDelete(path unsafe.Pointer, pathLen uint32) int32

//go:wasmimport sluice header_set
func hostHeaderSet(name unsafe.Pointer, nameLen uint32, val unsafe.Pointer, valLen uint32) int32

//go:wasmimport sluice header_remove
func hostHeaderRemove(name unsafe.Pointer, nameLen uint32) int32

//go:wasmimport sluice use_upstream
func hostUseUpstream(name unsafe.Pointer, nameLen uint32) int32

//go:wasmimport sluice reject
func hostReject(ptr unsafe.Pointer, n uint32) int32

// Buffers reused across calls (their content never is).
var (
	inbox   []byte // hook inputs (sluice_alloc)
	outbox  []byte // hook outputs
	scratch = make([]byte, 4096)
)

func strPtr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }
func bytesPtr(b []byte) unsafe.Pointer {
	if cap(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b[:cap(b)]))
}
func addr(b []byte) uint32 { return uint32(uintptr(bytesPtr(b))) }

// readHost calls a host function that follows the "length, write if it
// fits" rule, growing scratch once when needed.
func readHost(call func(buf unsafe.Pointer, capacity uint32) int32) (string, int32) {
	n := call(bytesPtr(scratch), uint32(len(scratch)))
	if n < 0 {
		return "", n
	}
	if int(n) > len(scratch) {
		scratch = make([]byte, int(n)+int(n)/4)
		n = call(bytesPtr(scratch), uint32(len(scratch)))
		if n < 0 || int(n) > len(scratch) {
			return "", hostabi.CodeTooLarge
		}
	}
	return string(scratch[:n]), n
}

type wasmPlatform struct{}

var platform platformAPI = wasmPlatform{}

func (wasmPlatform) log(level Level, msg string) {
	hostLog(uint32(level), strPtr(msg), uint32(len(msg)))
	runtime.KeepAlive(msg)
}

func (wasmPlatform) config() string {
	s, n := readHost(func(buf unsafe.Pointer, capacity uint32) int32 { return hostConfig(buf, capacity) })
	if n <= 0 {
		return ""
	}
	return s
}

func (wasmPlatform) nowMillis() int64 { return hostNowMillis() }

// hostBackend is a Request backed by the host functions.
type hostBackend struct{}

func (hostBackend) get(path string) (string, int32) {
	s, n := readHost(func(buf unsafe.Pointer, capacity uint32) int32 {
		return hostDocGet(strPtr(path), uint32(len(path)), buf, capacity)
	})
	runtime.KeepAlive(path)
	return s, n
}

func (hostBackend) set(path, raw string) int32 {
	n := hostDocSet(strPtr(path), uint32(len(path)), strPtr(raw), uint32(len(raw)))
	runtime.KeepAlive(path)
	runtime.KeepAlive(raw)
	return n
}

func (hostBackend) del(path string) int32 {
	n := hostDocDelete(strPtr(path), uint32(len(path)))
	runtime.KeepAlive(path)
	return n
}

func (hostBackend) setHeader(name, value string) int32 {
	n := hostHeaderSet(strPtr(name), uint32(len(name)), strPtr(value), uint32(len(value)))
	runtime.KeepAlive(name)
	runtime.KeepAlive(value)
	return n
}

func (hostBackend) removeHeader(name string) int32 {
	n := hostHeaderRemove(strPtr(name), uint32(len(name)))
	runtime.KeepAlive(name)
	return n
}

func (hostBackend) useUpstream(name string) int32 {
	n := hostUseUpstream(strPtr(name), uint32(len(name)))
	runtime.KeepAlive(name)
	return n
}

func (hostBackend) reject(raw []byte) int32 {
	n := hostReject(bytesPtr(raw), uint32(len(raw)))
	runtime.KeepAlive(raw)
	return n
}

// The exports (ABI.md §2).

//go:wasmexport sluice_abi_version
func exportABIVersion() int32 { return hostabi.ABIVersion }

//go:wasmexport sluice_alloc
func exportAlloc(size int32) uint32 {
	if size <= 0 {
		size = 1
	}
	if cap(inbox) < int(size) {
		inbox = make([]byte, size)
	}
	inbox = inbox[:size]
	return addr(inbox)
}

//go:wasmexport sluice_hooks
func exportHooks() int32 { return int32(registered.hooks()) }

func input(p unsafe.Pointer, n int32) []byte {
	if n <= 0 || p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

func encode(r hookResult) uint64 {
	switch r.kind {
	case hostabi.ResultKindDefer:
		return hostabi.ResultDefer
	case hostabi.ResultKindError:
		return hostabi.ResultError
	case hostabi.ResultKindVerdict:
		return uint64(r.verdict)
	}
	outbox = r.out
	return hostabi.PackPtrLen(addr(outbox), uint32(len(outbox)))
}

//go:wasmexport sluice_recover
func exportRecover(p unsafe.Pointer, n int32) uint64 {
	return encode(dispatchRecover(registered, input(p, n), outbox))
}

//go:wasmexport sluice_replay
func exportReplay(p unsafe.Pointer, n int32) uint64 {
	return encode(dispatchReplay(registered, input(p, n), outbox))
}

//go:wasmexport sluice_rewrite_request
func exportRewrite(p unsafe.Pointer, n int32) uint64 {
	return dispatchRewrite(registered, input(p, n), hostBackend{})
}

//go:wasmexport sluice_stream_event
func exportStreamEvent(p unsafe.Pointer, n int32) uint64 {
	return encode(dispatchStreamEvent(registered, input(p, n), outbox))
}

//go:wasmexport sluice_self_test
func exportSelfTest() int32 { return dispatchSelfTest(registered) }

func dispatchSelfTest(p Policy) int32 {
	if p.SelfTest == nil {
		return 0
	}
	if err := p.SelfTest(); err != nil {
		Log(LevelError, "self_test: "+err.Error())
		return 1
	}
	return 0
}

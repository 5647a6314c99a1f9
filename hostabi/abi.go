package hostabi

import (
	"errors"

	"github.com/sluice-gw/sluice/internal/jsonx"
)

// ABIVersion is the version of the host ABI this package describes, and the
// version the Go SDK's modules declare. A module declares the version it was
// written for through its ExportABIVersion export; the host loads modules
// declaring any version from MinABIVersion to ABIVersion and speaks to each
// in its own version (ABI.md §12): a version-1 module gets exactly the
// version-1 inputs and may answer only version-1 verdicts; a module older
// than version 3 is never asked about an owner_unavailable conversation.
const ABIVersion = 3

// MinABIVersion is the oldest ABI version the host still loads.
const MinABIVersion = 1

// SupportedABI reports whether the host loads modules declaring version v.
func SupportedABI(v int32) bool { return v >= MinABIVersion && v <= ABIVersion }

// Names a module exports (ABI.md §2).
const (
	// ExportMemory is the guest's linear memory; required.
	ExportMemory = "memory"
	// ExportInitialize is the reactor initializer, called once per instance
	// before anything else when it is exported.
	ExportInitialize = "_initialize"
	// ExportABIVersion is the version marker: () -> i32, a version from
	// MinABIVersion to ABIVersion.
	ExportABIVersion = "sluice_abi_version"
	// ExportAlloc reserves guest memory for a hook input: (size i32) -> ptr i32.
	ExportAlloc = "sluice_alloc"
	// ExportHooks optionally narrows the hooks a module implements:
	// () -> i32, a bit set of Hook values.
	ExportHooks = "sluice_hooks"
	// ExportRecover is the recover hook: (ptr i32, len i32) -> i64.
	ExportRecover = "sluice_recover"
	// ExportReplay is the replay hook: (ptr i32, len i32) -> i64.
	ExportReplay = "sluice_replay"
	// ExportRewrite is the rewrite_request hook: (ptr i32, len i32) -> i64.
	ExportRewrite = "sluice_rewrite_request"
	// ExportSelfTest is the self-test hook: () -> i32, 0 means passed.
	ExportSelfTest = "sluice_self_test"
	// ExportStreamEvent is the optional per-event stream hook:
	// (ptr i32, len i32) -> i64 (ABI.md §3.5).
	ExportStreamEvent = "sluice_stream_event"
)

// ImportModule is the module name of the host functions (ABI.md §5).
const ImportModule = "sluice"

// Names of the host functions in ImportModule.
const (
	ImportLog          = "log"           // (level i32, ptr i32, len i32) -> ()
	ImportConfig       = "config"        // (buf i32, cap i32) -> i32
	ImportNowMillis    = "now_ms"        // () -> i64
	ImportDocGet       = "doc_get"       // (path_ptr i32, path_len i32, buf i32, cap i32) -> i32
	ImportDocSet       = "doc_set"       // (path_ptr i32, path_len i32, val_ptr i32, val_len i32) -> i32
	ImportDocDelete    = "doc_delete"    // (path_ptr i32, path_len i32) -> i32
	ImportHeaderSet    = "header_set"    // (name_ptr i32, name_len i32, val_ptr i32, val_len i32) -> i32
	ImportHeaderRemove = "header_remove" // (name_ptr i32, name_len i32) -> i32
	ImportUseUpstream  = "use_upstream"  // (ptr i32, len i32) -> i32
	ImportReject       = "reject"        // (ptr i32, len i32) -> i32
)

// Hook is one hook, as a bit in the set returned by ExportHooks.
type Hook uint32

// Hooks. The numeric values are part of the ABI.
const (
	HookRecover  Hook = 1 << 0
	HookReplay   Hook = 1 << 1
	HookRewrite  Hook = 1 << 2
	HookSelfTest Hook = 1 << 3
	// HookStreamEvent is the optional per-event stream hook (version 2,
	// additive: ABI.md §3.5).
	HookStreamEvent Hook = 1 << 4
)

// AllHooks is every hook the ABI defines.
const AllHooks = HookRecover | HookReplay | HookRewrite | HookSelfTest | HookStreamEvent

// CallHooks are the hooks the host calls while serving (every hook but
// self_test); a module must export at least one of them.
const CallHooks = HookRecover | HookReplay | HookRewrite | HookStreamEvent

// String names the hook as ABI.md and the host's metrics do.
func (h Hook) String() string {
	switch h {
	case HookRecover:
		return "recover"
	case HookReplay:
		return "replay"
	case HookRewrite:
		return "rewrite_request"
	case HookSelfTest:
		return "self_test"
	case HookStreamEvent:
		return "stream_event"
	}
	return "unknown"
}

// Names lists the hooks in h, in ABI order.
func (h Hook) Names() []string {
	var out []string
	for _, one := range []Hook{HookRecover, HookReplay, HookRewrite, HookSelfTest, HookStreamEvent} {
		if h&one != 0 {
			out = append(out, one.String())
		}
	}
	return out
}

// Export is the name of the hook's export.
func (h Hook) Export() string {
	switch h {
	case HookRecover:
		return ExportRecover
	case HookReplay:
		return ExportReplay
	case HookRewrite:
		return ExportRewrite
	case HookSelfTest:
		return ExportSelfTest
	case HookStreamEvent:
		return ExportStreamEvent
	}
	return ""
}

// Special i64 hook results (ABI.md §4). Every other value is either a bare
// verdict (high 32 bits zero) or an output location PackPtrLen(ptr, len).
const (
	// ResultDefer means "no opinion": the host asks the next module that
	// exports the hook and finally uses the built-in default.
	ResultDefer uint64 = 0xFFFF_FFFF_FFFF_FFFF
	// ResultError means the guest failed on purpose (it should have logged
	// why): the host uses the built-in default and counts an error.
	ResultError uint64 = 0xFFFF_FFFF_FFFF_FFFE
)

// ResultKind classifies a hook's i64 result.
type ResultKind uint8

// Result kinds.
const (
	ResultKindVerdict ResultKind = iota // high 32 bits are zero: the low 32 bits are a verdict
	ResultKindOutput                    // ptr<<32 | len of an output in guest memory
	ResultKindDefer                     // ResultDefer
	ResultKindError                     // ResultError
)

// PackPtrLen encodes an output location as a hook result. ptr must not be 0.
func PackPtrLen(ptr, n uint32) uint64 { return uint64(ptr)<<32 | uint64(n) }

// UnpackResult splits a hook result. For ResultKindVerdict, n is the verdict;
// for ResultKindOutput, ptr and n locate the output in guest memory.
func UnpackResult(r uint64) (kind ResultKind, ptr, n uint32) {
	switch r {
	case ResultDefer:
		return ResultKindDefer, 0, 0
	case ResultError:
		return ResultKindError, 0, 0
	}
	ptr, n = uint32(r>>32), uint32(r)
	if ptr == 0 {
		return ResultKindVerdict, 0, n
	}
	return ResultKindOutput, ptr, n
}

// Codes returned (as i32) by the host functions. Non-negative values
// mean success; for the reading functions they are the value's length.
const (
	CodeOK              int32 = 0
	CodeNotFound        int32 = -1 // the path or the named thing does not exist
	CodeBadPath         int32 = -2 // the path does not parse (ABI.md §6)
	CodeBadValue        int32 = -3 // a value is not valid JSON, or a header name/value or upstream name is invalid
	CodeUnavailable     int32 = -4 // the function is not available in this hook
	CodeBadPointer      int32 = -5 // a (ptr, len) pair is outside guest memory
	CodeTooLarge        int32 = -6 // an argument or the result exceeds a host limit
	CodeNotApplicable   int32 = -7 // the path exists but the operation cannot apply (e.g. a key into an array)
	CodeInvalidDocument int32 = -8 // the document is not valid JSON where the path leads
)

// CodeOf maps an error of the document engine (jsonx.Document, jsonx.Lookup,
// jsonx.ParsePath) to its host-function code (ABI.md §5).
func CodeOf(err error) int32 {
	switch {
	case err == nil:
		return CodeOK
	case errors.Is(err, jsonx.ErrPathNotFound):
		return CodeNotFound
	case errors.Is(err, jsonx.ErrPathSyntax):
		return CodeBadPath
	case errors.Is(err, jsonx.ErrValue):
		return CodeBadValue
	case errors.Is(err, jsonx.ErrNotApplicable):
		return CodeNotApplicable
	}
	return CodeInvalidDocument
}

// CodeText names a host-function status code.
func CodeText(code int32) string {
	switch {
	case code >= 0:
		return "ok"
	case code == CodeNotFound:
		return "not_found"
	case code == CodeBadPath:
		return "bad_path"
	case code == CodeBadValue:
		return "bad_value"
	case code == CodeUnavailable:
		return "unavailable"
	case code == CodeBadPointer:
		return "bad_pointer"
	case code == CodeTooLarge:
		return "too_large"
	case code == CodeNotApplicable:
		return "not_applicable"
	case code == CodeInvalidDocument:
		return "invalid_document"
	}
	return "unknown"
}

// Log levels accepted by the log host function.
const (
	LevelTrace uint32 = 0
	LevelDebug uint32 = 1
	LevelInfo  uint32 = 2
	LevelWarn  uint32 = 3
	LevelError uint32 = 4
)

// Limits the host enforces (ABI.md §8).
const (
	MaxOutputBytes   = 64 << 10           // a hook's output JSON
	MaxLogBytes      = 4 << 10            // one log message; longer ones are truncated
	MaxHeaderBytes   = 8 << 10            // one header value
	MaxUpstreamBytes = 256                // an upstream name
	MaxPathBytes     = jsonx.MaxPathBytes // a document path (4 KiB)
)

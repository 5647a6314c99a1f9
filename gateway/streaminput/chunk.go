package streaminput

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/store"
)

// Modalities a chunk may carry.
const (
	ModalityText  = "text"
	ModalityAudio = "audio"
	ModalityImage = "image"
)

// Error codes this package emits besides apierr's.
const (
	// CodeSequenceConflict (409): a sequence id came again with another
	// payload, or an end_of_input below a sequence id already received.
	CodeSequenceConflict = "sequence_conflict"
	// CodeOutOfWindow (409): a sequence id beyond the reorder window.
	CodeOutOfWindow = "sequence_out_of_window"
	// CodeSessionFinished (409): a chunk after the end of the input.
	CodeSessionFinished = "session_finished"
	// CodeSequenceGap (409): the input cannot end while sequence ids are missing.
	CodeSequenceGap = "sequence_gap"
	// CodeTooManySessions (429): the client key's concurrent-session cap.
	CodeTooManySessions = "too_many_sessions"
	// CodeSessionExpired (408): the idle timeout closed the session.
	CodeSessionExpired = "session_expired"
	// CodeSessionCancelled: the session was deleted (the terminal event of
	// an answer it cut).
	CodeSessionCancelled = "session_cancelled"
	// CodeResultGone (410): the answer can no longer be replayed.
	CodeResultGone = "result_unavailable"
	// CodeNestingTooDeep (400): a JSON document nests deeper than
	// Options.MaxJSONDepth.
	CodeNestingTooDeep = apierr.CodeNestingTooDeep
	// CodeDuplicateKey (400): an object repeats a key.
	CodeDuplicateKey = apierr.CodeDuplicateKey
	// CodeRequestTimeout (408): a request body (or a Mode A header line)
	// did not arrive within Options.ReadTimeout.
	CodeRequestTimeout = apierr.CodeRequestTimeout
	// CodeServerOverloaded (503, with Retry-After): a gateway-wide cap
	// (Options.MaxSessions, Options.MaxTotalBytes) is reached.
	CodeServerOverloaded = apierr.CodeServerOverloaded
	// CodeUnsupportedEncoding (415): a Mode A body's Content-Encoding is
	// not identity, gzip or zstd.
	CodeUnsupportedEncoding = apierr.CodeUnsupportedEncoding
)

// chunkMeta is what a chunk says besides its payload.
type chunkMeta struct {
	modality string
	format   string // audio container ("wav", "mp3", …) or image type ("png", "jpeg", …)
	end      bool   // end_of_input
	newPart  bool   // start a new content part instead of extending the previous one
}

// chunk is one decoded piece of input.
type chunk struct {
	seq     uint64
	meta    chunkMeta
	payload []byte
}

// digest identifies a chunk's content for duplicate detection.
type digest [16]byte

func (c *chunk) digest() digest {
	h := sha256.New()
	h.Write([]byte(c.meta.encode()))
	h.Write([]byte{0})
	h.Write(c.payload)
	var d digest
	copy(d[:], h.Sum(nil))
	return d
}

// encode renders the meta as the store's Modality field:
// "modality[;format=F][;end][;new_part]".
func (m chunkMeta) encode() string {
	var b strings.Builder
	b.WriteString(m.modality)
	if m.format != "" {
		b.WriteString(";format=")
		b.WriteString(m.format)
	}
	if m.end {
		b.WriteString(";end")
	}
	if m.newPart {
		b.WriteString(";new_part")
	}
	return b.String()
}

func decodeMeta(s string) (chunkMeta, error) {
	fields := strings.Split(s, ";")
	m := chunkMeta{modality: fields[0]}
	switch m.modality {
	case ModalityText, ModalityAudio, ModalityImage:
	default:
		return chunkMeta{}, fmt.Errorf("unknown stored modality %q", fields[0])
	}
	for _, f := range fields[1:] {
		switch {
		case f == "end":
			m.end = true
		case f == "new_part":
			m.newPart = true
		case strings.HasPrefix(f, "format="):
			m.format = strings.TrimPrefix(f, "format=")
		default:
			return chunkMeta{}, fmt.Errorf("unknown stored chunk attribute %q", f)
		}
	}
	return m, nil
}

// parseChunk decodes a chunk object:
//
//	{"sequence_id":3,"modality":"text","payload":"…","format":"wav","end_of_input":false,"new_part":false}
//
// When auto is non-nil a missing sequence_id takes *auto (Mode A and the
// WebSocket accumulator); otherwise it is required. The object's members
// are read in one pass, which also refuses a repeated key. obj must come
// from a document that passed checkJSON.
func parseChunk(ctx context.Context, obj gjson.Result, auto *uint64) (chunk, *apierr.Error) {
	if !obj.IsObject() {
		return chunk{}, apierr.Invalid("", apierr.CodeInvalidType, "a chunk must be a JSON object")
	}
	var seq, modality, format, payload, end, newPart gjson.Result
	if aerr := forEachMember(ctx, obj, "", func(key string, v gjson.Result) {
		switch key {
		case "sequence_id":
			seq = v
		case "modality":
			modality = v
		case "format":
			format = v
		case "payload":
			payload = v
		case "end_of_input":
			end = v
		case "new_part":
			newPart = v
		}
	}); aerr != nil {
		return chunk{}, aerr
	}
	var c chunk
	switch {
	case !seq.Exists() || seq.Type == gjson.Null:
		if auto == nil {
			return chunk{}, apierr.Invalid("sequence_id", apierr.CodeMissingField, "you must provide a sequence_id")
		}
		c.seq = *auto
	case seq.Type != gjson.Number:
		return chunk{}, apierr.Invalid("sequence_id", apierr.CodeInvalidType, "sequence_id must be a non-negative integer")
	default:
		n, err := strconv.ParseUint(seq.Raw, 10, 53)
		if err != nil {
			return chunk{}, apierr.Invalid("sequence_id", apierr.CodeInvalidType, "sequence_id must be a non-negative integer below 2^53, got %.40s", seq.Raw)
		}
		c.seq = n
	}
	c.meta.modality = ModalityText
	if m := modality; m.Exists() && m.Type != gjson.Null {
		if m.Type != gjson.String {
			return chunk{}, apierr.Invalid("modality", apierr.CodeInvalidType, "modality must be a string")
		}
		c.meta.modality = m.Str
	}
	switch c.meta.modality {
	case ModalityText:
	case ModalityAudio:
		c.meta.format = "wav"
	case ModalityImage:
		c.meta.format = "png"
	default:
		return chunk{}, apierr.Invalid("modality", apierr.CodeInvalidValue, "modality must be %q, %q or %q, got %.40q", ModalityText, ModalityAudio, ModalityImage, c.meta.modality)
	}
	if f := format; f.Exists() && f.Type != gjson.Null {
		if c.meta.modality == ModalityText {
			return chunk{}, apierr.Invalid("format", apierr.CodeInvalidValue, "format applies to audio and image chunks only")
		}
		if f.Type != gjson.String || !validFormat(f.Str) {
			return chunk{}, apierr.Invalid("format", apierr.CodeInvalidValue, "format must be a short lower-case name such as \"wav\", \"mp3\", \"png\" or \"jpeg\"")
		}
		c.meta.format = f.Str
	}
	for _, flag := range []struct {
		name string
		v    gjson.Result
		dst  *bool
	}{{"end_of_input", end, &c.meta.end}, {"new_part", newPart, &c.meta.newPart}} {
		switch v := flag.v; {
		case !v.Exists() || v.Type == gjson.Null:
		case v.Type == gjson.True || v.Type == gjson.False:
			*flag.dst = v.Bool()
		default:
			return chunk{}, apierr.Invalid(flag.name, apierr.CodeInvalidType, "%s must be a boolean", flag.name)
		}
	}
	switch p := payload; {
	case !p.Exists() || p.Type == gjson.Null:
		if !c.meta.end {
			return chunk{}, apierr.Invalid("payload", apierr.CodeMissingField, "you must provide a payload")
		}
	case p.Type != gjson.String:
		return chunk{}, apierr.Invalid("payload", apierr.CodeInvalidType, "payload must be a string (text, or base64 for audio and image)")
	case c.meta.modality == ModalityText:
		c.payload = []byte(p.Str)
	default:
		b, err := decodeBase64(p.Str)
		if err != nil {
			return chunk{}, apierr.Invalid("payload", apierr.CodeInvalidBase64, "the payload of a %s chunk must be base64: %v", c.meta.modality, err)
		}
		c.payload = b
	}
	return c, nil
}

func validFormat(s string) bool {
	if s == "" || len(s) > 16 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '+' && r != '.' {
			return false
		}
	}
	return true
}

func decodeBase64(s string) ([]byte, error) {
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return b, nil
}

// ---- errors ----

func errNotFound() *apierr.Error {
	return &apierr.Error{Status: http.StatusNotFound, Type: apierr.TypeInvalidRequest, Code: apierr.CodeNotFound, Param: "session_id",
		Message: "no such streaming-input session (it may have expired, been deleted or closed)"}
}

func errConflict(code, param, format string, args ...any) *apierr.Error {
	return &apierr.Error{Status: http.StatusConflict, Type: apierr.TypeInvalidRequest, Code: code, Param: param, Message: fmt.Sprintf(format, args...)}
}

func errTooLarge(limit int64) *apierr.Error {
	e := apierr.TooLarge(limit)
	e.Message = fmt.Sprintf("the streaming-input session exceeds its limit of %d payload bytes; the session is closed", limit)
	return e
}

// errStore answers a store failure (err: why; nil when what the store
// holds could not be used); what says what the gateway could not do
// ("store the chunk durably", "read the session's chunks"). It is the 503
// of any request the gateway's store fails (apierr.StoreUnavailable): a
// retry after Retry-After while the store is out for the moment, none for
// a store damaged for good, with this package's code, store_unavailable.
func errStore(what string, err error) *apierr.Error {
	return apierr.StoreUnavailable(apierr.CodeStoreUnavailable, store.ClientRetryAfter(err), "the gateway could not %s", what)
}

func errShutdown() *apierr.Error {
	return apierr.UpstreamUnavailable(http.StatusServiceUnavailable, "the gateway is shutting down; the session resumes after the restart")
}

func errIdle() *apierr.Error {
	return &apierr.Error{Status: http.StatusRequestTimeout, Type: apierr.TypeInvalidRequest, Code: CodeSessionExpired,
		Message: "the streaming-input session received nothing within its idle timeout and was closed"}
}

// overloadRetryAfter is the Retry-After of a server_overloaded answer:
// sessions end and expire continually, so a retry soon may succeed.
const overloadRetryAfter = 5 * time.Second

func errOverloaded(format string, args ...any) *apierr.Error {
	return apierr.Overloaded(overloadRetryAfter, format, args...)
}

func errRequestTimeout(what string, limit time.Duration) *apierr.Error {
	return &apierr.Error{Status: http.StatusRequestTimeout, Type: apierr.TypeInvalidRequest, Code: CodeRequestTimeout,
		Message: fmt.Sprintf("%s did not arrive within %s", what, limit)}
}

// writeError sends e (with its Retry-After, when it has one).
func writeError(w http.ResponseWriter, e *apierr.Error) { e.Write(w) }

func errCancelled() *apierr.Error {
	return &apierr.Error{Status: http.StatusConflict, Type: apierr.TypeInvalidRequest, Code: CodeSessionCancelled,
		Message: "the streaming-input session was cancelled"}
}

package gateway

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/sluice-gw/sluice/gateway/apierr"
	"github.com/sluice-gw/sluice/gateway/upstream"
	"github.com/sluice-gw/sluice/hostabi"
	"github.com/sluice-gw/sluice/store"
	"github.com/tidwall/gjson"
)

// endpoint is a client-facing API the pipeline serves.
type endpoint struct {
	path        string // upstream path suffix after the base URL, e.g. "/responses"
	chat        bool   // Chat Completions framing ([DONE], error chunks)
	streamLabel string // surface label when streaming
	jsonLabel   string // surface label when not streaming
}

var (
	responsesEndpoint = endpoint{path: "/responses", streamLabel: hostabi.SurfaceResponsesStream, jsonLabel: hostabi.SurfaceResponsesJSON}
	chatEndpoint      = endpoint{path: "/chat/completions", chat: true, streamLabel: hostabi.SurfaceChatStream, jsonLabel: hostabi.SurfaceChatJSON}
)

// clientRequest is a validated client request on its way to an upstream.
type clientRequest struct {
	ep                 endpoint
	body               []byte
	model              string
	stream             bool
	previousResponseID string
	header             http.Header // the client's headers
	setHeaders         map[string]string
	removeHeaders      []string
	upstreamName       string // chosen by a rewrite policy
	clientKeyHash      string // sha256 of the client's credential, for scoping
	scope              requestScope
	pinned             *upstream.Upstream // the owner of previous_response_id, when known
	viaWebSocket       bool               // a response.create on a client WebSocket
	storeFalse         bool               // the client sent store:false
	memory             *sessionMemory     // the WebSocket session's store:false turns
	chat               *chatConversion    // the request converted for Chat upstreams
}

// recordable reports whether the response may later be named by
// previous_response_id, so its anchor is worth a durable write. Over HTTP a
// store:false response cannot be (the upstream keeps nothing); on a
// WebSocket it can, from the socket's own state.
func (r *clientRequest) recordable() bool {
	return !r.storeFalse || r.viaWebSocket
}

func (r *clientRequest) surface() string {
	if r.viaWebSocket {
		return hostabi.SurfaceWebSocket
	}
	if r.stream {
		return r.ep.streamLabel
	}
	return r.ep.jsonLabel
}

// readBody reads the request body, decoding a gzip or zstd
// Content-Encoding, and answers payload_too_large when the raw or the
// decoded body exceeds limit.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apierr.Error) {
	if r.ContentLength > limit {
		return nil, apierr.TooLarge(limit)
	}
	raw := io.Reader(http.MaxBytesReader(w, r.Body, limit))
	var body io.Reader = raw
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(raw)
		if err != nil {
			return nil, bodyError(err, limit, "the gzip request body is corrupt")
		}
		defer zr.Close()
		body = zr
	case "zstd":
		zr, err := zstd.NewReader(raw, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(limit)+1))
		if err != nil {
			return nil, bodyError(err, limit, "the zstd request body is corrupt")
		}
		defer zr.Close()
		body = zr
	default:
		return nil, &apierr.Error{Status: http.StatusUnsupportedMediaType, Type: apierr.TypeInvalidRequest, Code: "unsupported_content_encoding",
			Message: fmt.Sprintf("Content-Encoding %q is not supported; send identity, gzip or zstd", enc)}
	}
	data, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return nil, bodyError(err, limit, "could not read the request body")
	}
	if int64(len(data)) > limit {
		return nil, apierr.TooLarge(limit)
	}
	return data, nil
}

func bodyError(err error, limit int64, what string) *apierr.Error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return apierr.TooLarge(limit)
	}
	return apierr.Invalid("", "invalid_body", "%s: %v", what, err)
}

// parseRequest validates the fields the gateway relies on and leaves every
// other field untouched, so unknown fields pass through to the upstream.
func parseRequest(ep endpoint, body []byte) (*clientRequest, *apierr.Error) {
	if !gjson.ValidBytes(body) {
		return nil, apierr.Invalid("", apierr.CodeInvalidJSON, "the request body is not valid JSON")
	}
	root := parseJSON(body)
	if !root.IsObject() {
		return nil, apierr.Invalid("", apierr.CodeInvalidType, "the request body must be a JSON object")
	}
	req := &clientRequest{ep: ep, body: body}
	if err := req.readFields(root); err != nil {
		return nil, err
	}
	return req, nil
}

// readFields (re)reads model, stream and previous_response_id, and checks
// the endpoint's required input field.
func (r *clientRequest) readFields(root gjson.Result) *apierr.Error {
	// One pass over the top-level keys: the body may be megabytes of history.
	var model, stream, prev, input, messages, store gjson.Result
	var keys []string
	var dup string
	root.ForEach(func(key, value gjson.Result) bool {
		// A repeated key is ambiguous: a policy could edit one copy while the
		// upstream reads the other.
		for _, k := range keys {
			if k == key.Str {
				dup = k
				return false
			}
		}
		keys = append(keys, key.Str)
		switch key.Str {
		case "model":
			model = value
		case "stream":
			stream = value
		case "previous_response_id":
			prev = value
		case "input":
			input = value
		case "messages":
			messages = value
		case "store":
			store = value
		}
		return true
	})
	if dup != "" {
		return apierr.Invalid(dup, "duplicate_key", "the request body has the top-level key %q more than once", dup)
	}
	switch {
	case !model.Exists() || model.Type == gjson.Null:
		return apierr.Invalid("model", apierr.CodeMissingField, "you must provide a model parameter")
	case model.Type != gjson.String:
		return apierr.Invalid("model", apierr.CodeInvalidType, "model must be a string, got %s", jsonKind(model))
	case strings.TrimSpace(model.Str) == "":
		return apierr.Invalid("model", apierr.CodeMissingField, "model must not be empty")
	}
	r.model = strings.Clone(model.Str)
	switch {
	case !stream.Exists() || stream.Type == gjson.Null:
		r.stream = false
	case stream.Type == gjson.True || stream.Type == gjson.False:
		r.stream = stream.Bool()
	default:
		return apierr.Invalid("stream", apierr.CodeInvalidType, "stream must be a boolean, got %s", jsonKind(stream))
	}
	r.storeFalse = store.Type == gjson.False
	r.previousResponseID = ""
	if prev.Exists() && prev.Type != gjson.Null {
		if prev.Type != gjson.String {
			return apierr.Invalid("previous_response_id", apierr.CodeInvalidType, "previous_response_id must be a string, got %s", jsonKind(prev))
		}
		r.previousResponseID = strings.Clone(prev.Str)
	}
	if r.ep.chat {
		switch {
		case !messages.Exists() || messages.Type == gjson.Null:
			return apierr.Invalid("messages", apierr.CodeMissingField, "you must provide a messages parameter")
		case !messages.IsArray():
			return apierr.Invalid("messages", apierr.CodeInvalidType, "messages must be an array, got %s", jsonKind(messages))
		case messages.Raw == "[]" || strings.TrimSpace(messages.Raw[1:len(messages.Raw)-1]) == "":
			return apierr.Invalid("messages", apierr.CodeMissingField, "messages must not be empty")
		}
		return nil
	}
	switch {
	case !input.Exists() || input.Type == gjson.Null:
		return apierr.Invalid("input", apierr.CodeMissingField, "you must provide an input parameter")
	case input.Type != gjson.String && !input.IsArray():
		return apierr.Invalid("input", apierr.CodeInvalidType, "input must be a string or an array of items, got %s", jsonKind(input))
	}
	return nil
}

func jsonKind(v gjson.Result) string {
	switch {
	case v.IsObject():
		return "an object"
	case v.IsArray():
		return "an array"
	case v.Type == gjson.String:
		return "a string"
	case v.Type == gjson.Number:
		return "a number"
	case v.Type == gjson.True || v.Type == gjson.False:
		return "a boolean"
	}
	return "null"
}

// LogID renders an identifier for logs as sha256:<12 hex>, never raw.
func LogID(id string) string {
	if id == "" {
		return ""
	}
	return store.RedactID(id)
}

// policyHeaders is the subset of client headers a rewrite policy may read.
func policyHeaders(h http.Header) map[string]string {
	out := make(map[string]string, 8)
	for k, v := range h {
		lk := strings.ToLower(k)
		switch lk {
		case "authorization", "api-key", "cookie", "proxy-authorization":
			continue
		}
		if len(v) > 0 {
			out[lk] = v[0]
		}
	}
	return out
}

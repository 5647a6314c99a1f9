package streaminput

import (
	"context"
	"errors"

	"github.com/tidwall/gjson"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/jsonx"
)

// Every JSON document a client sends (create, chunk and finish bodies, Mode A
// lines, WebSocket input_chunk and response.create frames) goes through
// checkJSON before anything else parses it: gjson's validator and
// encoding/json recurse once per nesting level, and a few million '[' would
// overflow the goroutine stack and kill the process. Everything parsed later
// (templates, chunks, the assembled body) is a part of a checked document,
// and the functions that parse them check again where their input could come
// from elsewhere (the store, a WebSocket frame).

// checkJSON checks b's nesting depth (iteratively, stopping when ctx ends),
// then that it is valid JSON. what names the document in the error.
func checkJSON(ctx context.Context, b []byte, maxDepth int, what string) *apierr.Error {
	if aerr := checkDepth(ctx, b, maxDepth, what); aerr != nil {
		return aerr
	}
	if !gjson.ValidBytes(b) {
		return apierr.Invalid("", apierr.CodeInvalidJSON, "%s is not valid JSON", what)
	}
	return nil
}

// checkDepth is the nesting check alone.
func checkDepth(ctx context.Context, b []byte, maxDepth int, what string) *apierr.Error {
	if ctx == nil {
		ctx = context.Background()
	}
	err := jsonx.CheckDepthContext(ctx, b, maxDepth)
	if err == nil {
		return nil
	}
	var de *jsonx.DepthError
	if errors.As(err, &de) {
		return apierr.Invalid("", CodeNestingTooDeep, "%s nests objects or arrays deeper than the limit of %d levels", what, de.Limit)
	}
	return errClientGone() // ctx ended: the client left
}

// keyCheckStride is how many members forEachMember reads between checks
// of its context.
const keyCheckStride = 4096

// forEachMember calls fn for each member of the object obj, in one pass,
// and refuses a key that appears twice (400 duplicate_key, param
// paramPrefix+key): an ambiguous document, since parsers disagree on which
// copy wins. It stops with the client-gone error when ctx ends.
func forEachMember(ctx context.Context, obj gjson.Result, paramPrefix string, fn func(key string, v gjson.Result)) *apierr.Error {
	if ctx == nil {
		ctx = context.Background()
	}
	seen := map[string]struct{}{}
	var aerr *apierr.Error
	n := 0
	obj.ForEach(func(k, v gjson.Result) bool {
		if n++; n%keyCheckStride == 0 && ctx.Err() != nil {
			aerr = errClientGone()
			return false
		}
		if _, dup := seen[k.Str]; dup {
			aerr = apierr.Invalid(paramPrefix+k.Str, CodeDuplicateKey, "the object has the key %.64q more than once", k.Str)
			return false
		}
		seen[k.Str] = struct{}{}
		fn(k.Str, v)
		return true
	})
	return aerr
}

package streaminput

import (
	"context"
	"encoding/base64"
	"fmt"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// The assembled request must fit in Options.MaxRequestBytes (Sluice:
// limits.max_body_bytes), or the gateway refuses it with 413 after the
// whole input was acknowledged (README "Limits"). A session therefore
// keeps an upper bound of its assembled size, updated chunk by chunk
// without assembling: the template's own share (requestBase), each chunk's
// payload as it is encoded (encodedSize), and the JSON around each content
// part a chunk may start (partBound).

// partOverhead bounds the JSON around one content part, its format aside
// (the longest is a Responses input_image: type, detail, the data URL's
// prefix, the separators), with room to spare.
const partOverhead = 128

// encodedSize bounds a chunk's payload as the assembled request carries
// it: text as a JSON string's content (escaped), bytes base64-encoded. The
// sum over chunks bounds their concatenation's encoding too: base64 of a
// join is no longer than the sum of the parts', and a JSON escape never
// grows when bytes a chunk boundary split become one valid character.
func encodedSize(c chunk) int64 {
	if c.meta.modality == ModalityText {
		return int64(len(jsonString(c.payload))) - 2 // without the quotes
	}
	return int64(base64.StdEncoding.EncodedLen(len(c.payload)))
}

// partBound bounds the JSON a chunk adds when it starts a content part.
func partBound(m chunkMeta) int64 { return partOverhead + 6*int64(len(m.format)) }

// joinsPart reports whether a chunk with meta next, right after one with
// meta prev, extends prev's content part (groupChunks) rather than
// starting its own.
func joinsPart(prev, next chunkMeta) bool {
	return !next.newPart && prev.modality == next.modality && prev.format == next.format
}

// requestBase bounds the template's share of the assembled request: the
// template, what merging text into it adds (its last user text escaped
// again, a user message added when it has none), and what merging bytes
// adds (that text moved into a content part, the parts array). Both are
// measured by assembling a one-byte chunk of each kind; a template the
// assembler refuses counts as itself (its request fails on that error).
func requestBase(ctx context.Context, t template, maxDepth int) int64 {
	n := int64(len(t.body))
	text, aerr := assemble(ctx, t.chat, t.body, []chunk{{meta: chunkMeta{modality: ModalityText}, payload: []byte("a")}}, maxDepth)
	if aerr != nil {
		return n
	}
	bin, aerr := assemble(ctx, t.chat, t.body, []chunk{{meta: chunkMeta{modality: ModalityAudio, format: "wav"}, payload: []byte{0}}}, maxDepth)
	if aerr != nil {
		return n
	}
	return n + max(0, int64(len(text))-n-1) + max(0, int64(len(bin))-n)
}

// errRequestTooLarge answers a chunk that would make the assembled
// request larger than the gateway takes.
func errRequestTooLarge(limit int64) *apierr.Error {
	e := apierr.TooLarge(limit)
	e.Message = fmt.Sprintf("this chunk would make the assembled request (the template, text chunks JSON-escaped, byte chunks base64-encoded) "+
		"larger than the gateway limit of %d bytes; the session is closed", limit)
	return e
}

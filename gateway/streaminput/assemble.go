package streaminput

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/sluice-gw/sluice/internal/apierr"
)

// group is a run of chunks that becomes one content part: consecutive text
// chunks concatenate, and so do consecutive byte chunks of the same modality
// and format (a large file sent in pieces), unless a chunk sets new_part.
type group struct {
	modality string
	format   string
	data     []byte
}

func groupChunks(chunks []chunk) []group {
	var gs []group
	for i := range chunks {
		c := &chunks[i]
		if n := len(gs); n > 0 && !c.meta.newPart && gs[n-1].modality == c.meta.modality && gs[n-1].format == c.meta.format {
			gs[n-1].data = append(gs[n-1].data, c.payload...)
			continue
		}
		if c.meta.modality == ModalityText && len(c.payload) == 0 && !c.meta.newPart {
			continue // an empty text chunk (often the end_of_input marker) adds nothing
		}
		gs = append(gs, group{modality: c.meta.modality, format: c.meta.format, data: append([]byte(nil), c.payload...)})
	}
	return gs
}

// oneText reports whether the chunks are one run of text, which extends a
// string content as a string: text split by new_part (several groups)
// makes the content parts, one a group, as a string cannot keep them
// apart (gateway/streaminput/README.md, new_part).
func oneText(gs []group) bool {
	return len(gs) == 1 && gs[0].modality == ModalityText
}

// assemble merges chunks (in sequence order) into a request template.
// Text goes into the last user message (Responses: the input string, or the
// last role:user item's text; Chat: the last user message's content),
// extending its trailing text; audio and images become input parts after it.
// Without a user message one is appended. The template is checked against
// maxDepth first (its callers checked it already; this keeps gjson and
// sjson from ever walking a deeper one), and the parts the chunks add nest
// no deeper than a template's own content parts.
func assemble(ctx context.Context, chat bool, template []byte, chunks []chunk, maxDepth int) ([]byte, *apierr.Error) {
	gs := groupChunks(chunks)
	if len(gs) == 0 {
		return template, nil
	}
	if aerr := checkDepth(ctx, template, maxDepth, "the template"); aerr != nil {
		aerr.Param = "template"
		return nil, aerr
	}
	d := dialect{chat: chat}
	field := "input"
	if chat {
		field = "messages"
	}
	root := gjson.ParseBytes(template)
	cur := root.Get(field)
	var (
		path string
		raw  []byte
	)
	switch {
	case !chat && cur.Type == gjson.String, !cur.Exists(), cur.Type == gjson.Null:
		content := d.mergeContent(cur, gs)
		path, raw = field, content
		if chat || !oneText(gs) {
			raw = append(append([]byte{'['}, d.userMessage(content)...), ']')
		}
	case cur.IsArray():
		last := -1
		for i, item := range cur.Array() {
			if item.Get("role").Str == "user" && (chat || item.Get("type").Str == "" || item.Get("type").Str == "message") {
				last = i
			}
		}
		if last < 0 {
			path, raw = field+".-1", d.userMessage(d.mergeContent(gjson.Result{}, gs))
		} else {
			content := cur.Array()[last].Get("content")
			path, raw = field+"."+strconv.Itoa(last)+".content", d.mergeContent(content, gs)
		}
	default:
		return nil, apierr.Invalid("template."+field, apierr.CodeInvalidType, "the template's %s must be %s", field, map[bool]string{true: "an array", false: "a string or an array"}[chat])
	}
	out, err := sjson.SetRawBytesOptions(template, path, raw, &sjson.Options{Optimistic: false, ReplaceInPlace: false})
	if err != nil {
		return nil, apierr.Invalid("template", apierr.CodeInvalidTemplate, "the chunks could not be merged into the template: %v", err)
	}
	return out, nil
}

// dialect renders content parts for Responses or Chat Completions.
type dialect struct{ chat bool }

func (d dialect) textType() string {
	if d.chat {
		return "text"
	}
	return "input_text"
}

func (d dialect) userMessage(content []byte) []byte {
	var b bytes.Buffer
	if d.chat {
		b.WriteString(`{"role":"user","content":`)
	} else {
		b.WriteString(`{"type":"message","role":"user","content":`)
	}
	b.Write(content)
	b.WriteByte('}')
	return b.Bytes()
}

// mergeContent returns the new content of a user message: existing content
// (a string, an array of parts, or absent) extended with the groups.
func (d dialect) mergeContent(existing gjson.Result, gs []group) []byte {
	var prefix string
	var parts [][]byte
	switch {
	case existing.Type == gjson.String:
		prefix = existing.Str
	case existing.IsArray():
		for _, p := range existing.Array() {
			parts = append(parts, []byte(p.Raw))
		}
	}
	if oneText(gs) && !existing.IsArray() {
		var text []byte
		text = append(text, prefix...)
		for _, g := range gs {
			text = append(text, g.data...)
		}
		return jsonString(text)
	}
	if prefix != "" {
		parts = append(parts, d.textPart([]byte(prefix)))
	}
	for i, g := range gs {
		if g.modality == ModalityText {
			n := len(parts)
			// Text extends the message's trailing text part.
			if i == 0 && n > 0 && gjson.GetBytes(parts[n-1], "type").Str == d.textType() && gjson.GetBytes(parts[n-1], "text").Type == gjson.String {
				old := gjson.GetBytes(parts[n-1], "text").Str
				if merged, err := sjson.SetRawBytes(parts[n-1], "text", jsonString(append([]byte(old), g.data...))); err == nil {
					parts[n-1] = merged
					continue
				}
			}
			parts = append(parts, d.textPart(g.data))
			continue
		}
		parts = append(parts, d.bytesPart(g))
	}
	return append(append([]byte{'['}, bytes.Join(parts, []byte{','})...), ']')
}

func (d dialect) textPart(text []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"type":"`)
	b.WriteString(d.textType())
	b.WriteString(`","text":`)
	b.Write(jsonString(text))
	b.WriteByte('}')
	return b.Bytes()
}

func (d dialect) bytesPart(g group) []byte {
	var b bytes.Buffer
	enc := base64.StdEncoding
	switch {
	case g.modality == ModalityAudio:
		b.WriteString(`{"type":"input_audio","input_audio":{"data":"`)
		b.WriteString(enc.EncodeToString(g.data))
		b.WriteString(`","format":`)
		b.Write(jsonString([]byte(g.format)))
		b.WriteString(`}}`)
	case d.chat:
		b.WriteString(`{"type":"image_url","image_url":{"url":"data:image/`)
		b.WriteString(g.format)
		b.WriteString(";base64,")
		b.WriteString(enc.EncodeToString(g.data))
		b.WriteString(`"}}`)
	default:
		b.WriteString(`{"type":"input_image","detail":"auto","image_url":"data:image/`)
		b.WriteString(g.format)
		b.WriteString(";base64,")
		b.WriteString(enc.EncodeToString(g.data))
		b.WriteString(`"}`)
	}
	return b.Bytes()
}

// jsonString quotes s as a JSON string without HTML escaping, so that the
// upstream sees the client's text byte for byte.
func jsonString(s []byte) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(string(s))
	return bytes.TrimRight(b.Bytes(), "\n")
}

package sent

import (
	"bytes"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// partMember is a member the spec requires of a part, with the value a part
// that lacks it is given.
type partMember struct{ name, zero string }

// requiredPartMembers are the members besides type that OpenAI's OpenAPI
// spec requires of an output part of type typ (OutputTextContent,
// RefusalContent, ReasoningTextContent, SummaryTextContent); nil for a type
// it does not describe there, which is left as it came.
func requiredPartMembers(typ string) []partMember {
	switch typ {
	case "output_text":
		return []partMember{{"text", `""`}, {"annotations", "[]"}, {"logprobs", "[]"}}
	case "refusal":
		return []partMember{{"refusal", `""`}}
	case "reasoning_text", "summary_text":
		return []partMember{{"text", `""`}}
	}
	return nil
}

// lacks returns which of the members its type requires part lacks: a
// Responses upstream may describe a part minimally, as vLLM's and
// llama.cpp's servers send {"type":"output_text","text":""}. It reads the
// part's members in one pass (its text may be the whole answer).
func lacks(part gjson.Result) []partMember {
	if !part.IsObject() {
		return nil
	}
	required := requiredPartMembers(part.Get("type").Str)
	if required == nil {
		return nil
	}
	var seen uint8
	part.ForEach(func(k, _ gjson.Result) bool {
		for i, m := range required {
			if k.Str == m.name {
				seen |= 1 << i
			}
		}
		return true
	})
	var missing []partMember
	for i, m := range required {
		if seen&(1<<i) == 0 {
			missing = append(missing, m)
		}
	}
	return missing
}

// CompletePart returns part with every member the spec requires of its
// type that it lacks, as an empty value (annotations and logprobs [] for
// output_text, an empty refusal, …), so that a Response the gateway renders
// is complete (README, "What it promises"); the members it has, an
// upstream's annotations and logprobs among them, stay as they came. It
// returns part itself when it lacks none or is not a part the spec
// describes; a new slice otherwise.
func CompletePart(part []byte) []byte {
	missing := lacks(gjson.ParseBytes(part))
	if len(missing) == 0 {
		return part
	}
	body := bytes.TrimSpace(part)
	body = bytes.TrimSpace(body[:len(body)-1]) // an object (lacks saw one): without its closing }
	out := make([]byte, 0, len(body)+48)
	out = append(out, body...)
	empty := body[len(body)-1] == '{'

	for _, m := range missing {
		if !empty {
			out = append(out, ',')
		}
		empty = false
		out = append(out, '"')
		out = append(out, m.name...)
		out = append(out, `":`...)
		out = append(out, m.zero...)
	}
	return append(out, '}')
}

// CompleteContent returns item (an output item) with every part of its
// content and summary arrays complete (CompletePart). It returns item
// itself when no part lacks a member.
func CompleteContent(item []byte) []byte {
	for _, field := range [...]string{"content", "summary"} {
		parts := gjson.GetBytes(item, field)
		if !parts.IsArray() {
			continue
		}
		incomplete := false
		parts.ForEach(func(_, p gjson.Result) bool {
			incomplete = len(lacks(p)) > 0
			return !incomplete
		})
		if !incomplete {
			continue
		}
		b := []byte{'['}
		parts.ForEach(func(_, p gjson.Result) bool {
			if len(b) > 1 {
				b = append(b, ',')
			}
			b = append(b, CompletePart([]byte(p.Raw))...)
			return true
		})
		if out, err := sjson.SetRawBytes(item, field, append(b, ']')); err == nil {
			item = out
		}
	}
	return item
}

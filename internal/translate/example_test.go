package translate_test

import (
	"fmt"

	"github.com/sluice-gw/sluice/internal/apierr"
	"github.com/sluice-gw/sluice/internal/translate"
)

// A Chat upstream behind a Responses client: convert the request, then pump
// the upstream's data: payloads through a Stream. (The gateway writes each
// Event as "event: <Type>\ndata: <Data>\n\n".)
func Example() {
	chat, info, aerr := translate.ToChat([]byte(`{"model":"qwen3","input":"Say hi","stream":true}`), nil, translate.RequestOptions{})
	if aerr != nil {
		fmt.Println(aerr)
		return
	}
	fmt.Println(string(chat))

	n := 0
	s := translate.NewStream(translate.StreamOptions{
		Model: info.Model, Request: info.Echo, CreatedAt: 1750000000,
		NewID: func(prefix string) string { n++; return fmt.Sprintf("%s_%d", prefix, n) },
	})
	events := s.Start()
	for _, data := range []string{
		`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}`,
		`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	} {
		ev, err := s.Chunk([]byte(data))
		if err != nil {
			events = append(events, s.Fail(apierr.StreamIncomplete("bad chunk: %v", err))...)
			break
		}
		events = append(events, ev...)
	}
	events = append(events, s.Finish()...) // at data: [DONE]
	for _, e := range events {
		fmt.Println(e.Type)
	}
	// Output:
	// {"model":"qwen3","messages":[{"role":"user","content":"Say hi"}],"stream":true,"stream_options":{"include_usage":true}}
	// response.created
	// response.in_progress
	// response.output_item.added
	// response.content_part.added
	// response.output_text.delta
	// response.output_text.done
	// response.content_part.done
	// response.output_item.done
	// response.completed
}

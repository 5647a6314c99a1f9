package sse_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluice-gw/sluice/gateway/sse"
)

func ExampleReader() {
	upstream := strings.NewReader("" +
		": keepalive\n\n" +
		"event: response.output_text.delta\r\n" +
		"data: {\"delta\":\"Hi\"}\r\n\r\n" +
		"error: {\"message\":\"context shift is disabled\"}\n\n" +
		"data: [DONE]\n\n" +
		"data: {\"cut\":")
	r := sse.NewReader(upstream, 0)
	for {
		ev, err := r.Next()
		if err == io.EOF {
			fmt.Println("clean end")
			return
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			fmt.Println("upstream cut the stream")
			return
		}
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("name=%q data=%q error=%q done=%v\n", ev.Name, ev.Data, ev.Error, ev.Done)
	}
	// Output:
	// name="response.output_text.delta" data="{\"delta\":\"Hi\"}" error="" done=false
	// name="" data="" error="{\"message\":\"context shift is disabled\"}" done=false
	// name="" data="[DONE]" error="" done=true
	// upstream cut the stream
}

func ExampleWriter() {
	w := sse.NewWriter(os.Stdout) // an http.ResponseWriter in the gateway
	_ = w.WriteEvent("response.created", []byte(`{"type":"response.created"}`))
	_ = w.WriteData(nil) // empty data is never forwarded
	_ = w.WriteComment("keepalive")
	_ = w.WriteData([]byte("two\r\nlines"))
	_ = w.WriteDone()
	// Output:
	// event: response.created
	// data: {"type":"response.created"}
	//
	// : keepalive
	//
	// data: two
	// data: lines
	//
	// data: [DONE]
}

// Command gofixture is a test policy written with the Go SDK that misbehaves
// on request, to test the runtime with a real Go guest. Built to
// plugins/testdata/gofixture.wasm by plugins/testdata/build.sh.
//
// recover: the input's code picks the behaviour: "loop" spins forever,
// "oom" allocates until the memory cap, "panic" panics, "exit" calls
// os.Exit, "error" returns an error, "defer" defers; anything else answers
// fail_closed with code "go:" + the code.
//
// rewrite: the header x-fixture picks edits: "edit" renames the model and
// drops the web_search tool, "headers" sets x-set and removes x-drop,
// "upstream" chooses "backup", "reject" rejects with 429, "panic" panics
// after an edit.
//
// stream_event: replaces "secret" with "[redacted]" in
// response.output_text.delta events (as stream_redact.wat does), passes the
// rest.
package main

import (
	"errors"
	"os"
	"strings"

	"github.com/sluice-gw/sluice/sdk"
)

var sink [][]byte

func init() {
	sdk.Register(sdk.Policy{
		Recover: func(in sdk.RecoverInput) (sdk.RecoverOutput, error) {
			switch in.Code {
			case "loop":
				for {
					sink = sink[:0]
				}
			case "oom":
				for {
					sink = append(sink, make([]byte, 1<<20))
				}
			case "panic":
				panic("fixture panic: " + in.Message)
			case "exit":
				os.Exit(3)
			case "error":
				return sdk.RecoverOutput{}, errors.New("fixture error")
			case "defer":
				return sdk.RecoverOutput{}, sdk.ErrDefer
			}
			sdk.Log(sdk.LevelDebug, "gofixture recover "+in.Code)
			return sdk.RecoverOutput{Verdict: sdk.FailClosed, Code: "go:" + in.Code, Message: strings.ToUpper(in.Message)}, nil
		},
		Rewrite: func(req *sdk.Request) error {
			switch req.Header("x-fixture") {
			case "edit":
				if err := req.SetString("model", req.Model()+"-edited"); err != nil {
					return err
				}
				if _, err := req.Delete(`tools.#(type=="web_search")`); err != nil {
					return err
				}
				if n, ok := req.Len("tools"); !ok || n != 1 {
					return errors.New("tools length after delete")
				}
				raw, ok := req.Get("input.0.content")
				if !ok {
					return errors.New("no input content")
				}
				return req.Set("echo", raw)
			case "headers":
				if err := req.SetHeader("X-Set", "yes"); err != nil {
					return err
				}
				if err := req.SetHeader("authorization", "nope"); err == nil {
					return errors.New("authorization was settable")
				}
				return req.RemoveHeader("x-drop")
			case "upstream":
				return req.UseUpstream("backup")
			case "reject":
				return req.Reject(429, "too_many_tools", "tools", "too many tools")
			case "panic":
				_ = req.SetString("model", "panicked")
				panic("fixture rewrite panic")
			}
			return nil
		},
		StreamEvent: func(ev sdk.StreamEvent) (sdk.StreamVerdict, error) {
			if ev.Type != "response.output_text.delta" || !strings.Contains(ev.Delta, "secret") {
				return sdk.PassEvent(), nil
			}
			return sdk.ReplaceDelta(strings.ReplaceAll(ev.Delta, "secret", "[redacted]")), nil
		},
		SelfTest: func() error {
			if sdk.Now().Year() < 2024 {
				return errors.New("host clock looks wrong")
			}
			return nil
		},
	})
}

func main() {}

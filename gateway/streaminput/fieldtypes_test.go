package streaminput_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sluice-gw/sluice/gateway/streaminput"
)

// A template's model of the wrong type is reported as a wrong type, as the
// top-level model is, not as missing; an absent, null or blank one is still
// missing. Both modes parse the template the same way.
func TestTemplateModelType(t *testing.T) {
	e := newEnv(t, envConfig{})
	cases := []struct {
		name, template, code string
	}{
		{"a number", `{"model":5,"input":"x"}`, "invalid_type"},
		{"an object", `{"model":{"id":"gpt-fake-1"},"input":"x"}`, "invalid_type"},
		{"a boolean", `{"model":true,"input":"x"}`, "invalid_type"},
		{"absent", `{"input":"x"}`, "missing_required_parameter"},
		{"null", `{"model":null,"input":"x"}`, "missing_required_parameter"},
		{"blank", `{"model":"  ","input":"x"}`, "missing_required_parameter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, b := e.do(http.MethodPost, streaminput.PathPrefix, sessionBody(streaminput.EndpointResponses, "", tc.template))
			if ae := wantError(t, "Mode B", code, b, http.StatusBadRequest, tc.code); ae.param() != "template.model" {
				t.Fatalf("Mode B: param %q, want template.model", ae.param())
			}
			code, _, b = e.postRaw(streaminput.EndpointResponses, strings.NewReader(`{"template":`+tc.template+"}\n"), modeAHeaders())
			if ae := wantError(t, "Mode A", code, b, http.StatusBadRequest, tc.code); ae.param() != "template.model" {
				t.Fatalf("Mode A: param %q, want template.model", ae.param())
			}
		})
	}
	if n := e.up.RequestCount(); n != 0 {
		t.Fatalf("a refused template reached the upstream %d times", n)
	}
}

// A session's first chunk that is not an object is named "chunk", and a
// field inside it "chunk.<field>".
func TestCreateChunkParam(t *testing.T) {
	e := newEnv(t, envConfig{})
	for chunk, param := range map[string]string{
		`5`:                                 "chunk",
		`"text"`:                            "chunk",
		`[]`:                                "chunk",
		`{"payload":5}`:                     "chunk.payload",
		`{"sequence_id":"0","payload":"a"}`: "chunk.sequence_id",
	} {
		body := `{"endpoint":"/v1/responses","template":{"model":"gpt-fake-1","input":"hi"},"chunk":` + chunk + `}`
		code, b := e.do(http.MethodPost, streaminput.PathPrefix, body)
		ae := decodeError(t, b)
		if code != http.StatusBadRequest || ae.param() != param {
			t.Fatalf("chunk %s: %d %s, want 400 with param %q", chunk, code, b, param)
		}
	}
}

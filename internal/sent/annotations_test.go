package sent_test

import (
	"testing"

	"github.com/sluice-gw/sluice/internal/sent"
)

// A part's annotations as its readers got them: counted (the next
// annotation_index) and listed in a rendering of the part, replacing the
// empty list its added form has; a part with none is left as it is.
func TestPartAnnotations(t *testing.T) {
	const (
		a = `{"type":"url_citation","url":"https://a","title":"A","start_index":0,"end_index":1}`
		b = `{"type":"url_citation","url":"https://b","title":"B, \"quoted\"","start_index":2,"end_index":3}`
	)
	tests := []struct {
		name        string
		annotations string
		count       int
		part, want  string
	}{
		{"none", "", 0, `{"type":"output_text","text":"","annotations":[]}`, `{"type":"output_text","text":"","annotations":[]}`},
		{"one", a, 1, `{"type":"output_text","text":"","annotations":[]}`, `{"type":"output_text","text":"","annotations":[` + a + `]}`},
		{"two, one with a comma in a string", a + "," + b, 2, `{"type":"output_text","text":"","annotations":[]}`,
			`{"type":"output_text","text":"","annotations":[` + a + "," + b + `]}`},
		{"part without the member", a, 1, `{"type":"output_text","text":""}`, `{"type":"output_text","text":"","annotations":[` + a + `]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &sent.Part{}
			if tt.annotations != "" {
				p.Annotations = []byte(tt.annotations)
			}
			if got := p.AnnotationCount(); got != tt.count {
				t.Errorf("AnnotationCount() = %d, want %d", got, tt.count)
			}
			if got := string(p.WithAnnotations([]byte(tt.part))); got != tt.want {
				t.Errorf("WithAnnotations = %s, want %s", got, tt.want)
			}
		})
	}
}

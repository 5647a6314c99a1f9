package plugins

import (
	"testing"

	"github.com/sluice-gw/sluice/hostabi"
)

// TestRewriteVerdictComparesTheBody: a rewrite is "changed" when the
// request the gateway sends changes (README "Policies"); a body handed
// back byte for byte as it came (a field set to the value it had) is not.
func TestRewriteVerdictComparesTheBody(t *testing.T) {
	in := hostabi.RewriteInput{Body: []byte(`{"model":"m1","input":"hi","stream":false}`)}
	for _, tt := range []struct {
		name string
		out  hostabi.RewriteOutput
		want string
	}{
		{"no edit", hostabi.RewriteOutput{}, RewriteUnchanged},
		{"same body back", hostabi.RewriteOutput{Body: []byte(`{"model":"m1","input":"hi","stream":false}`)}, RewriteUnchanged},
		{"body edited", hostabi.RewriteOutput{Body: []byte(`{"model":"m2","input":"hi","stream":false}`)}, RewriteChanged},
		{"same body and a header", hostabi.RewriteOutput{Body: in.Body, SetHeaders: map[string]string{"x-a": "1"}}, RewriteChanged},
		{"upstream chosen", hostabi.RewriteOutput{Upstream: "b"}, RewriteChanged},
		{"rejected", hostabi.RewriteOutput{Reject: &hostabi.RejectError{Status: 429}}, RewriteRejected},
	} {
		if got := RewriteVerdict(in, tt.out); got != tt.want {
			t.Errorf("%s: verdict %q, want %q", tt.name, got, tt.want)
		}
		if tt.want == RewriteUnchanged {
			if by := rewriteDecidedBy(tt.want, Trace{Steps: []TraceStep{{Policy: "20-w", Outcome: outOK.String()}}}); by != "default" {
				t.Errorf("%s: decided_by %q, want default", tt.name, by)
			}
		}
	}
}

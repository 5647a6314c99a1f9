package streaminput

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestWithAuditSplicesTheAudit: the audit is the envelope's last member,
// replaced (not repeated) by a later write, and the envelope stays JSON
// whose template and headers are unchanged.
func TestWithAuditSplicesTheAudit(t *testing.T) {
	env := encodeEnvelope(template{body: []byte(`{"model":"m","input":",\"audit\":1"}`)}, map[string][]string{"X-A": {"b"}})
	for _, late := range []int{0, 3, 7} {
		env = withAudit(env, envelopeAudit{Chunks: 2, Bytes: 5, Late: late})
		var e envelope
		if err := json.Unmarshal(env, &e); err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		if string(e.Template) != `{"model":"m","input":",\"audit\":1"}` || e.Headers.Get("X-A") != "b" || e.Audit == nil || e.Audit.Late != late {
			t.Fatalf("late %d: %s", late, env)
		}
		if n := strings.Count(string(env), `,"audit":`); n != 1 {
			t.Fatalf("late %d: %d audits in %s", late, n, env)
		}
		if a := auditOf(env); a == nil || a.Late != late || a.Chunks != 2 {
			t.Fatalf("late %d: auditOf %+v of %s", late, a, env)
		}
	}
}

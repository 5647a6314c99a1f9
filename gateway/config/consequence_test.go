package config

import "testing"

// TestARefusedBoundIsNotAppliedToAnotherKey: a byte limit refused for being
// past 1 TiB is not also used as the lower bound of the memory key that
// must hold it, which the file never wrote (README "Running it": no problem
// is reported as a consequence of another); in range, the bound still holds.
func TestARefusedBoundIsNotAppliedToAnotherKey(t *testing.T) {
	for _, tt := range []struct{ name, yaml, want string }{
		{"max_body_bytes past 1 TiB", "limits: {max_body_bytes: 1099511627777}\n",
			"line 1: limits.max_body_bytes: must be at most 1099511627776 (1 TiB)"},
		{"resume_max_bytes past 1 TiB", "streams: {resume_max_bytes: 1099511627777}\n",
			"line 1: streams.resume_max_bytes: must be at most 1099511627776 (1 TiB)"},
		{"max_body_bytes above body_memory_bytes", "limits: {max_body_bytes: 300, body_memory_bytes: 200}\n",
			"line 1: limits.body_memory_bytes: must be at least limits.max_body_bytes (300)"},
		{"resume_max_bytes above resume_memory_bytes", "streams: {resume_max_bytes: 300, resume_memory_bytes: 200}\n",
			"line 1: streams.resume_memory_bytes: must be at least streams.resume_max_bytes (300)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), env(nil))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v\nwant  %s (alone)", err, tt.want)
			}
		})
	}
}

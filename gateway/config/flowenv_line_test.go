package config

import "testing"

// TestUnquotedEnvRefInAFlowCollectionHasOneLine: the syntax error an
// unquoted ${VAR} inside {...} causes is reported at the reference's line
// alone, not also at the line yaml.v3 names (the one before the flow
// mapping, or none when it is on line 1); an earlier, unrelated syntax error
// keeps its own line, with the hint after it.
func TestUnquotedEnvRefInAFlowCollectionHasOneLine(t *testing.T) {
	const hint = `an unquoted ${KEY} inside [...] or {...} is not valid YAML; quote it: api_key: "${KEY}"`
	for _, tt := range []struct{ name, yaml, want string }{
		{"one line", "upstreams:\n  - {name: a, base_url: http://127.0.0.1:1/v1, api_key: ${KEY}}\n",
			`invalid YAML: line 2: did not find expected ',' or '}' (` + hint + `)`},
		{"split over lines", "# c1\n# c2\nlisten: 127.0.0.1:1\nupstreams:\n  - {name: a, base_url: http://127.0.0.1:1/v1,\n     api_key: ${KEY}}\n",
			`invalid YAML: line 6: did not find expected ',' or '}' (` + hint + `)`},
		{"on line 1", "limits: {max_body_bytes: 1, body_memory_bytes: ${BM:-268435456}}\n",
			`invalid YAML: line 1: did not find expected ',' or '}' (an unquoted ${BM:-268435456} inside [...] or {...} is not valid YAML; ` +
				`quote it: body_memory_bytes: "${BM:-268435456}")`},
		{"an earlier error of its own", "listen: 1\n\tdata_dir: x\nupstreams: [{name: a, base_url: http://127.0.0.1:1/v1, api_key: ${KEY}}]\n",
			`invalid YAML: yaml: line 2: found a tab character that violates indentation (line 3: ` + hint + `)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), env(map[string]string{"KEY": "k"}))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v\nwant      %s", err, tt.want)
			}
		})
	}
}
